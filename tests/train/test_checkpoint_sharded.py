"""Sharded checkpoints through torch.distributed.checkpoint: a 2-process gloo job on CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from train_helpers import run_worker_ranks

torch = pytest.importorskip("torch")
if not torch.distributed.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

from danlu.core.errors import DataError  # noqa: E402
from danlu.train.checkpoint import CheckpointManager  # noqa: E402
from danlu.train.checkpoint.storage import sha256  # noqa: E402

HERE = Path(__file__).resolve().parent


def run_ranks(tmp_path: Path, *mode: str) -> None:
    """Run the two ranks of ``sharded_worker.py`` and check both exit 0."""
    run_worker_ranks(HERE / "sharded_worker.py", 2, [str(tmp_path), *mode], timeout=240)


def test_two_rank_gloo_sharded_save_and_load(tmp_path: Path) -> None:
    run_ranks(tmp_path)
    # Load without any process group: every tensor comes back whole. Only a manager made
    # for sharded checkpoints loads them; any other skips them (nothing to fall back to).
    assert CheckpointManager(str(tmp_path / "ckpt")).load_latest() is None
    mgr = CheckpointManager(str(tmp_path / "ckpt"), sharded=True)
    infos = mgr.list_checkpoints()
    assert [(i.step, i.kind) for i in infos] == [(2, "sharded"), (3, "sharded")]
    step, state = mgr.load_latest()  # type: ignore[misc]
    expected = torch.load(tmp_path / "expected.pt", weights_only=True)
    assert step == 3 and state["step"] == 3
    assert torch.equal(state["model"]["weight"], expected["weight"])
    assert torch.equal(state["emb"], expected["emb"])
    # a torn shard file is detected by the manifest: fall back to step 2
    shard = next(f for f in (tmp_path / "ckpt" / infos[-1].name).iterdir() if f.suffix == ".distcp")
    shard.write_bytes(shard.read_bytes()[:-3])
    step, state = CheckpointManager(str(tmp_path / "ckpt"), sharded=True).load_latest()  # type: ignore[misc]
    assert step == 2 and torch.equal(state["emb"], expected["emb"] * 2 / 3)
    # a shard DCP cannot read although the manifest matches it (rewritten to match): the
    # loader falls back too (DCP's CheckpointException escaped it before)
    manifest_path = tmp_path / "ckpt" / infos[-1].name / "MANIFEST.json"
    manifest = json.loads(manifest_path.read_text())
    torn = shard.read_bytes()
    manifest["files"][shard.name] = {"size": len(torn), "sha256": sha256(torn)}
    manifest_path.write_text(json.dumps(manifest))
    mgr = CheckpointManager(str(tmp_path / "ckpt"), sharded=True)
    assert mgr.list_checkpoints()[-1].step == 3
    with pytest.raises(DataError, match="cannot load sharded checkpoint"):
        mgr.load(infos[-1].name)
    assert mgr.load_latest()[0] == 2  # type: ignore[index]


def test_a_sharded_save_failing_on_one_rank_fails_on_all_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    """Before, rank 0 failing its manifest left rank 1 waiting in a barrier, and a failed
    save's directory stayed to fill the disk. The asserts are in the worker."""
    run_ranks(tmp_path, "full-disk")
    step, state = CheckpointManager(str(tmp_path / "ckpt"), sharded=True).load_latest()  # type: ignore[misc]
    assert step == 4 and state["step"] == 4


def test_a_sharded_save_failing_after_its_manifest_keeps_the_checkpoint(tmp_path: Path) -> None:
    """Before, a failure after rank 0 had written the manifest (the sync after it, the last
    collective) made every rank remove the directory: a complete checkpoint lost. The
    asserts are in the worker."""
    run_ranks(tmp_path, "late-failure")
    step, state = CheckpointManager(str(tmp_path / "ckpt"), sharded=True).load_latest()  # type: ignore[misc]
    assert step == 2 and state["step"] == 2


def test_a_sharded_save_whose_retention_fails_on_rank_0_raises_on_every_rank(
    tmp_path: Path,
) -> None:
    """Before, rank 0's retention (after the commit) raised on rank 0 alone: rank 1 waited
    in the save's last barrier for a rank that had stopped, until the process group's
    timeout. The asserts are in the worker."""
    run_ranks(tmp_path, "retention-failure")
    step, state = CheckpointManager(str(tmp_path / "ckpt"), sharded=True).load_latest()  # type: ignore[misc]
    assert step == 2 and state["step"] == 2
