"""``danlu sim``: replay workloads on a simulated cluster with the production policies.

- ``danlu sim run``      one policy on one workload: summary table, JSON, PNG plot.
- ``danlu sim compare``  several policies on one workload, side by side.
- ``danlu sim pack``     the FGD allocation experiment on Alibaba pod/node lists.
- ``danlu sim plan``     the fewest nodes on which a workload meets its targets.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from danlu.cli.markup import as_text
from danlu.cli.markup import console as cli_console
from danlu.cli.options import fail, float_option, given_options, int_option
from danlu.cli.output import stdout_written
from danlu.cli.sim_checks import (
    MOST_NODES,
    PLOT_FORMATS,
    check_distinct_seeds,
    check_enabled,
    check_load,
    check_plot,
    check_synthetic,
    check_traces,
    failure_settings,
)
from danlu.cli.sim_flags import (
    check_named,
    json_text,
    parse_policy_list,
    parse_project_shares,
    parse_quotas,
)
from danlu.cli.sim_numbers import (
    FailureSeedOpt,
    GpusOpt,
    IntervalOpt,
    JobsOpt,
    NodesOpt,
    RestartOpt,
    SeedOpt,
)
from danlu.cli.sim_tables import (
    KINDS,
    format_value,
    left_out_note,
    project_table,
    rejection_note,
    summary_table,
    unplaceable_note,
)
from danlu.config import parse_option_pairs
from danlu.core.cluster import Cluster
from danlu.core.errors import ConfigError, DanluError, UnknownNameError
from danlu.sched.quota import Quotas
from danlu.sched.registry import default_registry
from danlu.sim.config import SimConfig
from danlu.sim.engine import Simulator
from danlu.sim.failures import Failures
from danlu.sim.interference import Interference
from danlu.sim.metrics import SimResult, json_summary
from danlu.sim.setting_types import option_refusal
from danlu.sim.workload import Workload, load_workload, synthetic_workload

DEFAULT_TRACES = Path("../shared/data/pollux/traces")

sim_app = typer.Typer(
    rich_markup_mode="markdown",  # as the main app (danlu.cli.main)
    help="Simulate scheduling policies on public cluster traces.",
    no_args_is_help=True,
)
console = cli_console()
err = cli_console(stderr=True)


def register(app: typer.Typer) -> None:
    """Add the ``sim`` command group to ``app``."""
    app.add_typer(sim_app, name="sim")


MAX_SEEDS = 10_000
"""The most seeds ``--seeds`` may name (each is a whole packing run); a range of billions
used to be built in memory before anything else (a MemoryError)."""


def parse_seeds(text: str) -> list[int]:
    """``42-51`` or ``1,2,3`` (or a mix: ``1,5-7``) -> list of ints, at most
    :data:`MAX_SEEDS` of them (counted before the list is built)."""
    spans: list[tuple[int, int]] = []
    try:
        for part in text.split(","):
            part = part.strip()
            if "-" in part:
                lo, hi = part.split("-", 1)
                spans.append((int(lo), int(hi)))
                if spans[-1][1] < spans[-1][0]:
                    raise ValueError
            elif part:
                spans.append((int(part), int(part)))
    except ValueError:
        raise ConfigError(
            f"--seeds {text!r} is not a seed list; write e.g. 42-51 or 1,2,3"
        ) from None
    if not spans:
        raise ConfigError("--seeds is empty; write e.g. 42-51")
    total = sum(hi - lo + 1 for lo, hi in spans)
    if total > MAX_SEEDS:
        raise ConfigError(
            f"--seeds {text!r} names {total:,} seeds, more than {MAX_SEEDS:,} seeds at once; "
            "name fewer, e.g. 42-51"
        )
    return [seed for lo, hi in spans for seed in range(lo, hi + 1)]


def parse_options(pairs: list[str]) -> dict[str, Any]:
    """``--option key=value`` policy options (:func:`danlu.config.parse_option_pairs`)."""
    return parse_option_pairs(pairs, "--option")


def check_output(path: Path | None, flag: str) -> None:
    """Refuse an output path that cannot be written before any work is done, so a long
    simulation does not end in an error that loses its results."""
    if path is None:
        return
    if path.is_dir():
        raise ConfigError(f"{flag} {path} is a folder; give a file name, e.g. {path / 'out'}")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise ConfigError(f"{flag} {path}: folder {parent} does not exist; create it first")


def check_distinct(outputs: dict[str, Path | None], inputs: dict[str, Path | None]) -> None:
    """Refuse an output path (by its flag) that resolves to an input file or to another
    output, so that writing the results cannot replace what was read or each other."""
    taken: dict[Path, str] = {}
    for flag, path in inputs.items():
        if path is not None:
            taken.setdefault(path.expanduser().resolve(), flag)
    for flag, path in outputs.items():
        if path is None:
            continue
        where = path.expanduser().resolve()
        if where in taken:
            raise ConfigError(
                f"{flag} {path} is the file of {taken[where]}; write the results elsewhere"
            )
        taken[where] = flag


def write_output(path: Path, write: Callable[[Path], object], flag: str) -> None:
    """Write an output file with ``write(path)``, as a clear error (exit 2) if the file
    system refuses."""
    try:
        write(path)
    except OSError as exc:
        raise fail(ConfigError(f"{flag} {path}: cannot write: {exc.strerror}")) from None
    console.print(f"wrote {as_text(path)}", highlight=False)


def _text(text: str) -> Callable[[Path], object]:
    return lambda path: path.write_text(text)


def _load(workload: Path | None, jobs: int, seed: int) -> Workload:
    if workload is None:
        return synthetic_workload(jobs=jobs, seed=seed)
    return load_workload(workload)


def _notes(workload: Workload, notes: list[str | None]) -> None:
    """Print the workload's pods left out (an openb list's never-scheduled pods) and the
    given notes (each result's rejections), skipping the None ones."""
    for note in [left_out_note(workload), *notes]:
        if note is not None:
            console.print(note)


def _simulate(
    workload: Workload,
    policy_name: str,
    options: dict[str, Any],
    cluster: Cluster,
    config: SimConfig,
    traces: Path,
    progress: bool,
) -> SimResult:
    registry = default_registry()
    try:
        policy = registry.create(policy_name, **options)
    except (ConfigError, UnknownNameError) as exc:  # named as the --option typed

        def build(some: Mapping[str, Any]) -> object:
            return registry.create(policy_name, **some)

        raise option_refusal(exc, options, build) from None
    profiles = {}
    if workload.format == "pollux":
        from danlu.sim.elastic import load_profiles

        if not traces.is_dir():
            raise ConfigError(
                f"--traces {traces} is not a folder; point it at the Pollux traces "
                "(e.g. ../shared/data/pollux/traces)"
            )
        profiles = load_profiles(traces)
    if not progress:
        return Simulator(cluster, policy, workload, config, profiles).run()
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} jobs"),
        TimeElapsedColumn(),
    )
    # drawn for a person at a terminal only: elsewhere it wrote just a line break, which a
    # stderr that cannot be written (2>/dev/full) made an error after the simulation ran
    with Progress(*columns, console=err, transient=True, disable=not err.is_terminal) as bar:
        task = bar.add_task(f"{policy_name}", total=len(workload.jobs))

        def update(now: float, done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        return Simulator(cluster, policy, workload, config, profiles, on_progress=update).run()


WorkloadOpt = Annotated[
    Path | None,
    typer.Option(
        "--workload",
        help="Workload CSV (Pollux, Philly, Alibaba openb or danlu format, recognised by its "
        "columns). Without it, a built-in synthetic workload is used.",
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


def _config(
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


@sim_app.command("run")
def run(
    ctx: typer.Context,
    workload: WorkloadOpt = None,
    policy: PolicyOpt = "tiresias",
    option: PolicyOptionOpt = None,
    traces: TracesOpt = DEFAULT_TRACES,
    nodes: NodesOpt = 16,
    gpus_per_node: GpusOpt = 4,
    interval: IntervalOpt = 60.0,
    restart_cost: RestartOpt = 30.0,
    event_rounds: EventOpt = False,
    interference: InterferenceOpt = None,
    interference_gpu: InterferenceGpuOpt = "v100",
    project_share: ProjectShareOpt = None,
    node_mtbf: MtbfOpt = None,
    node_repair: RepairOpt = "1h",
    gpu_mtbf: GpuMtbfOpt = None,
    gpu_repair: GpuRepairOpt = "1h",
    checkpoint_every: CheckpointOpt = "30m",
    failure_seed: FailureSeedOpt = 0,
    quota: QuotaOpt = None,
    user_quota: UserQuotaOpt = None,
    json_out: JsonOpt = None,
    plot: Annotated[
        Path | None,
        typer.Option(
            "--plot", help=f"Write a timeline plot here ({', '.join(PLOT_FORMATS)}, by extension)."
        ),
    ] = None,
    jobs: JobsOpt = 200,
    seed: SeedOpt = 0,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress bar.")] = False,
) -> None:
    """Simulate one policy on one workload and print a summary."""
    try:
        names = default_registry().names()
        if policy not in names:
            raise ConfigError(f"--policy: unknown policy {policy!r}; valid: {', '.join(names)}")
        check_output(json_out, "--json")
        check_output(plot, "--plot")
        check_distinct(
            {"--json": json_out, "--plot": plot},
            {"--workload": workload, "--interference": interference, "--traces": traces},
        )
        check_plot(plot)
        failures = failure_settings(
            (node_mtbf, node_repair), (gpu_mtbf, gpu_repair), checkpoint_every, failure_seed
        )
        check_enabled(given_options(ctx))
        check_synthetic(given_options(ctx))
        check_traces(traces, given_options(ctx))
        wl = _load(workload, jobs, seed)
        config = _config(
            interval,
            restart_cost,
            event_rounds,
            interference,
            interference_gpu,
            project_share,
            failures,
            parse_quotas(quota or [], user_quota or []),
        )
        check_named(wl, config)
        cluster = Cluster.homogeneous(nodes, gpus_per_node)
        started = time.perf_counter()
        result = _simulate(
            wl, policy, parse_options(option or []), cluster, config, traces, not quiet
        )
        wall = time.perf_counter() - started
    except DanluError as exc:
        raise fail(exc) from None
    with stdout_written():  # a full disk or a gone reader: no traceback
        console.print(
            summary_table(
                [result],
                f"{as_text(wl.name)}: {len(wl.jobs)} jobs on {cluster.total_gpus} GPUs",
            )
        )
        projects = project_table(result)
        if projects is not None:
            console.print(projects)
        _notes(wl, [rejection_note(result)])
        console.print(f"simulated in {wall:.2f} s wall, {result.rounds} scheduling rounds")
        if json_out is not None:
            payload = result.to_json(timeline=True)
            payload["never_scheduled"] = list(wl.never_scheduled)
            payload["wall_seconds"] = wall
            write_output(json_out, _text(json_text(payload)), "--json")
        if plot is not None:
            from danlu.sim.report import plot_timeline

            write_output(plot, lambda path: plot_timeline(result, path), "--plot")


@sim_app.command("compare")
def compare(
    ctx: typer.Context,
    workload: WorkloadOpt = None,
    policies: Annotated[
        str, typer.Option("--policies", help="Comma-separated policy names.")
    ] = "fifo,sjf,priority,tiresias,value-density",
    traces: TracesOpt = DEFAULT_TRACES,
    nodes: NodesOpt = 16,
    gpus_per_node: GpusOpt = 4,
    interval: IntervalOpt = 60.0,
    restart_cost: RestartOpt = 30.0,
    event_rounds: EventOpt = False,
    interference: InterferenceOpt = None,
    interference_gpu: InterferenceGpuOpt = "v100",
    project_share: ProjectShareOpt = None,
    node_mtbf: MtbfOpt = None,
    node_repair: RepairOpt = "1h",
    gpu_mtbf: GpuMtbfOpt = None,
    gpu_repair: GpuRepairOpt = "1h",
    checkpoint_every: CheckpointOpt = "30m",
    failure_seed: FailureSeedOpt = 0,
    quota: QuotaOpt = None,
    user_quota: UserQuotaOpt = None,
    json_out: JsonOpt = None,
    jobs: JobsOpt = 200,
    seed: SeedOpt = 0,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress bar.")] = False,
) -> None:
    """Simulate several policies on one workload and print them side by side."""
    try:
        names = parse_policy_list(policies, default_registry().names())
        check_output(json_out, "--json")
        check_distinct(
            {"--json": json_out},
            {"--workload": workload, "--interference": interference, "--traces": traces},
        )
        failures = failure_settings(
            (node_mtbf, node_repair), (gpu_mtbf, gpu_repair), checkpoint_every, failure_seed
        )
        check_enabled(given_options(ctx))
        check_synthetic(given_options(ctx))
        check_traces(traces, given_options(ctx))
        wl = _load(workload, jobs, seed)
        config = _config(
            interval,
            restart_cost,
            event_rounds,
            interference,
            interference_gpu,
            project_share,
            failures,
            parse_quotas(quota or [], user_quota or []),
        )
        check_named(wl, config)
        cluster = Cluster.homogeneous(nodes, gpus_per_node)
        results = [_simulate(wl, name, {}, cluster, config, traces, not quiet) for name in names]
    except DanluError as exc:
        raise fail(exc) from None
    with stdout_written():  # a full disk or a gone reader: no traceback
        console.print(
            summary_table(
                results, f"{as_text(wl.name)}: {len(wl.jobs)} jobs on {cluster.total_gpus} GPUs"
            )
        )
        _notes(wl, [rejection_note(r, f"{r.policy}: ") for r in results])
        if json_out is not None:
            by_policy = {
                r.policy: {**r.to_json(), "never_scheduled": list(wl.never_scheduled)}
                for r in results
            }
            write_output(json_out, _text(json_text(by_policy)), "--json")


PLAN_COLUMNS = {
    "avg_jct": "avg JCT (s)",
    "p99_jct": "p99 JCT (s)",
    "avg_queueing_delay": "avg wait (s)",
    "p99_queueing_delay": "p99 wait (s)",
    "gpu_utilization": "GPU util",
}
"""The columns of ``danlu sim plan``'s table, by metric (a target's metric is added)."""


@sim_app.command("plan")
def plan(
    ctx: typer.Context,
    target: Annotated[
        list[str],
        typer.Option(
            "--target",
            help="What the cluster must give, METRIC<=BOUND or METRIC>=BOUND (repeatable; "
            "all must hold): avg_jct<=2h, p99_queueing_delay<=600, gpu_utilization>=0.5.",
        ),
    ],
    workload: WorkloadOpt = None,
    policy: PolicyOpt = "tiresias",
    option: PolicyOptionOpt = None,
    traces: TracesOpt = DEFAULT_TRACES,
    min_nodes: Annotated[
        int,
        int_option("--min-nodes", help="Fewest nodes to try.", example="1", low=1),
    ] = 1,
    max_nodes: Annotated[
        int,
        int_option("--max-nodes", help="Most nodes to try.", example="64", low=1, high=MOST_NODES),
    ] = 64,
    gpus_per_node: GpusOpt = 4,
    interval: IntervalOpt = 60.0,
    restart_cost: RestartOpt = 30.0,
    event_rounds: EventOpt = False,
    interference: InterferenceOpt = None,
    interference_gpu: InterferenceGpuOpt = "v100",
    project_share: ProjectShareOpt = None,
    node_mtbf: MtbfOpt = None,
    node_repair: RepairOpt = "1h",
    gpu_mtbf: GpuMtbfOpt = None,
    gpu_repair: GpuRepairOpt = "1h",
    checkpoint_every: CheckpointOpt = "30m",
    failure_seed: FailureSeedOpt = 0,
    quota: QuotaOpt = None,
    user_quota: UserQuotaOpt = None,
    json_out: JsonOpt = None,
    jobs: JobsOpt = 200,
    seed: SeedOpt = 0,
) -> None:
    """The fewest nodes (of --gpus-per-node GPUs) on which the workload meets every
    --target with this policy, found by simulating sizes between --min-nodes and
    --max-nodes. Exit status 1 when even --max-nodes misses a target."""
    from danlu.sim.plan import SECONDS_METRICS, Target, parse_target, plan_capacity

    try:
        names = default_registry().names()
        if policy not in names:
            raise ConfigError(f"--policy: unknown policy {policy!r}; valid: {', '.join(names)}")
        targets: list[Target] = [parse_target(t) for t in target]
        check_output(json_out, "--json")
        check_distinct(
            {"--json": json_out},
            {"--workload": workload, "--interference": interference, "--traces": traces},
        )
        options = parse_options(option or [])
        failures = failure_settings(
            (node_mtbf, node_repair), (gpu_mtbf, gpu_repair), checkpoint_every, failure_seed
        )
        check_enabled(given_options(ctx))
        check_synthetic(given_options(ctx))
        check_traces(traces, given_options(ctx))
        wl = _load(workload, jobs, seed)
        config = _config(
            interval,
            restart_cost,
            event_rounds,
            interference,
            interference_gpu,
            project_share,
            failures,
            parse_quotas(quota or [], user_quota or []),
        )
        check_named(wl, config)

        def simulate(nodes: int) -> tuple[dict[str, float], int]:
            cluster = Cluster.homogeneous(nodes, gpus_per_node)
            with console.status(f"simulating {nodes} nodes ({cluster.total_gpus} GPUs)"):
                result = _simulate(wl, policy, options, cluster, config, traces, False)
            return result.summary(), len(result.rejected)

        found = plan_capacity(simulate, targets, min_nodes, max_nodes)
    except DanluError as exc:
        raise fail(exc) from None
    with stdout_written():  # a full disk or a gone reader: no traceback
        goals = as_text(", ".join(str(t) for t in targets))
        table = Table(title=f"{as_text(wl.name)}: {len(wl.jobs)} jobs, {policy}, targets {goals}")
        table.add_column("nodes", justify="right")
        table.add_column("GPUs", justify="right")
        shown = list(PLAN_COLUMNS) + [t.metric for t in targets if t.metric not in PLAN_COLUMNS]
        for key in shown:
            table.add_column(PLAN_COLUMNS.get(key, key), justify="right")
        table.add_column("targets")
        kinds = ["seconds" if key in SECONDS_METRICS else KINDS.get(key, "ratio") for key in shown]
        for trial in found.trials:
            values = (trial.summary.get(key, math.nan) for key in shown)
            table.add_row(
                str(trial.nodes),
                str(trial.nodes * gpus_per_node),
                *(format_value(value, kind) for value, kind in zip(values, kinds, strict=True)),
                "met" if trial.met else as_text("missed " + ", ".join(trial.missed)),
            )
        console.print(table)
        _notes(wl, [])
        if found.nodes is None:
            console.print(f"no cluster of up to {max_nodes} nodes meets the targets")
        else:
            gpus = found.nodes * gpus_per_node
            console.print(
                f"smallest cluster meeting the targets: {found.nodes} nodes x {gpus_per_node} "
                f"GPUs = {gpus} GPUs"
            )
        if json_out is not None:
            payload = {
                "workload": wl.name,
                "policy": policy,
                "gpus_per_node": gpus_per_node,
                "targets": [str(t) for t in targets],
                "never_scheduled": list(wl.never_scheduled),
                "nodes": found.nodes,
                "gpus": None if found.nodes is None else found.nodes * gpus_per_node,
                "tried": [
                    {
                        "nodes": t.nodes,
                        "met": t.met,
                        "missed": list(t.missed),
                        **json_summary(t.summary),
                    }
                    for t in found.trials
                ],
            }
            write_output(json_out, _text(json_text(payload)), "--json")
        if found.nodes is None:
            raise typer.Exit(code=1)


@sim_app.command("pack")
def pack(
    pods: Annotated[Path, typer.Option("--pods", help="Alibaba openb pod list CSV.")],
    nodes: Annotated[Path, typer.Option("--nodes", help="Alibaba openb node list CSV.")],
    policy: Annotated[
        str, typer.Option("--policy", help="Placement: random, best-fit, fgd, ...")
    ] = "fgd",
    load: Annotated[
        float,
        float_option(
            "--load", help="Arrived GPU demand / capacity (above 0, at most 10).", example="1.0"
        ),
    ] = 1.0,
    seeds: Annotated[
        str,
        typer.Option("--seeds", help=f"Seeds, e.g. 42-51 or 1,2,3 (at most {MAX_SEEDS:,})."),
    ] = "42-51",
    json_out: JsonOpt = None,
    option: Annotated[
        list[str] | None,
        typer.Option("--option", help="Scorer option key=value (repeatable): danlu's weights."),
    ] = None,
) -> None:
    """The FGD allocation experiment: GPU allocation ratio when demand reaches --load.

    `--option` sets a weight of the `danlu` scorer (`fgd_weight`, `scarcity_weight`,
    `remainder_weight`, `large_weight`, `reserve_weight`; e.g. `--option large_weight=0`
    for the scorer without the multi-GPU shapes' host pressure)."""
    from danlu.sched.placement.share import scorer_names
    from danlu.sim.openb import load_nodes, load_pods, run_allocation_experiment

    try:
        if policy not in scorer_names():
            raise ConfigError(
                f"--policy: unknown placement {policy!r}; valid: {', '.join(scorer_names())}"
            )
        check_load(load)
        seed_list = parse_seeds(seeds)
        check_distinct_seeds(seed_list)
        options = parse_options(option or [])
        check_output(json_out, "--json")
        check_distinct({"--json": json_out}, {"--pods": pods, "--nodes": nodes})
        node_list = load_nodes(nodes)
        pod_list = load_pods(pods)
        with console.status(f"packing {len(pod_list)} pods x {len(seed_list)} seeds ({policy})"):
            result = run_allocation_experiment(
                pod_list, node_list, policy, load, seed_list, options
            )
    except DanluError as exc:
        raise fail(exc) from None
    with stdout_written():  # a full disk or a gone reader: no traceback
        table = Table(title=f"{as_text(pods.name)} on {as_text(nodes.name)}, load {load}")
        table.add_column("seed", justify="right")
        table.add_column("allocation ratio (%)", justify="right")
        table.add_column("multi-GPU pods refused", justify="right")
        table.add_column("first refused at (% arrived)", justify="right")
        for one in result.per_seed:
            first = one.first_multi_gpu_refusal
            table.add_row(
                str(one.seed),
                f"{one.allocation_ratio:.2f}",
                str(one.failed_multi_gpu_pods),
                "-" if first is None else f"{first:.1f}",
            )
        table.add_row("[bold]mean[/bold]", f"[bold]{result.allocation_ratio:.2f}[/bold]", "", "")
        console.print(table)
        ratio, wall = result.allocation_ratio, result.wall_seconds
        console.print(f"allocation_ratio {ratio:.2f} ({policy}, {wall:.1f} s)")
        sources = {pod.name: pod.source for pod in pod_list}
        note = unplaceable_note(result.unplaceable_pods, sources)
        if note is not None:
            console.print(note)
        if json_out is not None:
            write_output(json_out, _text(json_text(result.to_json())), "--json")
