"""Two contexts open in one process (a second ``init`` inside the first's ``with``): a
SIGTERM reaches both. The inner one's handler took the signal alone, so the outer run
trained on unsignalled (to the end of its loop, or until the grace ran out and the job was
killed) without writing its preemption checkpoint."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from types import FrameType

import pytest

from danlu.train.preempt import Preemption


@pytest.fixture
def own_sigterm() -> Iterator[list[int]]:
    """SIGTERM's handler for the test: one that records the signal and does nothing else
    (restored after)."""
    seen: list[int] = []

    def record(signum: int, frame: FrameType | None) -> None:
        seen.append(signum)

    original = signal.signal(signal.SIGTERM, record)
    try:
        yield seen
    finally:
        signal.signal(signal.SIGTERM, original)


def test_a_sigterm_reaches_the_outer_context_too(own_sigterm: list[int]) -> None:
    outer = Preemption()
    inner = Preemption()
    signal.raise_signal(signal.SIGTERM)
    assert inner.requested and outer.requested
    assert own_sigterm == []  # a foreign handler below them is not called: it may exit
    inner.close()
    outer.close()
    assert signal.getsignal(signal.SIGTERM).__name__ == "record"  # type: ignore[union-attr]


def test_after_the_inner_context_closed_the_outer_alone_is_signalled(
    own_sigterm: list[int],
) -> None:
    outer = Preemption()
    inner = Preemption()
    inner.close()
    signal.raise_signal(signal.SIGTERM)
    assert outer.requested and not inner.requested
    outer.close()
