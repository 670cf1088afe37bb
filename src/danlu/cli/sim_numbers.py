"""``danlu sim``'s options that take a number, shared by ``sim run``, ``sim compare`` and
``sim plan``: each written plainly (:func:`~danlu.cli.options.plain_int_flag`), its bounds
checked as it is read."""

from __future__ import annotations

from typing import Annotated

import typer

from danlu.cli.options import plain_float_flag, plain_int_flag
from danlu.cli.sim_checks import MOST_GPUS_PER_NODE, MOST_NODES

NodesOpt = Annotated[
    int,
    typer.Option(
        "--nodes",
        min=1,
        max=MOST_NODES,
        help="Nodes in the simulated cluster.",
        parser=plain_int_flag("--nodes", "4", 1, MOST_NODES),
    ),
]
GpusOpt = Annotated[
    int,
    typer.Option(
        "--gpus-per-node",
        min=1,
        max=MOST_GPUS_PER_NODE,
        help="GPUs per node.",
        parser=plain_int_flag("--gpus-per-node", "8", 1, MOST_GPUS_PER_NODE),
    ),
]
IntervalOpt = Annotated[
    float,
    typer.Option(
        "--interval",
        help="Seconds between scheduling rounds.",
        parser=plain_float_flag("--interval", "60"),
    ),
]
RestartOpt = Annotated[
    float,
    typer.Option(
        "--restart-cost",
        help="Seconds lost per (re)allocation.",
        parser=plain_float_flag("--restart-cost", "30"),
    ),
]
FailureSeedOpt = Annotated[
    int,
    typer.Option(
        "--failure-seed",
        min=0,
        parser=plain_int_flag("--failure-seed", "1", 0),
        help="Seed of the nodes' and GPUs' failure times (with --node-mtbf or --gpu-mtbf).",
    ),
]
JobsOpt = Annotated[
    int,
    typer.Option(
        "--jobs",
        help="Jobs in the synthetic workload (without --workload).",
        parser=plain_int_flag("--jobs", "200"),
    ),
]
SeedOpt = Annotated[
    int,
    typer.Option(
        "--seed",
        help="Seed of the synthetic workload (without --workload).",
        parser=plain_int_flag("--seed", "1"),
    ),
]
