"""A new run's only checkpoint whose manifest is torn (or was never written: the process
died in its commit) made a restart's ``load_latest`` resume an OLDER run's checkpoint in the
same directory: the torn checkpoint's run was unknown, so the newest readable one (the
older run's) chose the run to fall back within. Its ``meta.json`` (written before the
manifest) now names its run, and that run has nothing to fall back to: start afresh. A run's
own torn checkpoint still falls back within the run."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import torch

from danlu.train.checkpoint import CheckpointManager


def _w(value: float) -> dict[str, Any]:
    return {"w": torch.full((4,), float(value))}


def _older_run(root: Path) -> str:
    old = CheckpointManager(str(root), keep_last=5)
    for step in (100, 200):
        old.save(step, _w(step))
    old.close()
    assert old.run_id is not None
    return old.run_id


def _tear(root: Path, step: int, how: str) -> None:
    (ckpt,) = root.glob(f"ckpt-{step:012d}-*")
    manifest = ckpt / "MANIFEST.json"
    if how == "torn":
        manifest.write_bytes(manifest.read_bytes()[:40])
    else:
        manifest.unlink()


@pytest.mark.parametrize("how", ["torn", "missing"])
def test_a_torn_only_checkpoint_of_a_new_run_does_not_resume_the_older_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, how: str
) -> None:
    _older_run(tmp_path)
    new = CheckpointManager(str(tmp_path), keep_last=5)  # a new run: it did not resume
    new.save(10, _w(10))
    new.close()
    _tear(tmp_path, 10, how)
    with caplog.at_level(logging.WARNING):
        assert CheckpointManager(str(tmp_path)).load_latest() is None  # the restart
    assert "no valid checkpoint of this run" in caplog.text
    assert len(list(tmp_path.glob("ckpt-000000000200-*"))) == 1  # left where it is


def test_a_torn_checkpoint_of_the_run_still_falls_back_within_it(tmp_path: Path) -> None:
    run = _older_run(tmp_path)
    resumed = CheckpointManager(str(tmp_path), keep_last=5)
    assert resumed.load_latest()[0] == 200  # type: ignore[index]
    resumed.save(300, _w(300))
    resumed.close()
    _tear(tmp_path, 300, "torn")
    again = CheckpointManager(str(tmp_path))
    step, state = again.load_latest()  # type: ignore[misc]
    assert step == 200 and torch.equal(state["w"], torch.full((4,), 200.0))
    assert again.run_id == run


def test_a_torn_checkpoint_written_before_meta_named_its_run_falls_back_as_before(
    tmp_path: Path,
) -> None:
    """A checkpoint whose meta.json names no run (an earlier version's) tells nothing: the
    newest readable checkpoint's run is resumed, as before."""
    _older_run(tmp_path)
    new = CheckpointManager(str(tmp_path), keep_last=5)
    new.save(10, _w(10))
    new.close()
    (ckpt,) = tmp_path.glob("ckpt-000000000010-*")
    meta = json.loads((ckpt / "meta.json").read_text())
    meta.pop("run", None)
    (ckpt / "meta.json").write_text(json.dumps(meta))
    _tear(tmp_path, 10, "torn")
    assert CheckpointManager(str(tmp_path)).load_latest()[0] == 200  # type: ignore[index]


def test_a_new_run_dying_while_writing_its_tensors_does_not_resume_the_older_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its meta.json was written after tensors.pt: a process that died writing the tensors
    (the long part of a save) left a directory naming no run, and the restart resumed the
    older run's step 200. meta.json is written first now."""
    _older_run(tmp_path)
    new = CheckpointManager(str(tmp_path), keep_last=5)
    written = new.storage.write

    def dies_at_the_tensors(path: str, data: bytes) -> None:
        if path.endswith("tensors.pt"):
            raise KeyboardInterrupt  # the process ends here: nothing after runs
        written(path, data)

    monkeypatch.setattr(new.storage, "write", dies_at_the_tensors)
    monkeypatch.setattr(new.storage, "remove_dir", lambda name: None)  # no cleanup: it died
    with pytest.raises(KeyboardInterrupt):
        new.save(10, _w(10))
    (ckpt,) = tmp_path.glob("ckpt-000000000010-*")
    assert not (ckpt / "MANIFEST.json").exists()
    assert CheckpointManager(str(tmp_path)).load_latest() is None  # the restart
