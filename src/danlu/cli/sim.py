"""``danlu sim``: replay workloads on a simulated cluster with the production policies.

- ``danlu sim run``      one policy on one workload: summary table, JSON, PNG plot.
- ``danlu sim compare``  several policies on one workload, side by side.
- ``danlu sim pack``     the FGD allocation experiment on Alibaba pod/node lists.
- ``danlu sim plan``     the fewest nodes on which a workload meets its targets.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from danlu.cli.fitted_table import print_whole
from danlu.cli.markup import as_text
from danlu.cli.markup import console as cli_console
from danlu.cli.options import fail, float_option, given_options, int_option
from danlu.cli.output import stdout_written
from danlu.cli.sim_checks import (
    MOST_NODES,
    PLOT_FORMATS,
    check_distinct,
    check_distinct_seeds,
    check_enabled,
    check_list_file,
    check_load,
    check_output,
    check_plot,
    check_synthetic,
    check_traces,
    failure_settings,
)
from danlu.cli.sim_flags import (
    MAX_SEEDS,
    check_choice,
    check_named,
    json_text,
    parse_options,
    parse_policy_list,
    parse_quotas,
    parse_seeds,
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
from danlu.cli.sim_options import (
    DEFAULT_TRACES,
    CheckpointOpt,
    EventOpt,
    GpuMtbfOpt,
    GpuRepairOpt,
    InterferenceGpuOpt,
    InterferenceOpt,
    JsonOpt,
    MtbfOpt,
    PolicyOpt,
    PolicyOptionOpt,
    ProjectShareOpt,
    QuotaOpt,
    RepairOpt,
    TracesOpt,
    UserQuotaOpt,
    WorkloadOpt,
    sim_config,
)
from danlu.cli.sim_tables import (
    left_out_note,
    plan_table,
    project_table,
    rejection_note,
    summary_table,
    unplaceable_note,
    unread_note,
)
from danlu.core.cluster import Cluster
from danlu.core.errors import ConfigError, DanluError, UnknownNameError
from danlu.core.values import counted
from danlu.sched.registry import default_registry
from danlu.sim.config import SimConfig
from danlu.sim.engine import Simulator
from danlu.sim.metrics import SimResult, json_summary
from danlu.sim.setting_types import option_refusal
from danlu.sim.workload import load_workload, synthetic_workload
from danlu.sim.workload_jobs import Workload

__all__ = [  # importable from here as before the flags and checks had modules of their own
    "DEFAULT_TRACES",
    "MAX_SEEDS",
    "check_distinct",
    "check_output",
    "parse_options",
    "parse_quotas",
    "parse_seeds",
    "register",
    "sim_app",
    "write_output",
]

OPENB_DATA = "../shared/data/alibaba-gpu-v2023"
"""Where ``sim pack``'s examples find the Alibaba openb pod and node lists."""

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


def _title(workload: Workload, cluster: Cluster) -> str:
    """The summary table's title (``sim run``, ``sim compare``): the workload's name, its
    jobs and the cluster's GPUs (``w: 1 job on 4 GPUs``; Rich markup)."""
    jobs, gpus = counted(len(workload.jobs), "job"), counted(cluster.total_gpus, "GPU")
    return f"{as_text(workload.name)}: {jobs} on {gpus}"


