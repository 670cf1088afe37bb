"""The largest batch that fits a GPU never shrinks as the GPU's capacity grows: the allocator
replay was capped at the capacity, so a step over it was answered by when cached segments
happened to be released (gpt2_tiny: 96 on 1016 MiB, 91 on 1020 MiB)."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from danlu.estimate.memory import FittedMemoryModel, StepTrace, TraceRequest, get_gpu, replay, trace

pytest.importorskip("torch")

MIB = 1 << 20
CONTEXT = 750.8125 * MIB
"""The H100's CUDA context when the drop was seen (pinned: the table may be recalibrated)."""


@pytest.fixture(scope="module")
def traces() -> list[StepTrace]:
    """gpt2_tiny traced at b = 1, 2, 4."""
    return trace(TraceRequest("danlu.estimate.zoo:gpt2_tiny", (1, 2, 4)))


def test_a_bigger_gpu_never_gets_a_smaller_largest_batch(traces: list[StepTrace]) -> None:
    answers: list[tuple[int, int]] = []
    for capacity_mib in range(1008, 1032, 2):
        gpu = replace(
            get_gpu("h100"), capacity_bytes=capacity_mib * MIB, context_bytes=int(CONTEXT)
        )
        model = FittedMemoryModel([replay(t, gpu) for t in traces], gpu, traces=traces)
        best = model.max_batch(gpu.capacity_bytes)
        assert best is not None and model.predict(best) <= gpu.capacity_bytes
        answers.append((capacity_mib, best))
    drops = [(a, b) for a, b in itertools.pairwise(answers) if b[1] < a[1]]
    assert not drops, answers


def test_replay_fits_exactly_when_the_peak_is_within_the_capacity(
    traces: list[StepTrace],
) -> None:
    top = traces[-1]
    need = replay(top, get_gpu("h100")).peak_device_bytes
    for capacity in (need - 1, need, need + MIB):
        est = replay(top, replace(get_gpu("h100"), capacity_bytes=capacity))
        assert est.peak_device_bytes == need  # the capacity changes no peak
        assert est.fits is (capacity >= need)
        assert any(w.startswith("out of memory") for w in est.warnings) is (capacity < need)
