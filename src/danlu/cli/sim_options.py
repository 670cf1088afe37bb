"""The options ``danlu sim run``, ``compare`` and ``plan`` share (the workload, the
traces, the failure, interference, fair-share and quota settings, the policy and its
options), and the simulation settings they make (:func:`sim_config`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from danlu.cli.sim_flags import parse_project_shares
from danlu.core.errors import ConfigError
from danlu.sched.quota import Quotas
from danlu.sim.config import SimConfig
from danlu.sim.failures import Failures
from danlu.sim.interference import Interference

DEFAULT_TRACES = Path("../shared/data/pollux/traces")
"""``--traces`` when not given: the Pollux measurements beside a checkout."""

WorkloadOpt = Annotated[
    Path | None,
    typer.Option(
        "--workload",
        help="Workload CSV (Pollux, Philly, Alibaba openb or danlu format, recognised by its "
        "columns; your own trace in the danlu format: name, submit_time, gpus, duration and "
        "optionally priority, gpu_memory, family, model, project, time_limit, user, times in "
        "seconds). Without it, a built-in synthetic workload is used.",
    ),
]
TracesOpt = Annotated[
    Path, typer.Option("--traces", help="Folder of per-application measurements (Pollux format).")
]
EventOpt = Annotated[
    bool,
    typer.Option(
        "--event-rounds/--no-event-rounds", help="Also schedule at each arrival/completion."
    ),
]
JsonOpt = Annotated[Path | None, typer.Option("--json", help="Write the results as JSON here.")]
InterferenceOpt = Annotated[
    Path | None,
    typer.Option(
        "--interference",
        help="Gavel's physical_cluster_throughputs.json (e.g. ../shared/data/gavel/): slow jobs "
        "that share a GPU as Gavel measured such pairs. Without it, sharing is free.",
    ),
]
InterferenceGpuOpt = Annotated[
    str,
    typer.Option(
        "--interference-gpu",
        help="Which GPU's measurements of that file to use (with --interference).",
    ),
]
ProjectShareOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--project-share",
        help="A project's weight for fair-share policies, NAME=WEIGHT (repeatable; default 1).",
    ),
]
MtbfOpt = Annotated[
    str | None,
    typer.Option(
        "--node-mtbf",
        help="Nodes fail at random, each with this mean time between failures (e.g. 30d); "
        "a failed node's jobs resume from their last checkpoint. Without it, none fail.",
    ),
]
RepairOpt = Annotated[
    str,
    typer.Option(
        "--node-repair", help="How long a failed node is out of service (with --node-mtbf)."
    ),
]
GpuMtbfOpt = Annotated[
    str | None,
    typer.Option(
        "--gpu-mtbf",
        help="Single GPUs fail at random, each with this mean time between failures (e.g. "
        "365d); the jobs on a failed GPU resume from their last checkpoint, the rest of its "
        "node works on. Without it, no GPU fails on its own.",
    ),
]
GpuRepairOpt = Annotated[
    str,
    typer.Option("--gpu-repair", help="How long a failed GPU is out of service (with --gpu-mtbf)."),
]
CheckpointOpt = Annotated[
    str,
    typer.Option(
        "--checkpoint-every",
        help="Training between two checkpoints of a job (with --node-mtbf or --gpu-mtbf).",
    ),
]
QuotaOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--quota",
        help="GPUs a project's running jobs may hold at once, PROJECT=GPUS (repeatable; by "
        "the workload's project column): its jobs wait beyond it, as the server keeps them.",
    ),
]
UserQuotaOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--user-quota",
        help="GPUs a user's running jobs may hold at once, USER=GPUS (repeatable; by the "
        "workload's user column).",
    ),
]

PolicyOpt = Annotated[str, typer.Option("--policy", help="Scheduling policy name.")]
PolicyOptionOpt = Annotated[
    list[str] | None, typer.Option("--option", help="Policy option key=value (repeatable).")
]


def sim_config(
    interval: float,
    restart_cost: float,
    event_rounds: bool,
    interference: Path | None,
    interference_gpu: str,
    project_shares: list[str] | None = None,
    failures: tuple[Failures | None, Failures | None] = (None, None),
    quotas: Quotas | None = None,
) -> SimConfig:
    """The simulation settings of ``run``, ``compare`` and ``plan`` (``failures``: the
    nodes' and the GPUs')."""
    model = None
    if interference is not None:
        if not interference.is_file():
            raise ConfigError(
                f"--interference {interference} is not a file; point it at Gavel's "
                "physical_cluster_throughputs.json (e.g. ../shared/data/gavel/)"
            )
        model = Interference.from_gavel(interference, interference_gpu)
    return SimConfig(
        interval=interval,
        restart_cost=restart_cost,
        event_rounds=event_rounds,
        interference=model,
        project_shares=parse_project_shares(project_shares or []),
        failures=failures[0],
        gpu_failures=failures[1],
        quotas=quotas or Quotas(),
    )
