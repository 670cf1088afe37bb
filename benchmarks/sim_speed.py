"""Wall time of a full Philly replay (82,247 jobs) with ``tiresias``, against ``fifo`` measured
in the same run as the baseline. Prints figures only; tests never assert on time.

The default cluster is 64 nodes x 8 GPUs = 512 GPUs: the trace's mean demand is ~374 GPUs, so
the cluster is busy (73% allocated) and queues form, which is the expensive case.

    python benchmarks/sim_speed.py [--trace PATH] [--nodes 64] [--gpus-per-node 8]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from danlu.core.cluster import Cluster
from danlu.sched import make_policy
from danlu.sim.config import SimConfig
from danlu.sim.engine import Simulator
from danlu.sim.workload import load_workload

DEFAULT_TRACE = Path(__file__).resolve().parents[1] / "../shared/data/pollux/traces/philly.csv"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--policies", default="fifo,tiresias")
    args = parser.parse_args()

    started = time.perf_counter()
    workload = load_workload(args.trace)
    load_s = time.perf_counter() - started
    cluster = Cluster.homogeneous(args.nodes, args.gpus_per_node)
    print(f"{len(workload.jobs)} jobs loaded in {load_s:.2f} s; {cluster.total_gpus} GPUs")
    walls: dict[str, float] = {}
    for name in args.policies.split(","):
        started = time.perf_counter()
        result = Simulator(cluster, make_policy(name), workload, SimConfig()).run()
        walls[name] = time.perf_counter() - started
        summary = result.summary()
        print(
            f"{name:<10} simulate {walls[name]:7.2f} s  "
            f"(load + simulate {walls[name] + load_s:7.2f} s)"
            f"  jobs {int(summary['jobs'])}  avg JCT {summary['avg_jct']:.0f} s  "
            f"rounds {int(summary['rounds'])}  preemptions {int(summary['preemptions'])}"
        )
    if "fifo" in walls:
        for name, wall in walls.items():
            if name != "fifo":
                print(f"{name} / fifo wall-time ratio: {wall / walls['fifo']:.2f}")


if __name__ == "__main__":
    main()
