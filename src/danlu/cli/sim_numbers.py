"""``danlu sim``'s options that take a number, shared by ``sim run``, ``sim compare`` and
``sim plan``: each written plainly (:func:`~danlu.cli.options.int_option`), its bounds
checked as it is read."""

from __future__ import annotations

from typing import Annotated

from danlu.cli.options import float_option, int_option
from danlu.cli.sim_checks import MOST_GPUS_PER_NODE, MOST_NODES

NodesOpt = Annotated[
    int,
    int_option(
        "--nodes", help="Nodes in the simulated cluster.", example="4", low=1, high=MOST_NODES
    ),
]
GpusOpt = Annotated[
    int,
    int_option(
        "--gpus-per-node", help="GPUs per node.", example="8", low=1, high=MOST_GPUS_PER_NODE
    ),
]
IntervalOpt = Annotated[
    float,
    float_option("--interval", help="Seconds between scheduling rounds.", example="60"),
]
RestartOpt = Annotated[
    float,
    float_option("--restart-cost", help="Seconds lost per (re)allocation.", example="30"),
]
FailureSeedOpt = Annotated[
    int,
    int_option(
        "--failure-seed",
        example="1",
        low=0,
        help="Seed of the nodes' and GPUs' failure times (with --node-mtbf or --gpu-mtbf).",
    ),
]
JobsOpt = Annotated[
    int,
    int_option(
        "--jobs", help="Jobs in the synthetic workload (without --workload).", example="200"
    ),
]
SeedOpt = Annotated[
    int,
    int_option(
        "--seed",
        help="Seed of the synthetic workload (without --workload).",
        example="1",
        low=0,
    ),
]
