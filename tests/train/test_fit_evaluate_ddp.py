"""A distributed ``fit(evaluate=...)`` whose ``evaluate`` fails on some ranks only (raises, or
returns no number) fails on every rank: each checkpoints the epoch's end without a metric, the
failing ranks raise their own error and the others an error naming the failing ranks. Before,
the failing ranks raised alone (the writer, its ``evaluate`` working, checkpointed the epoch
with its metric), and the others trained on, waiting in the next collective until its
timeout."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from train_helpers import run_worker_ranks

from danlu.core.errors import DanluError
from danlu.train.checkpoint import sharded

HERE = Path(__file__).resolve().parent


@pytest.mark.slow
def test_an_evaluate_failing_on_one_rank_fails_every_rank_after_the_checkpoint(
    tmp_path: Path,
) -> None:
    out = tmp_path / "seen"
    run_worker_ranks(
        HERE / "evaluate_fail_worker.py",
        2,
        [str(tmp_path / "ckpt"), str(out)],
        timeout=150,
        GLOO_SOCKET_IFNAME="lo",
        CUDA_VISIBLE_DEVICES="",
    )
    raised, returned_none, resumed = zip(
        *(json.loads(Path(f"{out}.{rank}").read_text()) for rank in (0, 1)), strict=True
    )
    # rank 1's evaluate raised at epoch 1 (step 4): every rank stops there
    assert raised[1]["error"] == "RuntimeError" and raised[1]["message"] == "the evaluation broke"
    assert raised[0]["error"] == "DanluError"  # before: no error, rank 0 went on
    assert "epoch 1" in raised[0]["message"]
    assert "failed on rank 1: the evaluation broke" in raised[0]["message"]
    for run in raised:
        assert run["trained"] == 4 and run["evaluated"] == [0, 1]
        assert run["checkpoints"] == [[2, ["eval"]], [4, ["loss"]]]  # epoch 1 without a metric
    # rank 0's evaluate returned None at epoch 2 (step 6); the run resumed at epoch 1's end
    assert (
        returned_none[0]["error"] == "ConfigError"
        and "returned None" in (returned_none[0]["message"])
    )
    assert returned_none[1]["error"] == "DanluError"
    assert "failed on rank 0: fit(evaluate=...) must return" in returned_none[1]["message"]
    for run in returned_none:
        assert run["trained"] == 2 and run["evaluated"] == [1, 2]  # epoch 1 not trained again
        assert run["checkpoints"] == [[2, ["eval"]], [4, ["eval"]], [6, ["loss"]]]
    # the restart evaluates epoch 2 without training it again
    for run in resumed:
        assert run["error"] is None and run["step"] == 6
        assert run["trained"] == 0 and run["evaluated"] == [2]


def test_agree_names_every_rank_whose_step_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ranks that did not fail raise an error naming each failing rank and its error (the
    first one alone before), an ``OSError`` of the first one's errno where it had one."""
    said: list[tuple[str, int | None] | None] = [None, ("disk gone", None), None, ("bad", None)]

    def gathered(outcomes: list[Any], outcome: Any) -> None:
        outcomes[:] = said

    monkeypatch.setattr(sharded, "distributed_world", lambda: (0, 4))
    monkeypatch.setattr(sharded.torch.distributed, "all_gather_object", gathered)
    with pytest.raises(DanluError) as caught:
        sharded.agree(None, "the evaluation", DanluError)
    assert str(caught.value) == "the evaluation failed on rank 1: disk gone; on rank 3: bad"
    said[1] = ("No space left on device", 28)
    with pytest.raises(OSError) as full:
        sharded.agree(None, "the save", DanluError)
    assert full.value.errno == 28
    assert "rank 1: No space left on device; on rank 3: bad" in str(full.value)
    own = RuntimeError("mine")
    with pytest.raises(RuntimeError, match="mine"):  # a failing rank raises its own error
        sharded.agree(own, "the save", DanluError)
