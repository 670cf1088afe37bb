"""What users' time limits do to EASY backfill: the simulator's synthetic workload with each
job told to the scheduler as its true duration (an oracle), then as a time limit a user
would give (the duration times a random factor, rounded up to a quarter of an hour), and
with limits that are sometimes too short (the job is cancelled when it reaches its limit).

    PYTHONPATH=src python benchmarks/backfill_estimates.py [--jobs 200] [--seed 0]
        [--nodes 4] [--gpus-per-node 4]

Every run is ``fifo`` with ``backfill`` and ``reserve`` (EASY) but the first, greedy
backfill with the oracle estimates, the baseline the ratios are against. Prints figures;
asserts nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import random
import statistics

from danlu.core.cluster import Cluster
from danlu.sched.registry import make_policy
from danlu.sim.config import SimConfig
from danlu.sim.engine import Simulator
from danlu.sim.metrics import SimResult
from danlu.sim.workload import RigidWork, Workload, synthetic_workload

QUARTER_HOUR = 900.0


def with_limits(workload: Workload, low: float, high: float, seed: int) -> Workload:
    """``workload`` with each job's time limit the duration times a factor drawn from
    ``[low, high]``, rounded up to a quarter of an hour, and told to the scheduler as the
    job's expected duration (as the control plane tells it a spec's limit)."""
    rng = random.Random(seed)
    jobs = []
    for job in workload.jobs:
        assert isinstance(job.work, RigidWork)
        limit = math.ceil(job.work.duration * rng.uniform(low, high) / QUARTER_HOUR)
        limit_seconds = max(QUARTER_HOUR, limit * QUARTER_HOUR)
        request = dataclasses.replace(job.request, expected_duration=limit_seconds)
        jobs.append(dataclasses.replace(job, request=request, time_limit=limit_seconds))
    return dataclasses.replace(workload, jobs=tuple(jobs))


def simulate(workload: Workload, cluster: Cluster, reserve: bool) -> SimResult:
    policy = make_policy("fifo", backfill=True, reserve=reserve)
    return Simulator(cluster, policy, workload, SimConfig(interval=60.0)).run()


def wide_wait(result: SimResult, wide: set[str]) -> float:
    """The mean queueing delay of the wide jobs (8 GPUs or more)."""
    return statistics.fmean(r.queueing_delay for r in result.jobs if r.id in wide)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--gpus-per-node", type=int, default=4)
    args = parser.parse_args()
    for flag, value in (("--nodes", args.nodes), ("--gpus-per-node", args.gpus_per_node)):
        if value < 1:
            parser.error(f"{flag} must be at least 1, got {value}")
    cluster = Cluster.homogeneous(args.nodes, args.gpus_per_node)
    oracle = synthetic_workload(args.jobs, args.seed)
    wide = {job.request.id for job in oracle.jobs if job.request.gpus >= 8}
    runs = [
        ("greedy backfill, true durations", oracle, False),
        ("EASY, true durations", oracle, True),
        ("EASY, limits 1-4x the duration", with_limits(oracle, 1.0, 4.0, args.seed), True),
        ("EASY, limits 0.5-3x (some too short)", with_limits(oracle, 0.5, 3.0, args.seed), True),
    ]
    print(f"{oracle.name}: {len(oracle.jobs)} jobs ({len(wide)} of 8+ GPUs) on "
          f"{cluster.total_gpus} GPUs")  # fmt: skip
    print(f"{'run':40} {'avg JCT':>10} {'ratio':>6} {'wide wait':>10} {'ratio':>6} "
          f"{'timed out':>9} {'util':>6}")  # fmt: skip
    base_jct = base_wide = math.nan
    for label, workload, reserve in runs:
        result = simulate(workload, cluster, reserve)
        summary = result.summary()
        jct, waits = summary["avg_jct"], wide_wait(result, wide)
        if math.isnan(base_jct):
            base_jct, base_wide = jct, waits
        print(
            f"{label:40} {jct:10.1f} {jct / base_jct:6.3f} {waits:10.1f} {waits / base_wide:6.3f}"
            f" {int(summary['timed_out']):9d} {summary['gpu_utilization']:6.3f}"
        )


if __name__ == "__main__":
    main()
