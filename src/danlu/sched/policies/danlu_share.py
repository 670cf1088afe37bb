"""GPU sharing in the ``danlu`` policy: memory-fit plus an interference rule.

A job asking for part of one GPU (by milli-GPU or by memory) may be put on a GPU another job
already uses only when (1) their predicted peak memories fit the GPU (the request's
``gpu_memory``, from the memory model, against the GPU's free memory -- :class:`FreeMap`
checks it) and (2) the interference model predicts that co-location is a gain: the
combined normalised throughput of the pair (each job's throughput when sharing divided by
its throughput alone, summed) must reach ``1 + min_gain``; otherwise the job waits for an
empty GPU.

The model is calibrated on Gavel's measurements (OSDI'20,
``../shared/data/gavel/physical_cluster_throughputs.json``): over the V100 pairs where both
jobs ran, the median combined normalised throughput is :data:`PAIR_GAIN` (see
:func:`calibrate`, which recomputes it from the file; a test checks the constant). Without
knowing the jobs' types, the median is the prediction; it is a gain of about 9 %, so with the
default ``min_gain`` (5 %) sharing is allowed, and a deployment that knows its pairs lose
sets ``min_gain`` higher.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import numpy as np

from danlu.core.cluster import MILLI_PER_GPU
from danlu.sched.placement.gang import FreeMap
from danlu.sched.view import ClusterView, JobStatus, Plan, Start

PAIR_GAIN = 1.0919
"""Median combined normalised throughput of two jobs sharing a V100 (Gavel measurements)."""

MIN_GAIN = 0.05
"""Predicted gain co-location must reach (fraction of one GPU's work)."""


def calibrate(path: str | Path, gpu: str = "v100") -> tuple[float, float]:
    """(median combined normalised throughput, fraction of pairs that lose) from Gavel's
    ``physical_cluster_throughputs.json``, over the pairs where both jobs made progress."""
    data = json.loads(Path(path).read_text())
    table = data[gpu]
    combined: list[float] = []
    for row in table.values():
        solo_a = row.get("null")
        for job_b, pair in row.items():
            if job_b == "null" or job_b not in table:
                continue
            solo_b = table[job_b].get("null")
            if not solo_a or not solo_b or pair[0] <= 0 or pair[1] <= 0:
                continue
            combined.append(pair[0] / solo_a + pair[1] / solo_b)
    if not combined:
        raise ValueError(f"no co-located pairs for {gpu} in {path}")
    return statistics.median(combined), sum(c < 1.0 for c in combined) / len(combined)


def sharing_pays(min_gain: float = MIN_GAIN, pair_gain: float = PAIR_GAIN) -> bool:
    """Whether the interference model predicts that co-locating two jobs is a gain."""
    return pair_gain >= 1.0 + min_gain


def place_shared(
    view: ClusterView,
    jobs: list[JobStatus],
    plan: Plan,
    placement: str,
    min_gain: float = MIN_GAIN,
) -> tuple[tuple[Start, ...], dict[str, str]]:
    """Starts for pending shared requests on the capacity ``plan`` leaves, in queue order."""
    free = FreeMap(view, placement)
    running = {j.id: j for j in view.running}
    for p in plan.preempts:
        free.release(running[p.job_id].allocation)
    for r in plan.resizes:
        free.release(running[r.job_id].allocation)
    for r in plan.resizes:
        free.take(r.allocation)
    for s in plan.starts:
        free.take(s.allocation)
    if not sharing_pays(min_gain):
        # GPUs in use are closed to newcomers: only empty GPUs are offered.
        busy = free.free_milli < MILLI_PER_GPU
        free.free_milli = np.where(busy, 0, free.free_milli)
    starts: list[Start] = []
    waiting: dict[str, str] = {}
    for job in sorted(jobs, key=lambda j: (j.request.priority * -1, j.request.seq)):
        alloc = free.place(job.request)
        if alloc is None:
            waiting[job.id] = "no GPU has room for its predicted peak memory and share"
        else:
            starts.append(Start(job.id, alloc))
    return tuple(starts), waiting
