"""What sharing the cluster costs each policy on the Pollux workloads: the ``pollux``
baseline and the ``danlu`` policy, each run once on the whole workload and once with every
job alone (in a simulation of its own, on the empty 16 x 4 GPUs, with a fresh policy).

The solo average is what the policy's per-job work costs (its first start, what it learns
of the job, its moves) with no other job; the full run's average minus it is what
contention costs. The issue's target (0.8 x Pollux's published average) can only be met
where danlu's solo average is below it, and only by as much contention as is left between
the two (the ``room`` column; negative: out of reach even with no contention at all).

    PYTHONPATH=src python benchmarks/contention.py [--loads 0.5] [--workloads 1,2,3,4]
        [--population 100] [--generations 100]

Same simulator settings as ``danlu_pollux.py`` (60 s rounds, 30 s restarts). Prints figures;
asserts nothing. The baseline's search makes its runs slow: about 10 minutes for the four
0.5x runs on 2 cores.
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Callable, Mapping

import numpy as np
from danlu_pollux import DATA, FOLDERS, POLLUX, TARGET, add_workload_options
from policy_headroom import workload_jcts

from danlu.sched.policies.base import Policy
from danlu.sched.policies.danlu import DanluPolicy
from danlu.sched.policies.pollux import PolluxPolicy
from danlu.sim.config import SimConfig
from danlu.sim.elastic import ApplicationProfile, load_profiles
from danlu.sim.workload import Workload, load_workload


def averages(
    workload: Workload,
    policy: Callable[[], Policy],
    config: SimConfig,
    profiles: Mapping[str, ApplicationProfile],
) -> tuple[float, float]:
    """(solo, full): the average JCT of the workload's jobs each alone, and in one run."""
    solo = float(np.mean(workload_jcts(workload, policy, config, profiles, solo=True)))
    full = float(np.mean(workload_jcts(workload, policy, config, profiles)))
    return solo, full


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    add_workload_options(parser, loads="0.5")
    parser.add_argument("--population", type=int, default=100)
    parser.add_argument("--generations", type=int, default=100)
    args = parser.parse_args()
    profiles = load_profiles(DATA / "traces")
    config = SimConfig(interval=60.0, restart_cost=30.0)
    policies: dict[str, Callable[[], Policy]] = {
        "pollux": functools.partial(
            PolluxPolicy, population=args.population, generations=args.generations
        ),
        "danlu": DanluPolicy,
    }
    print(
        f"{'load':>4} {'workload':>8} {'pollux solo':>11} {'full':>7} {'contention':>10} "
        f"{'danlu solo':>10} {'full':>7} {'contention':>10} {'target':>7} {'room':>7} "
        f"{'seconds':>7}"
    )
    for load in args.loads:
        for number in args.workloads:
            began = time.perf_counter()
            workload = load_workload(DATA / FOLDERS[load] / f"workload-{number}.csv")
            runs = {name: averages(workload, p, config, profiles) for name, p in policies.items()}
            cells = [
                f"{solo:>{len(name) + 5}.1f} {full:>7.1f} {full - solo:>10.1f}"
                for name, (solo, full) in runs.items()
            ]
            danlu_solo = runs["danlu"][0]
            target = TARGET * POLLUX[(load, number)][0]
            print(
                f"{load:>4} {number:>8} {' '.join(cells)} {target:>7.1f} "
                f"{target - danlu_solo:>7.1f} {time.perf_counter() - began:>7.0f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
