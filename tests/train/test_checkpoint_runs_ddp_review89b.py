"""Checkpoint runs across the ranks of a distributed job (two gloo processes).

The run id is made by the writer (rank 0) at its first save and shared with the other ranks
by a broadcast (``TrainContext.save``): every rank's rollback, and every rank's restart, must
fall back alike within the run, never into an older run's checkpoints in the same directory.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from train_helpers import run_worker_ranks

from danlu.core.errors import DataError
from danlu.train.checkpoint import CheckpointManager
from danlu.train.ckpt import Checkpoints

HERE = Path(__file__).resolve().parent


@pytest.mark.slow
def test_every_rank_falls_back_alike_within_its_run(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    run_worker_ranks(
        HERE / "runs_worker.py",
        2,
        [str(out)],
        timeout=240,
        GLOO_SOCKET_IFNAME="lo",
        CUDA_VISIBLE_DEVICES="",
    )
    seen = [json.loads(Path(f"{out}.{rank}").read_text()) for rank in (0, 1)]
    assert seen[0] == seen[1]  # every rank alike
    both = seen[0]
    assert both["old"]["run"] is not None
    # the new run's own checkpoint damaged: skipped on every rank, not rolled back into
    # run A's step 6
    assert both["fresh"]["rollbacks"] == 0 and both["fresh"]["step"] == 3
    assert both["fresh"]["run"] not in (None, both["old"]["run"])
    # back to its own step 4 past its damaged step 6, with step 4's parameters
    assert both["within"] == {"step": 4, "rollbacks": 1, "params_of_step_4": True}
    assert both["restart"] == {"step": 4, "run": both["fresh"]["run"]}
    assert both["flaky"] == both["restart"]  # before: rank 1 alone at step 0
    assert both["lost"] == {"step": 0}  # never run A's step 6


# -- the same rule in one process, rank 0's answers given by a stand-in gather ----------
def _two_checkpoints(directory: Path) -> list[str]:
    mgr = CheckpointManager(str(directory), keep_last=5)
    for step in (1, 2):
        mgr.save(step, {"w": torch.full((2,), float(step))})
    mgr.close()
    return [i.name for i in CheckpointManager(str(directory)).list_checkpoints()]


def _as_rank_one(directory: Path, rank_zero: list[object]) -> Checkpoints:
    """A rank 1 whose rank 0 answers ``rank_zero``'s values in turn."""
    answers = iter(rank_zero)
    return Checkpoints(str(directory), gather=lambda mine: [next(answers), mine])


def test_a_rank_takes_rank_zeros_checkpoint_when_they_chose_apart(tmp_path: Path) -> None:
    first, _ = _two_checkpoints(tmp_path)
    ckpt = _as_rank_one(tmp_path, [first, None])  # rank 0 then loaded it
    step, state = ckpt.load_latest()  # type: ignore[misc]
    assert step == 1 and torch.equal(state["w"], torch.full((2,), 1.0))


@pytest.mark.parametrize("rank_zero", ["none", "unknown"])
def test_ranks_that_cannot_agree_on_a_checkpoint_all_fail(tmp_path: Path, rank_zero: str) -> None:
    """Rank 0 found none (or one this rank cannot load): a DataError naming each rank's
    choice, on every rank (the second gather carries each rank's failure)."""
    _two_checkpoints(tmp_path)
    chosen = None if rank_zero == "none" else "ckpt-000000000009-0badf00d"
    ckpt = _as_rank_one(tmp_path, [chosen, "rank 0 could not either"])
    with pytest.raises(DataError, match="do not agree on the checkpoint") as raised:
        ckpt.load_latest()
    assert "rank 0: " in str(raised.value) and "rank 1: ckpt-000000000002-" in str(raised.value)
