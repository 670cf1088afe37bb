"""The tables and notes ``danlu sim run``, ``compare`` and ``plan`` print: the metrics of
one or more results side by side (with the jobs each policy rejected or left unfinished,
which its averages leave out), the projects' table, ``plan``'s table of the cluster sizes
it tried, the rejection warning and the count of a trace's pods left out of the workload."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from rich.table import Table

from danlu.cli.markup import as_text
from danlu.sim.metrics import SimResult
from danlu.sim.plan import SECONDS_METRICS, Target, Trial
from danlu.sim.workload_columns import PLAIN_COLUMNS
from danlu.sim.workload_jobs import Workload


def format_value(value: float, kind: str) -> str:
    """A table cell: ``-`` for NaN, a count with thousands separators, seconds to 0.1, a
    ratio to 0.001."""
    if value != value:  # NaN
        return "-"
    if kind == "count":
        return f"{int(value):,}"
    return f"{value:,.1f}" if kind == "seconds" else f"{value:.3f}"


ROWS = (
    ("jobs", "jobs finished", "count"),
    ("avg_jct", "average JCT (s)", "seconds"),
    ("median_jct", "median JCT (s)", "seconds"),
    ("p99_jct", "p99 JCT (s)", "seconds"),
    ("makespan", "makespan (s)", "seconds"),
    ("avg_queueing_delay", "avg queueing delay (s)", "seconds"),
    ("gpu_allocation_ratio", "GPU allocation ratio", "ratio"),
    ("gpu_utilization", "GPU utilisation", "ratio"),
    ("fragmentation", "fragmentation", "ratio"),
    ("preemptions", "preemptions", "count"),
    ("restarts", "restarts (resumes + resizes)", "count"),
    ("max_job_restarts", "most restarts of one job", "count"),
    ("interference_seconds", "seconds lost to GPU sharing", "seconds"),
    ("timed_out", "jobs cancelled at their time limit", "count"),
)
FAILURE_ROWS = (
    ("node_failures", "node failures", "count"),
    ("gpu_failures", "GPU failures", "count"),
    ("lost_runs", "runs lost with a node or GPU", "count"),
    ("lost_training_seconds", "training lost to failures (s)", "seconds"),
)
"""Rows shown when nodes or GPUs fail (``--node-mtbf``, ``--gpu-mtbf``)."""
KINDS = {key: kind for key, _, kind in ROWS + FAILURE_ROWS}
"""How each metric of the tables is written (a count, seconds, a ratio)."""


def not_finished(result: SimResult) -> dict[str, float]:
    """The jobs a result's averages leave out: ``rejected`` (never placed on this cluster)
    and ``unfinished`` (still queued or running, or not yet submitted, when the clock
    stopped)."""
    return {
        "rejected": float(len(result.rejected)),
        "unfinished": float(len(result.unfinished) + len(result.not_submitted)),
    }


NOT_FINISHED_ROWS = (
    ("rejected", "jobs rejected", "count"),
    ("unfinished", "jobs unfinished", "count"),
)
"""Rows after ``jobs finished``: the jobs each policy's figures leave out, so that a
comparison shows when two policies' averages are over different jobs."""


def summary_table(results: list[SimResult], title: str) -> Table:
    """The metrics of each result in a column of its own (named by its policy)."""
    summaries = [r.summary() | not_finished(r) for r in results]
    failing = any(s["node_failures"] or s["gpu_failures"] for s in summaries)
    rows = ROWS[:1] + NOT_FINISHED_ROWS + ROWS[1:] + (FAILURE_ROWS if failing else ())
    cells = [[format_value(s[key], kind) for s in summaries] for key, _, kind in rows]
    table = Table(title=title)
    table.add_column("metric", overflow="fold")
    for index, result in enumerate(results):
        # a number is never cut short on a narrow terminal; a long policy name folds
        widest = max((len(row[index]) for row in cells), default=0)
        table.add_column(result.policy, justify="right", min_width=widest, overflow="fold")
    for (_, label, _), row in zip(rows, cells, strict=True):
        table.add_row(label, *row)
    return table


MOST_PROJECT_ROWS = 30
"""``sim run`` shows the projects' table for a workload of 2 to this many projects."""


def project_table(result: SimResult) -> Table | None:
    """Per project: jobs finished, average JCT and wait, GPU-hours and share, and, when any
    project has some, its jobs unfinished at the stop (``max_time``) and rejected (None for a
    workload of one project, or of more than :data:`MOST_PROJECT_ROWS`; the JSON has them
    all)."""
    projects = result.by_project()
    if not 1 < len(projects) <= MOST_PROJECT_ROWS:
        return None
    table = Table(title="by project")
    # jobs rejected, or running or waiting when the clock stopped (SimConfig.max_time):
    # columns only when some are
    left = any(row["unfinished"] or row["rejected"] for row in projects.values())
    names = ["project", "jobs", "avg JCT (s)", "avg wait (s)", "GPU-hours", "GPU share"]
    for name in names + (["unfinished", "rejected"] if left else []):
        table.add_column(name, justify="left" if name == "project" else "right")
    for name, row in projects.items():
        cells = [
            as_text(name),
            f"{row['jobs']:.0f}",
            format_value(row["avg_jct"], "seconds"),
            format_value(row["avg_queueing_delay"], "seconds"),
            f"{row['gpu_hours']:,.1f}",
            f"{100 * row['gpu_share']:.1f}%",
        ]
        if left:
            cells += [f"{row['unfinished']:.0f}", f"{row['rejected']:.0f}"]
        table.add_row(*cells)
    return table


