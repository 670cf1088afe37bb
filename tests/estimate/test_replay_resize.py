"""A storage resized in place (``out=`` into a smaller tensor, ``resize_``) is replayed as a
GPU resizes it: a block of the new size replaces the old one.

The tracer records such a resize as a second event of the same storage, the change in bytes
(:class:`~danlu.estimate.memory.trace_worker.StorageTracker`); the replay took a growth for a
new block of the change's size and never freed the old one (its bytes stayed allocated for
the rest of the step), and took a shrink for a free of the whole storage.
"""

from __future__ import annotations

from danlu.estimate.memory import get_gpu, replay
from danlu.estimate.memory.allocator import LARGE_BUFFER, CachingAllocatorModel
from danlu.estimate.memory.trace_result import StepTrace

MiB = 1 << 20


def _trace(events: list[tuple[int, int]]) -> StepTrace:
    return StepTrace(
        batch_size=1,
        events=events,
        marks={"measure_start": 0, "measure_end": len(events)},
        peak_logical_bytes=max(0, *(d for _, d in events)),
        step_start_bytes=0,
        breakdown={},
    )


def test_the_allocator_resizes_a_block_by_allocating_the_new_one_then_freeing_the_old() -> None:
    a = CachingAllocatorModel()
    a.malloc(1, 4 * MiB)
    a.resize(1, 12 * MiB)
    assert a.stats.allocated == 12 * MiB  # the old 4 MiB block is back in the pool
    assert a.stats.peak_allocated == 16 * MiB  # both held while the data is copied
    assert a.stats.reserved == LARGE_BUFFER  # the new block came from the same segment
    a.free(1)
    assert a.stats.allocated == 0
    a.resize(2, MiB)  # a storage that is not live: allocated
    assert a.stats.allocated == MiB


def test_a_storage_grown_in_place_leaves_no_block_behind() -> None:
    # 4 MiB, grown to 12 MiB, freed; then a 30 MiB tensor
    events = [(1, 4 * MiB), (1, 8 * MiB), (1, -12 * MiB), (2, 30 * MiB), (2, -30 * MiB)]
    estimate = replay(_trace(events), get_gpu("h100"))
    assert estimate.peak_allocated_bytes == 30 * MiB  # was 34 MiB: the 4 MiB block leaked


def test_a_storage_shrunk_in_place_stays_allocated() -> None:
    # 12 MiB, shrunk to 4 MiB and still live when a 30 MiB tensor is allocated
    events = [(1, 12 * MiB), (1, -8 * MiB), (2, 30 * MiB), (2, -30 * MiB), (1, -4 * MiB)]
    estimate = replay(_trace(events), get_gpu("h100"))
    assert estimate.peak_allocated_bytes == 34 * MiB  # was 30 MiB: the shrink freed it all
