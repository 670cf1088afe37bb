"""Torn checkpoints (the process died in the commit: no manifest, or a torn one) had no time
order: with two of two runs in the directory (run A died in a commit, then run B, started
afresh over A's directory, died in its first), B's restart resumed within both runs and took
A's last complete checkpoint, A's weights and data position. And a torn checkpoint counted as
newer than every complete one, so one that outlived a later run's commit (the process died
before its retention removed it) made the restart resume the torn one's run instead of the
later run's. Each save's ``meta.json`` (its first file) now records when it started
(``started_ns``, past every checkpoint's time in the directory, as a commit's
``created_ns``): the run resuming is the run of the newest checkpoint, torn or complete."""

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


def _dies_in_its_commit(mgr: CheckpointManager, step: int, root: Path) -> Path:
    """``mgr`` saves ``step`` and its process dies writing the manifest: nothing after runs
    (no cleanup, no retention)."""
    written = mgr.storage.write

    def dies_at_the_manifest(path: str, data: bytes) -> None:
        if path.endswith("MANIFEST.json"):
            raise KeyboardInterrupt
        written(path, data)

    mgr.storage.write = dies_at_the_manifest  # type: ignore[method-assign]
    mgr.storage.remove_dir = lambda name: None  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        mgr.save(step, _w(step))
    (ckpt,) = root.glob(f"ckpt-{step:012d}-*")
    assert not (ckpt / "MANIFEST.json").exists()
    return ckpt


def _run_a_died_in_a_commit(root: Path) -> str:
    """Run A: steps 100 and 200 complete, step 300 torn."""
    a = CheckpointManager(str(root), keep_last=5)
    for step in (100, 200):
        a.save(step, _w(step))
    _dies_in_its_commit(a, 300, root)
    assert a.run_id is not None
    return a.run_id


def test_a_new_runs_torn_checkpoint_after_an_older_runs_torn_one_starts_afresh(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _run_a_died_in_a_commit(tmp_path)
    b = CheckpointManager(str(tmp_path), keep_last=5)  # run B: started afresh
    _dies_in_its_commit(b, 10, tmp_path)  # B died in its first commit
    assert len(list(tmp_path.glob("ckpt-*"))) == 4  # A's 100, 200, torn 300; B's torn 10
    restart = CheckpointManager(str(tmp_path))
    with caplog.at_level(logging.WARNING):
        assert restart.load_latest() is None  # not A's step 200
    assert "no valid checkpoint of this run" in caplog.text
    assert restart.loaded is None and restart.run_id is None


def test_the_order_holds_when_the_new_runs_clock_is_behind(tmp_path: Path) -> None:
    """B's node clock is behind A's: its save still starts after A's torn checkpoint."""
    _run_a_died_in_a_commit(tmp_path)
    (torn_a,) = tmp_path.glob("ckpt-000000000300-*")
    meta = json.loads((torn_a / "meta.json").read_text())
    meta["started_ns"] = 2**62  # far in this clock's future
    (torn_a / "meta.json").write_text(json.dumps(meta))
    b = CheckpointManager(str(tmp_path), keep_last=5)
    torn_b = _dies_in_its_commit(b, 10, tmp_path)
    assert json.loads((torn_b / "meta.json").read_text())["started_ns"] > 2**62
    assert CheckpointManager(str(tmp_path)).load_latest() is None


def test_a_complete_checkpoint_newer_than_a_torn_one_is_resumed(tmp_path: Path) -> None:
    """B committed step 10 and died before its retention removed A's torn step 300: B's
    restart resumes B's step 10 (it resumed A's step 200)."""
    _run_a_died_in_a_commit(tmp_path)
    b = CheckpointManager(str(tmp_path), keep_last=5)
    b._retain = lambda committed: None  # type: ignore[method-assign]  # died before it
    b.save(10, _w(10))
    b.close()
    assert len(list(tmp_path.glob("ckpt-000000000300-*"))) == 1  # A's torn one is there
    restart = CheckpointManager(str(tmp_path))
    step, state = restart.load_latest()  # type: ignore[misc]
    assert step == 10 and torch.equal(state["w"], torch.full((4,), 10.0))
    assert restart.run_id == b.run_id


def test_the_newest_torn_checkpoint_of_the_resuming_run_falls_back_within_it(
    tmp_path: Path,
) -> None:
    """A's restart resumed step 200, joined run A and died in its commit of step 400: the
    next restart falls back to A's step 200 (both torn checkpoints are A's)."""
    run_a = _run_a_died_in_a_commit(tmp_path)
    again = CheckpointManager(str(tmp_path), keep_last=5)
    assert again.load_latest()[0] == 200  # type: ignore[index]
    _dies_in_its_commit(again, 400, tmp_path)
    restart = CheckpointManager(str(tmp_path))
    assert restart.load_latest()[0] == 200  # type: ignore[index]
    assert restart.run_id == run_a


def test_an_earlier_versions_torn_checkpoint_without_a_start_time_is_older(
    tmp_path: Path,
) -> None:
    """A torn checkpoint whose meta.json records no start (an earlier version wrote it)
    ranks before one that does; alone, it still names the run resuming, as before."""
    _run_a_died_in_a_commit(tmp_path)
    (torn_a,) = tmp_path.glob("ckpt-000000000300-*")
    meta = json.loads((torn_a / "meta.json").read_text())
    meta.pop("started_ns", None)
    (torn_a / "meta.json").write_text(json.dumps(meta))
    assert CheckpointManager(str(tmp_path)).load_latest()[0] == 200  # type: ignore[index]
    b = CheckpointManager(str(tmp_path), keep_last=5)
    _dies_in_its_commit(b, 10, tmp_path)
    assert CheckpointManager(str(tmp_path)).load_latest() is None
