"""The tracer traces at most two forward/backward passes of an accumulating step: the first
creates the gradients, the second adds to them, and every later one repeats the second, so
``--accumulation 6`` traced six passes (and twice: warm-up and measured) for the same peak."""

from __future__ import annotations

import pytest

from danlu.estimate.memory import StepTrace, TraceRequest, trace

pytest.importorskip("torch")

MODEL = "danlu.estimate.zoo:mlp_small"
PEAK = 58_278_376
"""mlp_small's logical peak at b = 4 with accumulation, as all six passes gave it."""


def _traced(accumulation: int) -> StepTrace:
    [traced] = trace(TraceRequest(MODEL, (4,), accumulation=accumulation))
    return traced


def test_many_accumulation_passes_trace_as_two_with_the_same_peaks() -> None:
    two, six = _traced(2), _traced(6)
    assert two.peak_logical_bytes == six.peak_logical_bytes == PEAK
    assert two.phase_peaks == six.phase_peaks
    assert two.breakdown == six.breakdown
    assert two.step_start_bytes == six.step_start_bytes
    assert len(six.events) == len(two.events)  # no pass beyond the second is traced
