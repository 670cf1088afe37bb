"""An inner context's preemption exit that the script catches does not end the outer context:
its flag (``Preemption.other_exited``) was never cleared, so the outer one, trained on and
closed much later (its block's end, another exception, or ``close()`` by hand), wrote a
preemption checkpoint and logged "exiting with 75" though nothing exited."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

import pytest
from train_helpers import checkpointed_step, mse_loss, tiny_context, tiny_regression

from danlu.train.preempt import Preempted


def _preempt_inner_and_catch(directory: Path) -> None:
    """An inner context asked to stop, its exit caught by the script (a notebook cell, a
    trial loop that goes on with the next trial)."""
    data = tiny_regression(n=32)
    inner = tiny_context(directory, seed=1)
    inner.preemption.request()
    with pytest.raises(Preempted):
        inner.step(next(iter(inner.batches(data))), mse_loss)


@pytest.mark.parametrize("steps_after", [0, 2])
def test_an_outer_block_ending_after_a_caught_inner_exit_writes_no_checkpoint(
    tmp_path: Path, steps_after: int, caplog: pytest.LogCaptureFixture
) -> None:
    data = tiny_regression(n=32)
    with (
        caplog.at_level(logging.WARNING, logger="danlu.train"),
        tiny_context(tmp_path / "outer") as outer,
    ):
        batches = iter(outer.batches(data))
        outer.step(next(batches), mse_loss)
        _preempt_inner_and_catch(tmp_path / "inner")
        for _ in range(steps_after):
            outer.step(next(batches), mse_loss)
        caplog.clear()  # the inner one's own preemption said so
    assert "stop requested" not in caplog.text
    assert checkpointed_step(tmp_path / "inner") == 1
    assert checkpointed_step(tmp_path / "outer") == 0


def test_an_outer_block_left_by_another_error_after_a_caught_inner_exit_writes_none(
    tmp_path: Path,
) -> None:
    data = tiny_regression(n=32)
    with (
        pytest.raises(ValueError, match="the script's own"),
        tiny_context(tmp_path / "outer") as outer,
    ):
        outer.step(next(iter(outer.batches(data))), mse_loss)
        _preempt_inner_and_catch(tmp_path / "inner")
        raise ValueError("the script's own error")
    assert checkpointed_step(tmp_path / "outer") == 0


def test_an_outer_context_stepped_after_a_caught_inner_exit_and_closed_by_hand_writes_none(
    tmp_path: Path,
) -> None:
    data = tiny_regression(n=32)
    outer = tiny_context(tmp_path / "outer")
    batches = iter(outer.batches(data))
    outer.step(next(batches), mse_loss)
    _preempt_inner_and_catch(tmp_path / "inner")
    outer.step(next(batches), mse_loss)
    outer.close()
    assert checkpointed_step(tmp_path / "outer") == 0


@pytest.mark.parametrize("left_by", ["with", "close"])
def test_an_inner_exit_through_the_outer_context_still_checkpoints_it(
    tmp_path: Path, left_by: str
) -> None:
    """The exit that does leave the outer context (not caught inside it) still writes its
    checkpoint, by its ``with`` or by ``close()`` in a ``finally``."""
    data = tiny_regression(n=32)
    outer = tiny_context(tmp_path / "outer")
    with pytest.raises(Preempted):
        try:
            with outer if left_by == "with" else contextlib.nullcontext(outer):
                batches = iter(outer.batches(data))
                outer.step(next(batches), mse_loss)
                outer.step(next(batches), mse_loss)
                _preempt_inner_and_catch(tmp_path / "inner")  # caught: trained on
                outer.step(next(batches), mse_loss)
                inner = tiny_context(tmp_path / "inner2", seed=2)
                inner.preemption.request()
                inner.step(next(iter(inner.batches(data))), mse_loss)  # not caught
        finally:
            outer.close()
    assert checkpointed_step(tmp_path / "outer") == 3