def _notes(workload: Workload, notes: list[str | None]) -> None:
    """Print the workload's pods left out (an openb list's never-scheduled pods), its
    columns not read (a plain file's) and the given notes (each result's rejections),
    skipping the None ones."""
    for note in [left_out_note(workload), unread_note(workload), *notes]:
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
        check_choice("--policy", "policy", policy, default_registry().names())
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
        config = sim_config(
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
        print_whole(
            console,
            summary_table(
                [result],
                _title(wl, cluster),
            ),
            crop=False,  # wider than the terminal: wrapped, no column lost
        )
        projects = project_table(result)
        if projects is not None:
            print_whole(console, projects)
        _notes(wl, [rejection_note(result)])
        rounds = counted(result.rounds, "scheduling round")
        console.print(f"simulated in {wall:.2f} s wall, {rounds}")
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
        config = sim_config(
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
        print_whole(
            console,
            summary_table(
                results,
                _title(wl, cluster),
            ),
            crop=False,  # more policies than fit the terminal: wrapped, no column lost
        )
        _notes(wl, [rejection_note(r, f"{r.policy}: ") for r in results])
        if json_out is not None:
            by_policy = {
                r.policy: {**r.to_json(), "never_scheduled": list(wl.never_scheduled)}
                for r in results
            }
            write_output(json_out, _text(json_text(by_policy)), "--json")


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
    from danlu.sim.plan import Target, parse_target, plan_capacity

    try:
        check_choice("--policy", "policy", policy, default_registry().names())
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
        config = sim_config(
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
        projects: dict[int, dict[str, dict[str, float]]] = {}  # each size's, for --json

        def simulate(nodes: int) -> tuple[dict[str, float], int]:
            cluster = Cluster.homogeneous(nodes, gpus_per_node)
            size = f"{counted(nodes, 'node')} ({counted(cluster.total_gpus, 'GPU')})"
            with console.status(f"simulating {size}"):
                result = _simulate(wl, policy, options, cluster, config, traces, False)
            projects[nodes] = result.by_project()
            return result.summary(), len(result.rejected)

        found = plan_capacity(simulate, targets, min_nodes, max_nodes)
    except DanluError as exc:
        raise fail(exc) from None
    with stdout_written():  # a full disk or a gone reader: no traceback
        goals = as_text(", ".join(str(t) for t in targets))
        title = f"{as_text(wl.name)}: {counted(len(wl.jobs), 'job')}, {policy}, targets {goals}"
        # wider than the terminal (many targets): wrapped, no column lost
        print_whole(console, plan_table(title, found.trials, targets, gpus_per_node), crop=False)
        _notes(wl, [])
        if found.nodes is None:
            console.print(f"no cluster of up to {counted(max_nodes, 'node')} meets the targets")
        else:
            gpus = found.nodes * gpus_per_node
            console.print(
                f"smallest cluster meeting the targets: {counted(found.nodes, 'node')} x "
                f"{counted(gpus_per_node, 'GPU')} = {counted(gpus, 'GPU')}"
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
                        "projects": {
                            name: json_summary(row)
                            for name, row in projects.get(t.nodes, {}).items()
                        },
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
        typer.Option(
            "--seeds",
            help=f"Seeds, whole numbers of 0 or more: e.g. 42-51 or 1,2,3 (at most {MAX_SEEDS:,}).",
        ),
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
        check_choice("--policy", "placement", policy, scorer_names())
        check_load(load)
        seed_list = parse_seeds(seeds)
        check_distinct_seeds(seed_list)
        options = parse_options(option or [])
        check_output(json_out, "--json")
        check_distinct({"--json": json_out}, {"--pods": pods, "--nodes": nodes})
        check_list_file(nodes, "--nodes", f"{OPENB_DATA}/openb_node_list_gpu_node.csv")
        check_list_file(pods, "--pods", f"{OPENB_DATA}/openb_pod_list_default.csv")
        node_list = load_nodes(nodes)
        pod_list = load_pods(pods)
        packing = f"{counted(len(pod_list), 'pod')} x {counted(len(seed_list), 'seed')}"
        with console.status(f"packing {packing} ({policy})"):
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
        print_whole(console, table)
        ratio, wall = result.allocation_ratio, result.wall_seconds
        console.print(f"allocation_ratio {ratio:.2f} ({policy}, {wall:.1f} s)")
        sources = {pod.name: pod.source for pod in pod_list}
        note = unplaceable_note(result.unplaceable_pods, sources)
        if note is not None:
            console.print(note)
        if json_out is not None:
            write_output(json_out, _text(json_text(result.to_json())), "--json")
