"""What sharing GPUs costs when the simulator slows jobs that share, as Gavel measured.

Synthetic workloads of 400 jobs on 4 x 4 GPUs: 70 % ask for part of one GPU (8-36 GiB of its
80 GiB), the rest for 1, 2 or 4 whole GPUs; every job names a model family drawn uniformly
from ``MODEL_FAMILIES``; run times log-normal (median ~18 min); Poisson arrivals at
``--loads`` times the cluster's capacity; ``--seeds`` workloads per load. Each is run under
the ``danlu`` policy in four settings of its sharing rule, each twice: sharing free (the
simulator's default) and sharing slowed by ``danlu.sim.interference`` calibrated on
``../shared/data/gavel/physical_cluster_throughputs.json``:

- ``pack``: ``spread_shares=false``, ``share_min_rate=0``: best fit puts a share beside
  other jobs at once;
- ``spread``: ``share_min_rate=0``: a share gets a GPU of its own while one is free and no
  whole-GPU job is left waiting;
- ``spread+0.2``: as ``spread`` with ``share_min_gain=0.2``;
- ``default``: the policy's defaults (``spread`` with ``share_min_rate=0.3``: no pair where
  either job is predicted to keep less than 30 % of its speed).

Prints average JCTs and, per setting, the mean ratio to ``pack`` over the runs. Asserts
nothing.

    PYTHONPATH=src python benchmarks/sharing_interference.py [--loads 0.7,1.0,1.3]
        [--seeds 0,1,2] [--policies tiresias]

``--policies`` adds other policies' runs (e.g. ``tiresias``, which packs shares by memory
alone; its runs can take minutes when a job nearly stops beside another).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path
from typing import Any

from danlu.config import parse_option_pairs
from danlu.core.cluster import Cluster
from danlu.core.spec import MODEL_FAMILIES
from danlu.core.units import GiB
from danlu.estimate.colocation import gavel_family
from danlu.sched.registry import make_policy
from danlu.sched.view import JobRequest
from danlu.sim.config import SimConfig
from danlu.sim.engine import Simulator
from danlu.sim.interference import Interference
from danlu.sim.workload import RigidWork, Workload, WorkloadJob

GAVEL = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "gavel"

SETTINGS: dict[str, dict[str, Any]] = {
    "pack": {"spread_shares": False, "share_min_rate": 0.0},
    "spread": {"share_min_rate": 0.0},
    "spread+0.2": {"share_min_gain": 0.2, "share_min_rate": 0.0},
    "default": {},
}


def workload(
    load: float,
    seed: int,
    jobs: int = 400,
    gpus: int = 16,
    unknown: float = 0.0,
    models: dict[str, list[str]] | None = None,
) -> Workload:
    """The deterministic sharing workload of ``load`` and ``seed`` (see the module doc);
    ``unknown``: the fraction of jobs whose family is left empty; ``models``: each job
    trains one of these models of its family (Gavel's names), drawn uniformly."""
    rng = random.Random(seed)
    shared_fraction, mean_duration = 0.7, 1800.0
    demand = shared_fraction * 1.0 + (1 - shared_fraction) * 2.0  # GPUs per job, roughly
    rate = load * gpus / (demand * mean_duration)
    t = 0.0
    out: list[WorkloadJob] = []
    for i in range(jobs):
        t += rng.expovariate(rate)
        duration = float(round(max(60.0, rng.lognormvariate(7.0, 0.9))))
        family = rng.choice(MODEL_FAMILIES)
        model = rng.choice(models[family]) if models else ""
        if unknown and rng.random() < unknown:
            family = ""
        if rng.random() < shared_fraction:
            size, memory = 1, rng.randint(8, 36) * GiB
        else:
            size, memory = rng.choice([1, 2, 4]), 0
        request = JobRequest(
            id=f"j{i}",
            submit_time=float(round(t)),
            gpus=size,
            gpu_memory=memory,
            seq=i,
            expected_duration=duration,
            family=family,
        )
        out.append(WorkloadJob(request, RigidWork(duration, model)))
    return Workload(f"sharing-{load}-{seed}", "danlu", tuple(out))


def average_jct(
    wl: Workload, policy: str, options: dict[str, Any], model: Interference | None
) -> float:
    config = SimConfig(interference=model)
    sim = Simulator(Cluster.homogeneous(4, 4), make_policy(policy, **options), wl, config)
    return float(sim.run().summary()["avg_jct"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loads", default="0.7,1.0,1.3")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--policies", default="", help="other policies to run as well")
    parser.add_argument(
        "--unknown", type=float, default=0.0, help="fraction of jobs with no family"
    )
    parser.add_argument(
        "--models",
        action="store_true",
        help="every job trains one of Gavel's models of its family (the slowdown is then "
        "that pair's measurement, not the families' median)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME:KEY=VALUE[,KEY=VALUE]",
        help="a danlu setting to run as well (repeatable)",
    )
    parser.add_argument("--gavel", type=Path, default=GAVEL / "physical_cluster_throughputs.json")
    args = parser.parse_args()
    model = Interference.from_gavel(args.gavel)
    by_family: dict[str, list[str]] = {}
    for name in sorted(model.models):
        by_family.setdefault(gavel_family(name), []).append(name)
    settings = dict(SETTINGS)
    for text in args.set:
        name, _, pairs = text.partition(":")
        settings[name] = parse_option_pairs(pairs.split(","), "--set")
    runs: list[tuple[str, str, dict[str, Any]]] = [
        (name, "danlu", opts) for name, opts in settings.items()
    ]
    runs += [(p, p, {}) for p in args.policies.split(",") if p]
    header = " ".join(
        f"{name + (' ' + how):>{max(len(name) + 5, 15)}}"
        for name, _, _ in runs
        for how in ("free", "slowed")
    )
    print(f"load seed {header}")
    ratios: dict[str, dict[str, list[float]]] = {n: {"free": [], "slowed": []} for n, _, _ in runs}
    started = time.perf_counter()
    for load in (float(x) for x in args.loads.split(",")):
        for seed in (int(x) for x in args.seeds.split(",")):
            wl = workload(
                load, seed, unknown=args.unknown, models=by_family if args.models else None
            )
            row: list[str] = []
            base: dict[str, float] = {}
            for name, policy, opts in runs:
                for how, m in (("free", None), ("slowed", model)):
                    jct = average_jct(wl, policy, opts, m)
                    base.setdefault(how, jct)  # the first setting, pack, is the baseline
                    ratios[name][how].append(jct / base[how])
                    row.append(f"{jct:>{max(len(name) + 5, 15)}.1f}")
            print(f"{load:4.1f} {seed:4d} {' '.join(row)}", flush=True)
    for name, by in ratios.items():
        print(
            f"{name}: mean ratio to pack {statistics.mean(by['free']):.3f} free, "
            f"{statistics.mean(by['slowed']):.3f} slowed"
        )
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
