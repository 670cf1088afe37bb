"""A lower bound on the average JCT any scheduler can reach on the Pollux workloads in danlu's
simulator, next to the JCT target (0.8 x Pollux's published average). Prints figures;
asserts nothing.

Each job is bounded as if it had the whole 16 x 4 cluster to itself from its submission and
switched, at no cost, to the fastest configuration at every instant:

- it waits for the first scheduling round at or after its submission (rounds at t = 60, 120,
  ...; a job cannot start between them);
- it pays the 30 s restart cost of its first allocation once (every later move costs more);
- each epoch ``e`` then takes at least ``width_e / r_e - 0.5`` seconds, where ``width_e`` is
  the epoch's progress and ``r_e`` the highest progress rate of any configuration during that
  epoch: ``gain(B, e) / iteration_time`` over every placement of 1..64 GPUs (every measured
  placement of the profile and every node/replica count the simulator interpolates), every
  micro-batch in the profile's range and every accumulation count, with the global batch ``B``
  inside the validated range. The simulator rounds the time of an epoch boundary to whole
  seconds, hence the ``- 0.5``.

Contention, interference, waiting for a later round, preemption and further restarts only add
to that, so no schedule of these jobs can have an average JCT below the bound's average. When
the bound exceeds the target, the target is out of reach for every scheduler in this
simulator.

    python benchmarks/jct_bound.py [--loads 0.5,1.0,1.5] [--workloads 1,2,3,4] [--per-app]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

from danlu.sim.elastic import RESTART_SECONDS, ApplicationProfile, load_profiles
from danlu.sim.workload import ProfiledWork, load_workload

sys.path.insert(0, str(Path(__file__).resolve().parent))
# the same workloads and published figures
from danlu_pollux import DATA, FOLDERS, POLLUX, add_workload_options

INTERVAL = 60.0
NODES, GPUS_PER_NODE = 16, 4


Rows = list[tuple[int, np.ndarray, np.ndarray, np.ndarray]]


def _placement_rows(profile: ApplicationProfile) -> Rows:
    """(replicas, micro-batches, step times, sync times) for every placement the simulator can
    time: each measured placement at every integer micro-batch in its measured range, and each
    (nodes, replicas) count at every integer micro-batch the interpolation covers."""
    lo, hi = profile.min_local_bsz, profile.max_local_bsz
    rows = []
    for placement, (xs, steps, syncs) in profile.measured_placements.items():
        a = np.arange(max(lo, math.ceil(xs[0])), min(hi, math.floor(xs[-1])) + 1, dtype=float)
        replicas = sum(placement)
        a = a[a * replicas <= profile.max_batch_size]
        if a.size:
            rows.append((replicas, a, np.interp(a, xs, steps), np.interp(a, xs, syncs)))
    for nodes in range(1, NODES + 1):
        for replicas in range(nodes, min(nodes * GPUS_PER_NODE, NODES * GPUS_PER_NODE) + 1):
            rows.extend(count_rows(profile, nodes, replicas))
    return rows


def count_rows(profile: ApplicationProfile, nodes: int, replicas: int) -> Rows:
    """The row of ``replicas`` GPUs on ``nodes`` nodes as the simulator interpolates it:
    every integer micro-batch it covers (none: an empty list)."""
    top = min(profile.max_local_bsz, profile.max_batch_size // replicas)
    a = np.arange(profile.min_local_bsz, top + 1, dtype=float)
    if not a.size:
        return []
    points = np.column_stack([np.full_like(a, nodes), np.full_like(a, replicas), a])
    out = profile.interpolated_step_times(points)
    ok = ~np.isnan(out).any(axis=1)
    return [(replicas, a[ok], out[ok, 0], out[ok, 1])] if ok.any() else []


def fastest_iteration(profile: ApplicationProfile, rows: Rows | None = None) -> np.ndarray:
    """``t[B]``: the shortest seconds per optimizer step of any configuration whose executed
    global batch is ``B`` (inf where none), for ``B`` in 0..max_batch_size; ``rows``: the
    configurations to consider (default: every placement, :func:`_placement_rows`)."""
    top = profile.max_batch_size
    best = np.full(top + 1, np.inf)
    for replicas, a, step, sync in _placement_rows(profile) if rows is None else rows:
        per_replica = replicas * a
        k = 0
        while True:
            ok = per_replica * (k + 1) <= top
            if not ok.any():
                break
            batch = (per_replica[ok] * (k + 1)).astype(np.int64)
            seconds = step[ok] + (step[ok] - sync[ok]) * k
            np.minimum.at(best, batch, seconds)
            k += 1
    best[: profile.init_batch_size] = np.inf
    return best


def epoch_seconds(profile: ApplicationProfile, best: np.ndarray | None = None) -> np.ndarray:
    """Per epoch, the least seconds it can take (before the boundary rounding); ``best``: the
    seconds per step by executed batch to choose from (default: :func:`fastest_iteration`)."""
    best = fastest_iteration(profile) if best is None else best
    batches = np.flatnonzero(np.isfinite(best))
    seconds = best[batches]
    scale = batches / profile.init_batch_size
    out = []
    start = 0.0
    for epoch, boundary in enumerate(profile.epoch_boundaries):
        sqr, var = profile.grad_stats_many(batches, epoch)
        gain = (var + sqr) / (var / scale + sqr)
        rate = float(np.max(gain / seconds))
        out.append((boundary - start) / rate)
        start = boundary
    return np.array(out)


def job_bound(submit: float, epochs: np.ndarray) -> float:
    """The least JCT of a job submitted at ``submit`` whose epochs take at least ``epochs``."""
    first_round = max(INTERVAL, math.ceil(submit / INTERVAL) * INTERVAL)
    train = float(np.sum(np.maximum(epochs - 0.5, 0.0)))
    return first_round - submit + RESTART_SECONDS + train


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_workload_options(parser)
    parser.add_argument("--per-app", action="store_true", help="also print each app's bound")
    args = parser.parse_args()
    profiles = load_profiles(DATA / "traces")
    epochs = {name: epoch_seconds(p) for name, p in profiles.items()}
    if args.per_app:
        for name, e in epochs.items():
            print(f"{name:>12}: {float(e.sum()):10.1f} s training at the fastest configuration")
    print(
        f"{'load':>4} {'workload':>8} {'jobs':>5} {'bound avg':>10} {'target':>8} "
        f"{'pollux avg':>10} {'bound/pollux':>12} {'target reachable':>16}"
    )
    for load in args.loads:
        for number in args.workloads:
            workload = load_workload(DATA / FOLDERS[load] / f"workload-{number}.csv")
            bounds = [
                job_bound(j.request.submit_time, epochs[j.work.application])
                for j in workload.jobs
                if isinstance(j.work, ProfiledWork)
            ]
            avg = float(np.mean(bounds))
            pavg = POLLUX[(load, number)][0]
            target = 0.8 * pavg
            print(
                f"{load:>4} {number:>8} {len(bounds):>5} {avg:>10.1f} {target:>8.1f} "
                f"{pavg:>10.1f} {avg / pavg:>12.3f} {'yes' if avg <= target else 'no':>16}",
                flush=True,
            )


if __name__ == "__main__":
    main()
