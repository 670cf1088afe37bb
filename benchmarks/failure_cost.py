"""What nodes (or single GPUs) failing costs each policy on the Pollux workloads: every
workload run once with no failures and once per failure seed with nodes (``--unit gpu``:
GPUs, each on its own) failing at random (:mod:`danlu.sim.failures`), on the same 16 x 4
GPUs.

A failed node's (GPU's) jobs resume from their last checkpoint once the policy gives them GPUs
again; an elastic policy can run them on fewer GPUs meanwhile, a rigid one waits for a
whole gang. The ``ratio`` column is the average JCT with failures (the mean over the seeds)
over the one without; ``lost`` is the runs lost with a node (GPU) and the training they
lost, per run.

    python benchmarks/failure_cost.py [--load 1.0] [--workloads 1,2,3,4]
        [--policies danlu,tiresias] [--unit node|gpu] [--mtbf 1d] [--repair 2h]
        [--checkpoint-every 30m] [--seeds 0-2]

Same simulator settings as ``danlu_pollux.py`` (60 s rounds, 30 s restarts). Prints figures;
asserts nothing. About 2 minutes on 2 cores with the defaults (``pollux`` takes minutes a
run).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping
from dataclasses import replace

import numpy as np
from danlu_pollux import DATA, FOLDERS, parse_load, parse_workloads

from danlu.cli.sim import parse_seeds
from danlu.core.cluster import Cluster
from danlu.core.units import parse_duration
from danlu.sched.registry import make_policy
from danlu.sim.config import SimConfig
from danlu.sim.elastic import ApplicationProfile, load_profiles
from danlu.sim.engine import Simulator
from danlu.sim.failures import Failures
from danlu.sim.workload import Workload, load_workload

CLUSTER = Cluster.homogeneous(16, 4)


def summary(
    workload: Workload,
    policy: str,
    failures: Failures | None,
    profiles: Mapping[str, ApplicationProfile],
    unit: str = "node",
) -> dict[str, float]:
    """The summary of one run of ``policy`` on ``workload`` with ``failures`` of nodes
    (``unit`` ``node``) or of single GPUs (``gpu``)."""
    config = SimConfig(interval=60.0, restart_cost=30.0)
    if unit == "gpu":
        config = replace(config, gpu_failures=failures)
    else:
        config = replace(config, failures=failures)
    return Simulator(CLUSTER, make_policy(policy), workload, config, profiles).run().summary()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--load", type=parse_load, default="1.0")
    parser.add_argument("--workloads", type=parse_workloads, default="1,2,3,4")
    parser.add_argument("--policies", default="danlu,tiresias")
    parser.add_argument("--unit", default="node", choices=["node", "gpu"])
    parser.add_argument("--mtbf", default="1d")
    parser.add_argument("--repair", default="2h")
    parser.add_argument("--checkpoint-every", default="30m")
    parser.add_argument("--seeds", default="0-2")
    args = parser.parse_args()
    profiles = load_profiles(DATA / "traces")
    seeds = parse_seeds(args.seeds)
    mtbf = parse_duration(args.mtbf, "--mtbf")
    repair = parse_duration(args.repair, "--repair")
    every = parse_duration(args.checkpoint_every, "--checkpoint-every")
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    print(
        f"{args.unit}s fail every {args.mtbf} on average, {args.repair} to repair, checkpoints "
        f"every {args.checkpoint_every}; seeds {args.seeds}; load {args.load}"
    )
    print(
        f"{'workload':>8} {'policy':>10} {'calm avg':>9} {'failing':>9} {'ratio':>6} "
        f"{'failures':>8} {'lost runs':>9} {'lost s':>8} {'seconds':>7}"
    )
    ratios: dict[str, list[float]] = {p: [] for p in policies}
    for number in args.workloads:
        workload = load_workload(DATA / FOLDERS[args.load] / f"workload-{number}.csv")
        for policy in policies:
            started = time.perf_counter()
            calm = summary(workload, policy, None, profiles)["avg_jct"]
            runs = [
                summary(workload, policy, Failures(mtbf, repair, every, seed), profiles, args.unit)
                for seed in seeds
            ]
            failing = float(np.mean([r["avg_jct"] for r in runs]))
            ratio = failing / calm
            ratios[policy].append(ratio)
            failures = float(np.mean([r[f"{args.unit}_failures"] for r in runs]))
            lost_runs = float(np.mean([r["lost_runs"] for r in runs]))
            lost = float(np.mean([r["lost_training_seconds"] for r in runs]))
            print(
                f"{number:>8} {policy:>10} {calm:>9.1f} {failing:>9.1f} {ratio:>6.3f} "
                f"{failures:>8.1f} {lost_runs:>9.1f} {lost:>8.0f} "
                f"{time.perf_counter() - started:>7.1f}"
            )
    for policy, values in ratios.items():
        print(f"{policy}: mean ratio {np.mean(values):.3f} ({min(values):.3f}-{max(values):.3f})")


if __name__ == "__main__":
    main()
