"""The contract between the memory model and its consumers (throughput/batch optimisers)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable


@runtime_checkable
class MemoryModel(Protocol):
    """Peak GPU memory of one training step as a function of the per-GPU (micro-)batch size.

    ``predict(b)`` is the peak number of bytes the training process holds on one GPU at
    batch size ``b``: what PyTorch's caching allocator reserves at its peak
    (``torch.cuda.max_memory_reserved``, cuBLAS workspaces included) plus the CUDA context.
    Compare it with the GPU's total memory. It is non-decreasing in ``b`` (a bigger batch
    never predicts less memory), so the largest batch that fits bounds every smaller one.
    """

    def predict(self, batch_size: int) -> int:
        """Peak bytes per GPU at ``batch_size``."""
        ...

    def max_batch(self, limit_bytes: int, margin_bytes: int = 0) -> int | None:
        """Largest batch size ``b`` with ``predict(b) <= limit_bytes - margin_bytes``: with
        ``predict`` non-decreasing, every batch up to it fits.

        ``None`` when not even ``b = 1`` fits.
        """
        ...


def largest_within(predict: Callable[[int], float], budget: float, lo: int, hi: int) -> int:
    """The largest batch in ``[lo, hi)`` that ``predict`` (non-decreasing) keeps within
    ``budget`` bytes, by bisection; given ``predict(lo) <= budget < predict(hi)``."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if predict(mid) <= budget:
            lo = mid
        else:
            hi = mid
    return lo
