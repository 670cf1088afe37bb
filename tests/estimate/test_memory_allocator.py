"""The caching-allocator model follows CUDACachingAllocator's documented rules."""

from __future__ import annotations

from danlu.estimate.memory.allocator import (
    LARGE_BUFFER,
    SMALL_BUFFER,
    CachingAllocatorModel,
    round_size,
    segment_size,
)

MiB = 1 << 20


def test_rounding_and_segment_sizes() -> None:
    assert round_size(1) == 512
    assert round_size(512) == 512
    assert round_size(513) == 1024
    assert segment_size(round_size(1 * MiB)) == SMALL_BUFFER
    assert segment_size(round_size(MiB + 1)) == LARGE_BUFFER
    assert segment_size(round_size(10 * MiB - 512)) == LARGE_BUFFER
    assert segment_size(10 * MiB) == 10 * MiB
    assert segment_size(11 * MiB + 5) == 12 * MiB


def test_small_blocks_share_a_2mib_segment() -> None:
    a = CachingAllocatorModel()
    for i in range(4):
        a.malloc(i, 1000)  # 1024-byte blocks
    assert a.stats.reserved == SMALL_BUFFER
    assert a.stats.allocated == 4 * 1024
    assert a.stats.segments == 1


def test_large_requests_below_10mib_use_20mib_segments_and_split() -> None:
    a = CachingAllocatorModel()
    a.malloc(1, 3 * MiB)
    a.malloc(2, 3 * MiB)
    assert a.stats.reserved == LARGE_BUFFER  # the second came from the split remainder
    a.malloc(3, 15 * MiB)  # does not fit the 14 MiB remainder
    assert a.stats.reserved == LARGE_BUFFER + 16 * MiB


def test_free_blocks_are_cached_merged_and_reused_best_fit() -> None:
    a = CachingAllocatorModel()
    a.malloc(1, 12 * MiB)
    a.malloc(2, 30 * MiB)
    a.free(1)
    a.free(2)
    assert a.stats.allocated == 0
    assert a.stats.reserved == 42 * MiB  # cached, not released
    a.malloc(3, 11 * MiB)  # best fit: the 12 MiB segment, not the 30 MiB one
    assert a.stats.reserved == 42 * MiB
    assert a.stats.allocated == 12 * MiB  # remainder 1 MiB is not split off (large pool)
    a.malloc(4, 29 * MiB)
    assert a.stats.reserved == 42 * MiB


def test_split_blocks_merge_back_on_free() -> None:
    a = CachingAllocatorModel()
    a.malloc(1, 4 * MiB)
    a.malloc(2, 4 * MiB)
    a.free(1)
    a.free(2)
    a.malloc(3, 19 * MiB)  # only possible if the 20 MiB segment merged back
    assert a.stats.reserved == LARGE_BUFFER
    # the 1 MiB rest is not split off a large block (it must exceed 1 MiB): all 20 MiB handed out
    assert a.stats.peak_allocated == 20 * MiB
