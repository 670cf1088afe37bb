"""How much compute a share of one GPU takes: the one rule the placement and the quotas count.

A request for part of one GPU names its compute (``gpu_milli`` below 1000), its memory
(``gpu_memory`` with ``gpu_milli`` 1000), or both. One sized by memory alone takes the GPU's
compute in proportion to its memory, rounded DOWN to a milli-GPU and at least 1
(:func:`milli_for_memory`); one sized by compute alone takes the memory in proportion to its
milli-GPU, also rounded down (:meth:`~danlu.sched.view.JobRequest.memory_on`).

Why down: shares whose memory adds up to at most the GPU's then add up to at most its 1000
milli-GPU (a sum of parts rounded down is at most the sum rounded down), so memory-sized
shares fit on a GPU's compute whenever their memory fits. Rounded up, three shares of 8 GiB
on a 24 GiB GPU took 334 milli each, 1002 in all, and the third did not fit. The same holds
beside shares sized by compute, whose memory is rounded down too. The price: a share sized
by compute that takes the rest of a GPU's compute beside memory-sized shares may find less
than its part of the memory left (by under a milli-GPU's worth), and takes what is left.
The floor of 1 milli-GPU keeps every share holding some compute (the server records no share
of 0 milli-GPU, and the free map looks for shares only on the GPUs with compute left); it
breaks the guarantee only for shares of less than a thousandth of the GPU's memory (24 MiB
of a 24 GiB GPU), less than a CUDA context takes. A GPU holds at most 1000 shares.

:class:`~danlu.sched.placement.gang.FreeMap` places a memory share with
:func:`milli_for_memory` over its GPUs' sizes, and the quota layer counts the share's use with
:func:`share_milli` (:func:`danlu.sched.quota.start_usage`,
:func:`danlu.sched.quota.minimum_usage`), so a quota counts what the placement takes.
"""

from __future__ import annotations

from typing import overload

import numpy as np

from danlu.core.cluster import MILLI_PER_GPU, Cluster
from danlu.sched.view import IntArray, JobRequest, JobStatus

_MOST_MEMORY = int(np.iinfo(np.int64).max) // MILLI_PER_GPU
"""Bytes past any GPU's memory (9 PB) whose thousandfold still fits an int64: a share asking
more (a spec may ask up to 4 EiB) takes the whole of any GPU, as this much does."""


@overload
def milli_for_memory(memory: int, gpu_memory: int) -> int: ...


@overload
def milli_for_memory(memory: int, gpu_memory: IntArray) -> IntArray: ...


def milli_for_memory(memory: int, gpu_memory: int | IntArray) -> int | IntArray:
    """The milli-GPU a share of ``memory`` bytes sized by memory takes on a GPU of
    ``gpu_memory`` bytes (or on each of an array of them): its part of the GPU's memory,
    rounded down, from 1 to 1000 (1000 where ``memory`` is the GPU's whole memory or more).
    See the module's docstring for why it is rounded down."""
    scaled = MILLI_PER_GPU * min(memory, _MOST_MEMORY)  # within int64
    capacity = np.maximum(gpu_memory, 1)  # a GPU of no memory: any share is all of it
    milli: IntArray = np.clip(scaled // capacity, 1, MILLI_PER_GPU)
    return milli if isinstance(gpu_memory, np.ndarray) else int(milli)


def share_milli(request: JobRequest, gpu_memory: int) -> int:
    """The milli-GPU a start of ``request`` (a request for part of one GPU) takes on a GPU
    of ``gpu_memory`` bytes: its ``gpu_milli`` when it names less than a GPU's compute,
    else its memory's part of the compute (:func:`milli_for_memory`)."""
    if request.gpu_milli < MILLI_PER_GPU or not request.gpu_memory:
        return min(request.gpu_milli, MILLI_PER_GPU)
    return milli_for_memory(request.gpu_memory, gpu_memory)


def allowed_sizes(request: JobRequest, cluster: Cluster) -> dict[int, int]:
    """GPU memory -> GPUs of the types ``request`` allows (every type when it names none)."""
    wanted = {t.lower() for t in request.gpu_types}
    out: dict[int, int] = {}
    for kind, sizes in cluster.gpus_by_type.items():
        if not wanted or kind in wanted:
            for memory, gpus in sizes.items():
                out[memory] = out.get(memory, 0) + gpus
    return out


def least_share_milli(request: JobRequest, cluster: Cluster) -> int:
    """The least milli-GPU a start of ``request``, a share sized by memory, takes on
    ``cluster``: on the largest GPU of the types it may use (:func:`share_milli`), as
    :func:`danlu.sched.quota.minimum_usage` counts it; 1000 when no GPU is of those types.
    What a ranked round's admission charges such a share (its ``gpu_milli`` of 1000 is no
    whole GPU's compute: counted as one, a share of 20 GiB of an 80 GiB GPU was "outranked:
    needs 1 GPU" beside a lower-ranked share whose preemption left it room)."""
    sizes = [memory for memory, gpus in allowed_sizes(request, cluster).items() if gpus]
    return share_milli(request, max(sizes)) if sizes else MILLI_PER_GPU


def ranked_gpus(job: JobStatus, cluster: Cluster | None = None) -> float:
    """The GPUs a ranking by GPU time (``sjf``, ``value-density``) weighs ``job`` at: its
    request's GPUs, at least 1, for a whole-GPU job; for a share of one GPU, its part: the
    milli-GPU its allocation holds while it runs, else the ``gpu_milli`` it asks for, or,
    sized by memory alone, its least part of a GPU of ``cluster`` (:func:`least_share_milli`,
    as a ranked round's admission charges it; a whole GPU without ``cluster``). Counted as a
    whole GPU, a quarter-GPU job of 1,000 s ranked behind a whole-GPU job of 600 s."""
    req = job.request
    if not req.shares_gpu or req.gpus < 1:  # (a job asking for no GPU: as before, 1)
        return float(max(req.gpus, 1))
    if job.running:
        milli = job.allocation.gpu_milli
    elif req.gpu_milli < MILLI_PER_GPU or not req.gpu_memory:
        milli = req.gpu_milli
    else:
        milli = least_share_milli(req, cluster) if cluster is not None else MILLI_PER_GPU
    return milli / MILLI_PER_GPU
