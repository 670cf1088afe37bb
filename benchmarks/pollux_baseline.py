"""A baseline policy in danlu's simulator on the Pollux workloads, against the artifact's
published results for the scheduler it copies (how faithful the baseline and the simulator
are together), and the ``danlu`` policy against the baseline in the same simulator (the same
jobs, rounds and restarts for both). Prints figures; asserts nothing.

    python benchmarks/pollux_baseline.py [--policy pollux|optimus] [--loads 0.5,1.0,1.5]
        [--workloads 1,2,3,4] [--population 100] [--generations 100] [--no-danlu]

``--policy pollux`` (the default): the ``pollux`` baseline against Pollux's published
results; ``--policy optimus``: the ``optimus`` baseline against Optimus+Oracle+TunedJobs'
(``--population`` and ``--generations`` are the pollux search's). Columns: the baseline's
average JCT here, the published one, their ratio (1.0: the baseline reproduces the
published scheduler); the baseline's p99 against the published p99; the danlu policy's
average here and its ratio to the baseline's. 16 x 4 GPUs, 60 s rounds, 30 s restarts, as
``danlu_pollux.py``. The pollux baseline's search takes about 0.1 s a round: its 12 runs
take about 20 minutes on 2 cores (the optimus baseline's, under a minute).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from danlu_pollux import (
    DATA,
    FOLDERS,
    OPTIMUS,
    POLLUX,
    add_workload_options,
    jct_figures,
    simulate,
)

from danlu.sched.policies.base import Policy
from danlu.sched.policies.danlu import DanluPolicy
from danlu.sched.policies.optimus import OptimusPolicy
from danlu.sched.policies.pollux import PolluxPolicy
from danlu.sim.elastic import load_profiles


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--policy", choices=("pollux", "optimus"), default="pollux")
    add_workload_options(parser)
    parser.add_argument("--population", type=int, default=100)
    parser.add_argument("--generations", type=int, default=100)
    parser.add_argument("--no-danlu", action="store_true", help="run the baseline only")
    args = parser.parse_args()
    published_figures = POLLUX if args.policy == "pollux" else OPTIMUS
    profiles = load_profiles(DATA / "traces")
    print(
        f"{'load':>4} {'workload':>8} {'baseline':>9} {'published':>9} {'ratio':>6} "
        f"{'base p99':>9} {'pub p99':>9} {'restarts/job':>12} {'danlu':>8} {'danlu/base':>10} "
        f"{'seconds':>7}"
    )
    fidelity: list[float] = []
    versus: list[float] = []
    for load in args.loads:
        for number in args.workloads:
            path = DATA / FOLDERS[load] / f"workload-{number}.csv"
            began = time.perf_counter()
            policy: Policy = (
                PolluxPolicy(population=args.population, generations=args.generations)
                if args.policy == "pollux"
                else OptimusPolicy()
            )
            result = simulate(path, policy, profiles)
            avg, p99 = jct_figures(result)
            restarts = float(np.mean([j.restarts for j in result.jobs]))
            published, published_p99 = published_figures[(load, number)]
            fidelity.append(avg / published)
            if not args.no_danlu:
                danlu = simulate(path, DanluPolicy(), profiles)
                danlu_avg = float(np.mean([j.jct for j in danlu.jobs if j.end_time]))
                versus.append(danlu_avg / avg)
                ours = f" {danlu_avg:>8.1f} {danlu_avg / avg:>10.3f}"
            else:
                ours = f" {'-':>8} {'-':>10}"
            print(
                f"{load:>4} {number:>8} {avg:>9.1f} {published:>9.1f} {avg / published:>6.3f} "
                f"{p99:>9.1f} {published_p99:>9.1f} {restarts:>12.2f}{ours}"
                f" {time.perf_counter() - began:>7.0f}",
                flush=True,
            )
    line = f"baseline / published: mean {float(np.mean(fidelity)):.3f}"
    line += f", {min(fidelity):.3f}-{max(fidelity):.3f}"
    if versus:
        line += f"; danlu / baseline: mean {float(np.mean(versus)):.3f}"
        line += f", {min(versus):.3f}-{max(versus):.3f}"
    print(line)


if __name__ == "__main__":
    main()
