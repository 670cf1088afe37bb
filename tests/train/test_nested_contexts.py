"""Two training contexts open in one process (an ``init`` inside another's ``with``).

A SIGTERM reaches both; the inner one, stepping first, checkpoints and exits 75, and its
``SystemExit`` ran through the outer one's ``with``, which closed without a checkpoint: the
outer run lost every step since its last one. Leaving the inner one normally writes nothing
for the outer one, whose own SIGTERM still checkpoints it."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest
from train_helpers import checkpointed_step, mse_loss, tiny_context, tiny_regression

import danlu.train as dt
from danlu.train.preempt import Preemption


@pytest.fixture
def own_sigterm() -> Iterator[list[int]]:
    """SIGTERM's handler for the test: records the signal (restored after)."""
    seen: list[int] = []

    def record(signum: int, frame: FrameType | None) -> None:
        seen.append(signum)

    original = signal.signal(signal.SIGTERM, record)
    try:
        yield seen
    finally:
        signal.signal(signal.SIGTERM, original)


def test_the_inner_contexts_preemption_exit_checkpoints_the_outer_one(
    tmp_path: Path, own_sigterm: list[int]
) -> None:
    data = tiny_regression(n=32)
    with pytest.raises(SystemExit) as stopped, tiny_context(tmp_path / "outer") as outer:
        for batch in outer.batches(data):
            outer.step(batch, mse_loss)
            if outer.step_num == 3:
                with tiny_context(tmp_path / "inner", seed=1) as inner:
                    signal.raise_signal(signal.SIGTERM)
                    for inner_batch in inner.batches(data):
                        inner.step(inner_batch, mse_loss)  # signalled: exits 75
    assert stopped.value.code == dt.PREEMPTED_EXIT_CODE
    assert checkpointed_step(tmp_path / "inner") == 1
    assert checkpointed_step(tmp_path / "outer") == 3  # none before: it restarted at 0
    assert own_sigterm == []
    assert signal.getsignal(signal.SIGTERM).__name__ == "record"  # type: ignore[union-attr]


@pytest.mark.parametrize("left_by", ["with", "close"])
def test_the_outer_context_checkpoints_alike_left_by_its_with_or_closed_by_hand(
    tmp_path: Path, left_by: str
) -> None:
    """The inner context asked to stop by ``request()`` (the outer one never signalled):
    ``ctx.close()`` in a ``finally`` wrote no checkpoint for the outer one, its ``with``
    did."""
    data = tiny_regression(n=32)
    outer = tiny_context(tmp_path / "outer")
    with pytest.raises(SystemExit) as stopped:
        try:
            with outer if left_by == "with" else contextlib.nullcontext(outer):
                for batch in outer.batches(data):
                    outer.step(batch, mse_loss)
                    if outer.step_num == 3:
                        inner = tiny_context(tmp_path / "inner", seed=1)
                        inner.preemption.request()
                        inner.step(next(iter(inner.batches(data))), mse_loss)  # exits 75
        finally:
            outer.close()
    assert stopped.value.code == dt.PREEMPTED_EXIT_CODE
    assert not outer.preemption.requested
    assert checkpointed_step(tmp_path / "inner") == 1
    assert checkpointed_step(tmp_path / "outer") == 3


def test_a_context_opened_after_a_preemption_exit_writes_nothing_at_close(
    tmp_path: Path,
) -> None:
    data = tiny_regression(n=32)
    inner = tiny_context(tmp_path / "inner")
    inner.preemption.request()
    with pytest.raises(SystemExit):
        inner.step(next(iter(inner.batches(data))), mse_loss)
    with tiny_context(tmp_path / "later") as later:
        later.step(next(iter(later.batches(data))), mse_loss)
    assert checkpointed_step(tmp_path / "later") == 0


def test_leaving_the_inner_context_writes_nothing_for_the_outer_one(
    tmp_path: Path, own_sigterm: list[int]
) -> None:
    data = tiny_regression(n=32)
    with pytest.raises(SystemExit), tiny_context(tmp_path / "outer") as outer:
        for batch in outer.batches(data):
            outer.step(batch, mse_loss)
            if outer.step_num == 2:
                with tiny_context(tmp_path / "inner", seed=1) as inner:
                    inner.step(next(iter(inner.batches(data))), mse_loss)
                assert checkpointed_step(tmp_path / "outer") == 0
                signal.raise_signal(signal.SIGTERM)  # the outer one's own: it checkpoints
    assert checkpointed_step(tmp_path / "outer") == 3


def test_an_outer_preemption_closed_first_leaves_the_inner_one_installed(
    own_sigterm: list[int],
) -> None:
    """Closed out of order (the outer one's exit ran through the inner one's ``with``):
    before, the outer one's close dropped the inner one's handler, and the inner one's
    close then installed the closed outer one's: a later SIGTERM was swallowed."""
    outer = Preemption()
    inner = Preemption()
    outer.close()
    signal.raise_signal(signal.SIGTERM)
    assert inner.requested and not outer.requested
    inner.close()
    assert signal.getsignal(signal.SIGTERM).__name__ == "record"  # type: ignore[union-attr]
    signal.raise_signal(signal.SIGTERM)
    assert own_sigterm == [signal.SIGTERM]


def test_two_open_contexts_on_one_checkpoint_directory_are_warned_of(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Both on ``DANLU_CHECKPOINT_DIR``, say: the inner one resumed from the outer one's
    checkpoints and each pruned the other's, and nothing said so."""
    shared = "already in use by another open training context"
    with tiny_context(tmp_path / "outer"), caplog.at_level("WARNING", logger="danlu.train"):
        tiny_context(tmp_path / "other").close()
        assert shared not in caplog.text
        tiny_context(tmp_path / "outer" / ".." / "outer").close()
        assert shared in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="danlu.train"):
        tiny_context(tmp_path / "outer").close()  # the first one is closed now
    assert shared not in caplog.text
