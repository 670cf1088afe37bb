"""A model of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp, defaults).

Replays a logical allocation sequence and reports what the allocator would hold:

* requests are rounded up to a multiple of 512 bytes (minimum 512);
* requests of at most 1 MiB come from the small pool, carved from 2 MiB segments;
  larger ones from the large pool: a request below 10 MiB gets a 20 MiB segment, a larger one a
  segment of its size rounded up to 2 MiB;
* a request takes the best-fitting cached free block of its pool (smallest size, then lowest
  address); the block is split when the rest is at least 512 bytes (small pool) or more than
  1 MiB (large pool), otherwise the whole block is handed out;
* freed blocks merge with free neighbours of the same segment and stay cached (reserved);
* there is no capacity: a new segment is always obtained and cached segments are never given
  back, so the peaks are what a step reserves when nothing forces the cache to shrink.

Not modelled: multiple streams, ``expandable_segments``, ``max_split_size_mb`` and
``roundup_power2_divisions`` (all off by default), CUDA graphs.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

MIN_BLOCK = 512
SMALL_SIZE = 1 << 20
SMALL_BUFFER = 2 << 20
MIN_LARGE_ALLOC = 10 << 20
LARGE_BUFFER = 20 << 20
ROUND_LARGE = 2 << 20


def round_size(n: int) -> int:
    """Block size for a request of ``n`` bytes."""
    return MIN_BLOCK if n < MIN_BLOCK else MIN_BLOCK * ((n + MIN_BLOCK - 1) // MIN_BLOCK)


def segment_size(rounded: int) -> int:
    """Size of the segment cudaMalloc'ed for a block of ``rounded`` bytes."""
    if rounded <= SMALL_SIZE:
        return SMALL_BUFFER
    if rounded < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return ROUND_LARGE * ((rounded + ROUND_LARGE - 1) // ROUND_LARGE)


@dataclass(eq=False)
class _Block:
    addr: int
    size: int
    small: bool
    allocated: bool = False
    prev: _Block | None = None
    next: _Block | None = None


@dataclass
class AllocatorStats:
    """Counters as ``torch.cuda.memory_stats`` names them (current and peak)."""

    allocated: int = 0
    reserved: int = 0
    peak_allocated: int = 0
    peak_reserved: int = 0
    segments: int = 0


class CachingAllocatorModel:
    """Replays ``malloc``/``free`` through the caching allocator's block and pool rules."""

    def __init__(self) -> None:
        self.stats = AllocatorStats()
        self._free: dict[bool, list[tuple[int, int]]] = {True: [], False: []}
        self._by_addr: dict[int, _Block] = {}
        self._live: dict[int, _Block] = {}
        self._next_addr = 0

    # -- pools -------------------------------------------------------------------------
    def _insert(self, b: _Block) -> None:
        bisect.insort(self._free[b.small], (b.size, b.addr))

    def _remove(self, b: _Block) -> None:
        pool = self._free[b.small]
        i = bisect.bisect_left(pool, (b.size, b.addr))
        del pool[i]

    def _segment(self, size: int, small: bool) -> _Block:
        b = _Block(self._next_addr, size, small)
        self._next_addr += size + ROUND_LARGE  # segments are never adjacent
        self._by_addr[b.addr] = b
        self.stats.reserved += size
        self.stats.segments += 1
        self.stats.peak_reserved = max(self.stats.peak_reserved, self.stats.reserved)
        return b

    # -- public --------------------------------------------------------------------------
    def malloc(self, key: int, nbytes: int) -> None:
        """Allocate ``nbytes`` for the tensor storage ``key`` (0 bytes allocate nothing)."""
        if nbytes <= 0:
            return
        size = round_size(nbytes)
        small = size <= SMALL_SIZE
        pool = self._free[small]
        i = bisect.bisect_left(pool, (size, -1))
        if i < len(pool):
            block = self._by_addr[pool[i][1]]
            del pool[i]
        else:
            block = self._segment(segment_size(size), small)
        remaining = block.size - size
        if (small and remaining >= MIN_BLOCK) or (not small and remaining > SMALL_SIZE):
            rest = _Block(block.addr + size, remaining, small, prev=block, next=block.next)
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            block.size = size
            self._by_addr[rest.addr] = rest
            self._insert(rest)
        block.allocated = True
        self._live[key] = block
        self.stats.allocated += block.size
        self.stats.peak_allocated = max(self.stats.peak_allocated, self.stats.allocated)

    def resize(self, key: int, nbytes: int) -> None:
        """Resize the live storage ``key`` to ``nbytes`` in all, as a storage resized in place
        (``out=`` into a smaller tensor, ``resize_``) is on a GPU: a new block of the new size
        is allocated while the old one still holds the data to copy, then the old block is
        freed. A ``key`` that is not live is allocated (:meth:`malloc`)."""
        old = self._live.pop(key, None)
        self.malloc(key, nbytes)
        if old is not None:
            self._release(old)

    def free(self, key: int) -> None:
        """Free the storage ``key`` (its block goes back to the pool, merged with neighbours)."""
        block = self._live.pop(key, None)
        if block is not None:
            self._release(block)

    def _release(self, block: _Block) -> None:
        """Return an allocated ``block`` to its pool, merged with its free neighbours."""
        self.stats.allocated -= block.size
        block.allocated = False
        for nb in (block.prev, block.next):
            if nb is not None and not nb.allocated:
                self._remove(nb)
                del self._by_addr[max(nb.addr, block.addr)]
                if nb is block.prev:
                    nb.size += block.size
                    nb.next = block.next
                    if block.next is not None:
                        block.next.prev = nb
                    block = nb
                else:
                    block.size += nb.size
                    block.next = nb.next
                    if nb.next is not None:
                        nb.next.prev = block
        self._insert(block)
