"""A new run's only SHARDED checkpoint whose manifest is torn or missing (the process died in
its commit, or while the ranks wrote their shards) made a restart resume an older run's
checkpoint in the same directory, as a plain checkpoint's did before its ``meta.json`` named
its run: a sharded checkpoint had no file naming it. Rank 0 now writes a ``meta.json`` naming
the run before any shard; a sharded checkpoint written before (without one) still loads."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
from train_helpers import run_worker_ranks

torch = pytest.importorskip("torch")
if not torch.distributed.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

from danlu.train.checkpoint import CheckpointManager  # noqa: E402

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with an older run's sharded steps 1 and 2 and a new run's step 10,
    written by a real 2-rank gloo job (copied per test: each tears it its own way)."""
    directory = tmp_path_factory.mktemp("two-runs")
    run_worker_ranks(HERE / "sharded_worker.py", 2, [str(directory), "two-runs"], timeout=240)
    return directory / "ckpt"


def _copy(two_runs: Path, tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "ckpt"
    shutil.copytree(two_runs, root)
    (new,) = root.glob("ckpt-000000000010-*")
    return root, new


def test_the_new_runs_sharded_checkpoint_names_its_run_and_loads(
    two_runs: Path, tmp_path: Path
) -> None:
    root, new = _copy(two_runs, tmp_path)
    manifest = json.loads((new / "MANIFEST.json").read_text())
    assert "meta.json" in manifest["files"]  # checksummed with the shards
    assert json.loads((new / "meta.json").read_text())["run"] == manifest["run"]
    mgr = CheckpointManager(str(root), sharded=True)
    step, state = mgr.load_latest()  # type: ignore[misc]
    assert step == 10 and torch.equal(state["w"], torch.full((4,), 10.0))
    assert mgr.run_id == manifest["run"]


@pytest.mark.parametrize("how", ["torn", "missing", "died-in-its-shards"])
def test_a_torn_only_sharded_checkpoint_of_a_new_run_does_not_resume_the_older_run(
    two_runs: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, how: str
) -> None:
    root, new = _copy(two_runs, tmp_path)
    manifest = new / "MANIFEST.json"
    if how == "torn":
        manifest.write_bytes(manifest.read_bytes()[:40])
    else:
        manifest.unlink()
    if how == "died-in-its-shards":  # no skeleton, no DCP metadata, a shard half written
        (new / "skeleton.json").unlink()
        (new / ".metadata").unlink()
        shard = next(new.glob("*.distcp"))
        shard.write_bytes(shard.read_bytes()[:5])
    with caplog.at_level(logging.WARNING):
        assert CheckpointManager(str(root), sharded=True).load_latest() is None  # the restart
    assert "no valid checkpoint of this run" in caplog.text
    assert [p.name[:17] for p in sorted(root.glob("ckpt-*"))] == [
        "ckpt-000000000001",
        "ckpt-000000000002",
        "ckpt-000000000010",
    ]  # nothing removed by the load


def test_a_sharded_checkpoint_without_meta_json_still_loads(two_runs: Path, tmp_path: Path) -> None:
    """One written before sharded checkpoints had a meta.json (its manifest lists none)."""
    root, new = _copy(two_runs, tmp_path)
    manifest = json.loads((new / "MANIFEST.json").read_text())
    manifest["files"].pop("meta.json", None)
    (new / "MANIFEST.json").write_text(json.dumps(manifest))
    (new / "meta.json").unlink(missing_ok=True)
    step, state = CheckpointManager(str(root), sharded=True).load_latest()  # type: ignore[misc]
    assert step == 10 and state["step"] == 10


def test_torn_sharded_checkpoints_of_two_runs_resume_only_the_newer_run(
    two_runs: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The older run's step 2 and the new run's step 10 both torn (each died in a commit):
    the restart resumed the older run's step 1, as both runs' torn checkpoints named the run
    resuming. Rank 0's meta.json records when the save started, past the older run's."""
    root, new = _copy(two_runs, tmp_path)
    (old,) = root.glob("ckpt-000000000002-*")
    started = [json.loads((c / "meta.json").read_text())["started_ns"] for c in (old, new)]
    assert started[0] < started[1] < json.loads((new / "MANIFEST.json").read_text())["created_ns"]
    (old / "MANIFEST.json").unlink()
    (new / "MANIFEST.json").unlink()
    with caplog.at_level(logging.WARNING):
        assert CheckpointManager(str(root), sharded=True).load_latest() is None
    assert "no valid checkpoint of this run" in caplog.text
