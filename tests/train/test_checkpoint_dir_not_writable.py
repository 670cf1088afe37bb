"""A checkpoint directory that stops taking writes during a run (remounted read-only, its
permissions changed): the periodic save raises at once, its error noting the directory
and the fix (before: a bare ``[Errno 30] Read-only file system`` on a file of the half
written checkpoint, which was removed, so the path named no longer existed)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
import torch
from tests.train.train_helpers import mse_loss, tiny_model, tiny_regression

import danlu.train as dt
from danlu.train.checkpoint import CheckpointManager
from danlu.train.checkpoint.storage import LocalStorage


@pytest.mark.parametrize("code", [errno.EROFS, errno.EACCES])
def test_a_directory_refusing_writes_stops_the_run_naming_it_and_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = tiny_regression(64)

    def refused(self: LocalStorage, path: str, data: bytes) -> None:
        raise OSError(code, os.strerror(code), path)

    with (
        pytest.raises(OSError) as info,
        dt.init(
            model,
            opt,
            global_batch_size=16,
            dataset_size=64,
            checkpoint_dir=str(tmp_path),
            checkpoint_every_steps=2,
        ) as ctx,
    ):
        for batch in ctx.batches(data):
            ctx.step(batch, mse_loss)
            if ctx.step_num == 2:  # saved; then the directory turns read-only
                monkeypatch.setattr(LocalStorage, "write", refused)
    assert info.value.errno == code
    assert ctx.step_num == 4  # the run stopped at the save that failed, not later
    notes = " ".join(getattr(info.value, "__notes__", []))
    assert f"checkpoint of step 4 not saved: {tmp_path} cannot be written" in notes
    assert "give checkpoint_dir (DANLU_CHECKPOINT_DIR) a directory this job can write" in notes
    monkeypatch.undo()
    step, _ = CheckpointManager(str(tmp_path)).load_latest()  # type: ignore[misc]
    assert step == 2  # the last checkpoint written stays, complete
