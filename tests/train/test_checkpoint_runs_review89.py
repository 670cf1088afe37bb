"""Checkpoints of one run against another run's, and against a mode that cannot read them.

- A damaged newest checkpoint falls back only within its run (the manifest's ``run``, kept
  through every resume): before, a run started with ``resume=False`` over an older run's
  directory fell back (at a restart, or at an anomaly's rollback) into the older run's
  weights and data position.
- A manager without ``sharded=True`` skips sharded checkpoints but never removes them:
  before, it marked them invalid and its retention deleted them at its first save.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import torch
from train_helpers import mse_loss, tiny_model, tiny_regression

import danlu.train as dt
from danlu.train.checkpoint import CheckpointManager


def _w(value: float) -> dict[str, Any]:
    return {"w": torch.full((4,), float(value))}


def _dirs(root: Path, step: int) -> list[Path]:
    return sorted(root.glob(f"ckpt-{step:012d}-*"))


def _corrupt(ckpt: Path) -> None:
    """Bit rot in the checkpoint's tensors: its manifest no longer matches."""
    data = bytearray((ckpt / "tensors.pt").read_bytes())
    data[-100] ^= 0xFF
    (ckpt / "tensors.pt").write_bytes(bytes(data))


def _manifest(ckpt: Path) -> dict[str, Any]:
    return dict(json.loads((ckpt / "MANIFEST.json").read_text()))


def _older_run(root: Path) -> None:
    old = CheckpointManager(str(root), keep_last=5)
    for step in (100, 200):
        old.save(step, _w(step))
    old.close()


# -- fault 1: no fallback across runs ------------------------------------------------------
def test_a_damaged_checkpoint_of_a_new_run_never_falls_back_into_an_older_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Before, both loads below returned the older run's step 200."""
    _older_run(tmp_path)
    new = CheckpointManager(str(tmp_path), keep_last=5)  # a new run: it did not resume
    new.save(10, _w(10))
    (ckpt,) = _dirs(tmp_path, 10)
    _corrupt(ckpt)
    with caplog.at_level(logging.WARNING):
        assert new.load_latest() is None  # its rollback: nothing of its own
        # its restart: the newest checkpoint is this run's, so is its fallback
        assert CheckpointManager(str(tmp_path)).load_latest() is None
    assert "no valid checkpoint of this run" in caplog.text
    assert "2 checkpoint(s) of other runs" in caplog.text
    assert len(_dirs(tmp_path, 200)) == 1  # the older run's are left where they are


def test_a_run_falls_back_within_itself_across_its_restarts(tmp_path: Path) -> None:
    """A resumed run keeps its run: its damaged newest checkpoint falls back to the one
    before, written by the process before the restart."""
    _older_run(tmp_path)
    first = CheckpointManager(str(tmp_path), keep_last=5)
    first.save(1, _w(1))
    first.close()
    resumed = CheckpointManager(str(tmp_path), keep_last=5)
    assert resumed.load_latest()[0] == 1  # type: ignore[index]
    resumed.save(2, _w(2))
    resumed.close()
    (one,), (two,) = _dirs(tmp_path, 1), _dirs(tmp_path, 2)
    assert (
        _manifest(one)["run"] == _manifest(two)["run"] != _manifest(_dirs(tmp_path, 100)[0])["run"]
    )
    _corrupt(two)
    step, state = CheckpointManager(str(tmp_path)).load_latest()  # type: ignore[misc]
    assert step == 1 and torch.equal(state["w"], _w(1)["w"])


def test_checkpoints_written_before_runs_were_recorded_fall_back_as_before(
    tmp_path: Path,
) -> None:
    """A manifest without ``run`` (an older danlu's) is of any run: the fallback is as
    it was."""
    mgr = CheckpointManager(str(tmp_path), keep_last=5)
    for step in (1, 2):
        mgr.save(step, _w(step))
    mgr.close()
    for ckpt in tmp_path.glob("ckpt-*"):
        manifest = _manifest(ckpt)
        manifest.pop("run", None)
        (ckpt / "MANIFEST.json").write_text(json.dumps(manifest))
    _corrupt(_dirs(tmp_path, 2)[0])
    assert CheckpointManager(str(tmp_path)).load_latest()[0] == 1  # type: ignore[index]


def _init(model: torch.nn.Module, directory: Path, **kwargs: Any) -> dt.TrainContext:
    return dt.init(
        model,
        torch.optim.SGD(model.parameters(), lr=0.01),
        global_batch_size=4,
        dataset_size=32,
        shuffle=False,
        checkpoint_dir=str(directory),
        metrics_file=False,
        progress=False,
        environ={},
        **kwargs,
    )


def test_a_rollback_never_goes_into_an_older_runs_checkpoint_when_its_own_is_damaged(
    tmp_path: Path,
) -> None:
    """A run started with resume=False over an older run's directory: its checkpoint of
    step 2 is damaged when an anomaly at step 3 rolls back. Before, the rollback loaded the
    older run's newest checkpoint (step 6: other weights, 16 samples further on)."""
    with _init(tiny_model(seed=1), tmp_path, checkpoint_every_steps=3) as old:
        data = tiny_regression(n=32, seed=1)
        for _ in old.epochs(1):
            for batch in old.batches(data):
                old.step(batch, mse_loss)
    data = tiny_regression(n=32)
    data.tensors[0][2 * 4 + 1, 0] = float("nan")  # the third batch: a NaN loss at step 3
    with _init(
        tiny_model(), tmp_path, checkpoint_every_steps=2, anomaly="rollback", resume=False
    ) as ctx:
        batches = ctx.batches(data)
        for _ in range(2):
            ctx.step(next(batches), mse_loss)
        (own,) = _dirs(tmp_path, 2)
        _corrupt(own)
        ctx.step(next(batches), mse_loss)
        assert ctx.rollbacks == 0 and ctx.step_num == 3  # skipped: nothing of its own
        assert ctx.anomaly is not None and ctx.anomaly.counts == {"nonfinite_loss": 1}


# -- fault 2: retention keeps what it cannot read in its mode ------------------------------
def _as_sharded(ckpt: Path) -> None:
    """The checkpoint's manifest says ``sharded``: what a manager without ``sharded=True``
    cannot load (its files are not looked at before that)."""
    manifest = _manifest(ckpt)
    manifest["kind"] = "sharded"
    (ckpt / "MANIFEST.json").write_text(json.dumps(manifest))


def test_a_manager_without_sharded_never_removes_sharded_checkpoints(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Before, load_latest marked them invalid and the first save's retention deleted them."""
    writer = CheckpointManager(str(tmp_path), keep_last=2)
    for step in (5, 6):
        writer.save(step, _w(step))
    writer.close()
    sharded = [_dirs(tmp_path, 5)[0], _dirs(tmp_path, 6)[0]]
    for ckpt in sharded:
        _as_sharded(ckpt)
    mgr = CheckpointManager(str(tmp_path), keep_last=1)
    with caplog.at_level(logging.WARNING):
        assert mgr.load_latest() is None
    assert "only a CheckpointManager(sharded=True)" in caplog.text
    for step in (7, 8, 9):
        mgr.save(step, _w(step))
    mgr.close()
    assert all(ckpt.is_dir() for ckpt in sharded)
    # keep_last=1 counted its own checkpoints only: the newest of them is kept
    assert [i.step for i in CheckpointManager(str(tmp_path)).list_checkpoints()] == [5, 6, 9]
    step, _ = CheckpointManager(str(tmp_path)).load_latest()  # type: ignore[misc]
    assert step == 9
