"""Gradient accumulation: splitting a batch into micro-batches and DDP's ``no_sync``.

A rank's batch of ``n`` samples is cut into the fewest micro-batches of at most ``micro``
samples, as even as can be (sizes differ by one at most: 17 samples at ``micro`` 16 are 9 and
8, not 16 and a lone sample, which a model with batch normalisation cannot train on); each
micro-batch's mean loss is weighted by its share ``len(micro) / n`` so the accumulated gradient
is exactly the gradient of the mean loss over the whole batch, whatever the split.
"""

from __future__ import annotations

import contextlib
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from danlu.core.errors import DanluError
from danlu.train.batch import micro_batch_count
from danlu.train.data import map_tensors


def batch_len(data: Any) -> int:
    """Number of samples in a batch: the first dimension of its first tensor."""
    if isinstance(data, torch.Tensor):
        return int(data.shape[0])
    if type(data) in (tuple, list) and data and isinstance(data[0], torch.Tensor):
        return int(data[0].shape[0])  # the common (inputs, targets): no ABC checks
    if isinstance(data, Mapping):
        for v in data.values():
            n = batch_len(v)
            if n >= 0:
                return n
    elif isinstance(data, Sequence) and not isinstance(data, str | bytes):
        for v in data:
            n = batch_len(v)
            if n >= 0:
                return n
    return -1


def _slice(data: Any, lo: int, hi: int) -> Any:
    return map_tensors(data, lambda tensor: tensor[lo:hi])


def split(data: Any, micro: int, least: int = 1) -> list[tuple[Any, float]]:
    """Cut ``data`` into ``ceil(n / micro)`` micro-batches of at most ``micro`` samples,
    their sizes differing by one at most, with their weights; into fewer, larger ones where
    that would leave one below ``least`` samples (:func:`~danlu.train.batch.micro_batch_count`:
    at ``micro`` 2, a model with batch normalisation gets 3 + 2 of 5 samples, not a lone one).

    The weights (each micro-batch's share of the samples) sum to 1.
    """
    n = batch_len(data)
    if n <= micro or n < 0:
        return [(data, 1.0)]
    count = micro_batch_count(n, micro, least)
    size, larger = divmod(n, count)  # the first ``larger`` micro-batches hold one more
    out, lo = [], 0
    for i in range(count):
        hi = lo + size + (1 if i < larger else 0)
        out.append((_slice(data, lo, hi), (hi - lo) / n))
        lo = hi
    return out


def no_sync(model: torch.nn.Module, last: bool) -> contextlib.AbstractContextManager[Any]:
    """DDP's ``no_sync()`` for every micro-step but the last (a no-op for plain modules)."""
    if last:
        return contextlib.nullcontext()
    fn = getattr(model, "no_sync", None)
    return fn() if callable(fn) else contextlib.nullcontext()


def abandon_sync(model: torch.nn.Module) -> None:
    """Put a DDP model back as it was before the step, for an OOM retry on every rank (a
    no-op for plain modules).

    A rank that ran the last micro-batch's forward outside ``no_sync`` and then learnt that
    a peer ran out of memory drops that micro-batch without its backward; so does a rank
    whose own OOM struck in the loss, after DDP's forward returned. DDP's forward has
    prepared the reducer for an all-reduce on the next backward
    (``Reducer.prepare_for_backward``), and that preparation outlives the dropped graph: the
    retry's first backward, under ``no_sync``, would start a gradient all-reduce that the
    peers do not join (gloo aborts with a "collective mismatch", NCCL hangs or mixes the
    buffers). ``reducer._reset_state()`` is DDP's own way to let a forward run "despite
    previous backward not succeeding" (``DistributedDataParallel._update_process_group``
    calls it); it is private, so it is looked up and its absence is a clear error. It also
    makes DDP rebuild its gradient buckets after the next synchronised backward (one
    broadcast from rank 0): every rank calls this at the same point, so they rebuild alike.

    ``require_forward_param_sync`` decides whether the next forward broadcasts rank 0's
    buffers; DDP leaves it True after a synchronised forward and False after one under
    ``no_sync``, so after a failed attempt it differs between a rank that failed in an
    early micro-batch and one that reached the last. It is set True, as every step starts
    (the previous step ended with a synchronised forward): the retry's first forward
    broadcasts the buffers on every rank, as the failed attempt's did."""
    from torch.nn.parallel import DistributedDataParallel  # on an OOM retry only

    if not isinstance(model, DistributedDataParallel):
        return
    reset = getattr(model.reducer, "_reset_state", None)
    if not callable(reset):
        raise DanluError(
            "out of memory under DDP, and this torch's DDP reducer has no _reset_state() to "
            "drop the all-reduce a forward prepared: the step cannot be retried on every "
            "rank. Lower the micro-batch (micro_batch_size= or DANLU_BATCH_SIZE) and restart"
        )
    reset()
    model.require_forward_param_sync = True


def exposed_sync_time(durations: Sequence[float], last_ratio: float = 1.0) -> float:
    """The gradient synchronisation of one DDP step that its backward pass did not hide, in
    seconds, from the durations of its micro-steps (forward + backward each, in order).

    Every micro-step but the last runs under ``no_sync``; the last one also all-reduces the
    gradients, so its excess over the median of the others is the exposed synchronisation
    (never below 0; NaN when a duration is not finite, a timer that failed: read as 0 it
    told the goodput tuner the sync was free). ``last_ratio`` is the last micro-batch's size
    over the first's (:func:`split` makes the first ones one sample larger when the batch
    does not divide evenly), and the median is scaled by it: compute time is taken as
    proportional to the samples. With a fixed cost ``a`` per micro-step besides, the
    estimate for a smaller last chunk is too high by ``a * (1 - last_ratio)``.
    """
    if len(durations) < 2:
        raise ValueError(
            f"the exposed sync time needs at least two micro-steps, got {len(durations)}"
        )
    if not all(math.isfinite(duration) for duration in durations):
        return math.nan  # max(0.0, nan) is 0.0
    compute = statistics.median(durations[:-1]) * last_ratio
    return max(0.0, durations[-1] - compute)