def rejection_note(result: SimResult, prefix: str = "") -> str | None:
    """``N job(s) rejected, e.g. ID: REASON`` (Rich markup), after ``prefix`` (``sim
    compare``: the policy); None when none was."""
    if not result.rejected:
        return None
    job, reason = result.rejected[0]
    return (
        f"{as_text(prefix)}[yellow]{len(result.rejected)} job(s) rejected[/yellow], e.g. "
        f"{as_text(job)}: {as_text(reason)}"
    )


def left_out_note(workload: Workload) -> str | None:
    """``N GPU pod(s) left out, never scheduled in the trace, e.g. NAME`` (Rich markup) for
    an openb list's pods without a running time (:attr:`Workload.never_scheduled`); None
    when there are none."""
    names = workload.never_scheduled
    if not names:
        return None
    return (
        f"[yellow]{len(names)} GPU pod(s) left out[/yellow], never scheduled in the trace, "
        f"e.g. {as_text(names[0])} (pod_phase Pending, no scheduled_time: no running time)"
    )


def unread_note(workload: Workload) -> str | None:
    """``column(s) 'notes' not read ...`` (Rich markup) for a plain workload's columns the
    format does not read (:attr:`Workload.unread_columns`): they change nothing, which the
    results would not show. None when there are none."""
    names = workload.unread_columns
    if not names:
        return None
    shown = ", ".join(as_text(repr(name)) for name in names)
    reads = f"{', '.join(PLAIN_COLUMNS[:-1])} and {PLAIN_COLUMNS[-1]}"
    return f"[yellow]column(s) {shown} not read[/yellow]: the danlu format reads {reads}"


def unplaceable_note(names: Sequence[str], sources: Mapping[str, str]) -> str | None:
    """``N pod(s) fit no node ..., e.g. NAME (FILE, line L)`` (Rich markup) for the pods of
    a ``sim pack`` list that fit no node even of the empty cluster
    (:attr:`~danlu.sim.openb.AllocationResult.unplaceable_pods`; ``sources`` gives each
    pod's file and line); None when there are none."""
    if not names:
        return None
    shown = ", ".join(
        as_text(name) + (f" ({as_text(sources[name])})" if sources.get(name) else "")
        for name in names[:3]
    )
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    return (
        f"[yellow]{len(names)} pod(s) fit no node[/yellow], even of the empty cluster (CPU, "
        f"memory, GPUs or gpu_spec): {shown}{more}; every copy of them failed, their demand "
        "counted as arrived (as in FGD's artifact)"
    )


PLAN_COLUMNS = {
    "avg_jct": "avg JCT (s)",
    "p99_jct": "p99 JCT (s)",
    "avg_queueing_delay": "avg wait (s)",
    "p99_queueing_delay": "p99 wait (s)",
    "gpu_utilization": "GPU util",
}
"""The columns of ``danlu sim plan``'s table, by metric (a target's metric is added)."""


def plan_table(
    title: str, trials: Sequence[Trial], targets: Sequence[Target], gpus_per_node: int
) -> Table:
    """``danlu sim plan``'s table: one row per cluster size tried, with the
    :data:`PLAN_COLUMNS` metrics, any other metric a target names, and which targets it
    met or missed."""
    shown = list(PLAN_COLUMNS) + [t.metric for t in targets if t.metric not in PLAN_COLUMNS]
    kinds = ["seconds" if key in SECONDS_METRICS else KINDS.get(key, "ratio") for key in shown]
    rows = [
        [
            str(trial.nodes),
            str(trial.nodes * gpus_per_node),
            *(
                format_value(trial.summary.get(key, math.nan), kind)
                for key, kind in zip(shown, kinds, strict=True)
            ),
        ]
        for trial in trials
    ]
    table = Table(title=title, pad_edge=False)
    # a number is never cut short ("35,562…"): its column keeps its widest value, and the
    # headers and the targets wrap (a long name folded, not cut) when the terminal is narrow
    for index, header in enumerate(["nodes", "GPUs", *(PLAN_COLUMNS.get(k, k) for k in shown)]):
        widest = max((len(row[index]) for row in rows), default=0)
        table.add_column(header, justify="right", min_width=widest)
    table.add_column("targets", overflow="fold")
    for trial, row in zip(trials, rows, strict=True):
        table.add_row(*row, "met" if trial.met else as_text("missed " + ", ".join(trial.missed)))
    return table
