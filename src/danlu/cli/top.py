"""Rich renderings of the cluster for ``danlu nodes`` and ``danlu top``.

Pure functions of the API's Node / Job objects (``docs/api.md``), so they are tested without a
server; :func:`frame` fetches one snapshot through a :class:`~danlu.client.Client`.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.markup import escape
from rich.measure import Measurement
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from danlu.cli.markup import as_text
from danlu.cli.reply_fields import checked_jobs, checked_nodes
from danlu.client import Client
from danlu.core.units import format_bytes, format_duration
from danlu.core.values import visible

STATE_STYLE: dict[str, str] = {
    "PENDING": "yellow",
    "RUNNING": "green",
    "PREEMPTING": "magenta",
    "RESTARTING": "magenta",
    "SUCCEEDED": "blue",
    "FAILED": "red",
    "CANCELLED": "dim",
}
ACTIVE = ("RUNNING", "PREEMPTING", "RESTARTING", "PENDING")
BAR_WIDTH = 20
SHORT_BAR = 10
"""The memory bar of a row per node (:class:`NodeSummary`): its text beside it on one line."""
NARROW = 120
RECENT = 1000
"""How many of the newest jobs ``danlu top`` reads for its counts of finished jobs."""


def state_text(state: str) -> Text:
    """A job state, coloured; a state no danlu sends (another version's, a bad reply's) is
    shown with its control characters written as escapes, never acted on."""
    return Text(visible(state), style=STATE_STYLE.get(state, ""))


def memory_bar(used: int, total: int, width: int = BAR_WIDTH, sep: str = " ") -> Text:
    """``[######.......] 40.0GiB/80.0GiB`` with a colour by fill level (``sep`` between the
    bar and the text: ``"\\n"`` puts the text under it)."""
    frac = min(max(used / total, 0.0), 1.0) if total > 0 else 0.0
    filled = round(frac * width)
    style = "green" if frac < 0.7 else "yellow" if frac < 0.95 else "red"
    bar = Text("[")
    bar.append("#" * filled, style=style)
    bar.append("." * (width - filled), style="dim")
    bar.append(f"]{sep}{format_bytes(used)}/{format_bytes(total)}")
    return bar


def scheduled(node: dict[str, Any]) -> str:
    """A node's scheduled cordon or drain in words (plain text, control characters written
    as escapes): ``drain at 2026-12-01 02:00 UTC (in 3h): new DIMMs``."""
    at = float(node["close_at"])
    try:
        when = datetime.fromtimestamp(at).astimezone().strftime("%Y-%m-%d %H:%M %Z")
    except (ValueError, OverflowError, OSError):  # past the calendar (a time stored in ms)
        when = f"{at:g} s after 1970"
    left = format_duration(max(0.0, at - time.time()))
    reason = visible(str(node.get("close_reason") or ""))  # shown, not acted on
    return f"{node.get('close_action')} at {when} (in {left})" + (f": {reason}" if reason else "")


WIDE = 10_000
"""A width no table reaches: the console width a cell is measured at, whole."""


def needed_width(console: Console, table: Table, floors: Mapping[str, int]) -> int:
    """The narrowest width at which ``table`` (boxed, one space of padding each side of a
    cell) shows every cell whole: its ``no_wrap`` columns as wide as their widest cell, the
    header included, and each other column ``floors[header]`` wide (1 when not there) to
    fold its text in. Narrower, Rich would cut the ``no_wrap`` cells (or the table's right
    edge), or fold a column down to nothing."""
    options = console.options.update_width(WIDE)
    total = len(table.columns) + 1  # the vertical lines
    for column in table.columns:
        if column.no_wrap:
            cells = [column.header, *column.cells]
            total += max(Measurement.get(console, options, cell).maximum for cell in cells)
        else:
            total += floors.get(str(column.header), 1)
        total += 2  # the padding
    return total


class FittedTable:
    """A table laid out for the width it is printed at: :meth:`table`, or, where that
    cannot show every cell whole (:func:`needed_width` with :attr:`FLOORS`), :meth:`lines`,
    one record per line, folded onto more lines when long: never cut or cropped."""

    FLOORS: Mapping[str, int] = {}
    """The least width (in characters) of each column that folds its text, by header: a
    table that cannot give them this much is shown as lines."""

    def table(self, width: int) -> Table:
        """The table for a console ``width`` wide."""
        raise NotImplementedError

    def lines(self, width: int) -> RenderableType:
        """The records one per line, for a console ``width`` wide."""
        raise NotImplementedError

    def layout(self, console: Console, width: int) -> RenderableType:
        """:meth:`table` when it fits in ``width``, else :meth:`lines`."""
        table = self.table(width)
        return table if needed_width(console, table, self.FLOORS) <= width else self.lines(width)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.layout(console, options.max_width)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.layout(console, options.max_width))


def node_label(node: dict[str, Any]) -> str:
    """A node's name (``(fake)`` for a fake one), with its state and reason when not ready
    and its scheduled close; plain text, control characters written as escapes."""
    name = str(node.get("name", "?")) + (" (fake)" if node.get("fake") else "")
    state = node.get("state") or "ready"
    if state != "ready":
        reason = node.get("cordon_reason") or ""
        name += f" [{state}{': ' + str(reason) if reason else ''}]"
    if node.get("close_at") is not None:
        name += f" [{scheduled(node)}]"
    return visible(name)


def gpu_label(gpu: dict[str, Any]) -> str:
    """A GPU's index, with its own state and reason when not ready (plain text)."""
    index = str(gpu.get("index", "?"))
    state = gpu.get("state") or "ready"
    if state != "ready":
        reason = gpu.get("cordon_reason") or ""
        index += f" [{state}{': ' + str(reason) if reason else ''}]"
    return visible(index)


def _compute(milli: float) -> str:
    return f"{milli / 10:.0f}%"


class NodesTable(FittedTable):
    """The GPU table of :func:`nodes_table`, laid out for the width it is printed at: under
    :data:`NARROW` columns each job id on its own line and the memory's used/total under its
    bar, so that neither is ever cut with an ellipsis (the other columns fold); where even
    that does not fit, a line per GPU under a line per node."""

    FLOORS: Mapping[str, int] = {"node": 8, "gpu": 3, "type": 4}

    def __init__(self, nodes: Sequence[dict[str, Any]]) -> None:
        self.nodes = list(nodes)

    def table(self, width: int | None = None) -> Table:
        """The table for a console ``width`` wide (None: as wide as it likes)."""
        return _nodes_table(self.nodes, narrow=width is not None and width < NARROW)

    def lines(self, width: int) -> RenderableType:
        out: list[RenderableType] = [Text("GPUs")]
        for node in self.nodes:
            out.append(Text(node_label(node)))
            for gpu in node.get("gpus") or []:
                line = Text(f"  gpu {gpu_label(gpu)}  {visible(_gpu_type(node, gpu))}  ")
                line.append_text(_gpu_memory(gpu))
                line.append(f"  {_compute(int(gpu.get('allocated_milli') or 0))}  ")
                held = gpu_holders(gpu, lambda job: visible(str(job)))
                line.append("jobs " + (", ".join(held) or "-"))
                out.append(line)
        return Group(*out)


def nodes_table(nodes: Sequence[dict[str, Any]]) -> NodesTable:
    """One row per GPU: node (with its state when not ready, and the reason), index (with
    the GPU's own state when not ready, and the reason), type, allocated memory bar, compute
    share, jobs; laid out for the width it is printed at (:class:`NodesTable`)."""
    return NodesTable(nodes)


def others_text(count: int) -> str:
    """Other users' jobs holding a GPU, whose ids a non-admin is not given, in words."""
    return f"{count} job of another user" if count == 1 else f"{count} jobs of other users"


def gpu_holders(gpu: dict[str, Any], shown: Callable[[Any], str]) -> list[str]:
    """The jobs holding a share of ``gpu`` as ``GET /cluster/nodes`` lists them: the ids
    given (each as ``shown`` writes it), then the count of the other users' jobs there
    (``other_jobs``, a non-admin's view) in words; empty only for a GPU no job holds."""
    holders = [shown(job) for job in gpu.get("jobs") or []]
    others = int(gpu.get("other_jobs") or 0)
    return [*holders, others_text(others)] if others > 0 else holders


def node_job_count(gpus: Sequence[dict[str, Any]]) -> int:
    """How many jobs hold the GPUs ``gpus`` of one node: the distinct ids given, and of the
    other users' jobs (counted per GPU, without ids) as many as the one GPU with the most:
    a job of another user on two GPUs is counted once, so this is the least there can
    be."""
    ids = {str(job) for gpu in gpus for job in gpu.get("jobs") or []}
    others = max((int(gpu.get("other_jobs") or 0) for gpu in gpus), default=0)
    return len(ids) + max(0, others)


def _gpu_type(node: dict[str, Any], gpu: dict[str, Any]) -> str:
    return str(gpu.get("type") or node.get("gpu_type") or "")


def _gpu_memory(gpu: dict[str, Any], sep: str = " ") -> Text:
    used, total = int(gpu.get("allocated_memory") or 0), int(gpu.get("memory") or 0)
    return memory_bar(used, total, sep=sep)


def _nodes_table(nodes: Sequence[dict[str, Any]], narrow: bool) -> Table:
    table = Table(title="GPUs", title_justify="left", expand=False)
    for col in ("node", "gpu", "type", "memory", "compute", "jobs"):
        whole = col == "compute" or (narrow and col in ("memory", "jobs"))  # kept whole
        table.add_column(
            col, justify="right" if col == "compute" else "left", no_wrap=whole, overflow="fold"
        )
    for node in nodes:
        name = escape(node_label(node))  # a name or reason is text, not Rich markup
        for gpu in node.get("gpus") or []:
            jobs = gpu_holders(gpu, as_text)
            table.add_row(
                name,
                escape(gpu_label(gpu)),
                escape(visible(_gpu_type(node, gpu))),
                _gpu_memory(gpu, sep="\n" if narrow else " "),
                _compute(int(gpu.get("allocated_milli") or 0)),
                ("\n" if narrow else ", ").join(jobs) or "-",
            )
            name = ""
    return table


class NodeSummary(FittedTable):
    """``danlu top``'s GPUs when a row per GPU does not fit the terminal: a line per node
    (its GPUs and their types, memory allocated, mean compute share, jobs), the first
    ``shown`` nodes and a caption counting the others."""

    FLOORS: Mapping[str, int] = {"node": 8, "gpus": 8}

    def __init__(self, nodes: Sequence[dict[str, Any]], shown: int | None = None) -> None:
        self.nodes = list(nodes)
        self.shown = len(self.nodes) if shown is None else shown

    def _more(self) -> str:
        more = len(self.nodes) - self.shown
        if not more:
            return ""
        return f"+{more} more node{'s' if more > 1 else ''} (`danlu nodes` lists every GPU)"

    def _rows(self) -> list[tuple[str, str, int, int, str, str]]:
        """Each node shown: its label, its GPUs, memory allocated and in all, mean compute
        share, and how many jobs hold its GPUs."""
        rows = []
        for node in self.nodes[: self.shown]:
            gpus = list(node.get("gpus") or [])
            kinds = Counter(_gpu_type(node, g) for g in gpus if _gpu_type(node, g))
            mixed = len(kinds) > 1
            what = f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''}"
            if kinds:
                what += " (" + ", ".join(f"{n} x {k}" if mixed else k for k, n in kinds.items())
                what += ")"
            closed = sum(1 for g in gpus if (g.get("state") or "ready") != "ready")
            what += f", {closed} closed" if closed else ""
            used = sum(int(g.get("allocated_memory") or 0) for g in gpus)
            total = sum(int(g.get("memory") or 0) for g in gpus)
            milli = sum(int(g.get("allocated_milli") or 0) for g in gpus) / max(1, len(gpus))
            jobs = node_job_count(gpus)
            rows.append((node_label(node), visible(what), used, total, _compute(milli), str(jobs)))
        return rows

    def table(self, width: int) -> Table:
        more = self._more()
        table = Table(title="GPUs by node", title_justify="left", caption=more or None)
        table.caption_justify = "left"
        for col in ("node", "gpus", "memory", "compute", "jobs"):
            right = col in ("compute", "jobs")
            whole = right or col == "memory"
            table.add_column(col, justify="right" if right else "left", no_wrap=whole)
        for name, what, used, total, compute, jobs in self._rows():
            memory = memory_bar(used, total, width=SHORT_BAR)
            table.add_row(Text(name), Text(what), memory, compute, jobs)
        return table

    def lines(self, width: int) -> RenderableType:
        out: list[RenderableType] = [Text("GPUs by node")]
        for name, what, used, total, compute, jobs in self._rows():
            line = Text(f"{name}  {what}  ")
            line.append_text(memory_bar(used, total, width=SHORT_BAR))
            out.append(line.append(f"  {compute}  jobs {jobs}"))
        more = self._more()
        return Group(*out, Text(more)) if more else Group(*out)


def _ago(t: float | None, now: float) -> str:
    if not t:
        return "-"
    s = max(0.0, now - float(t))
    if s < 120:
        return f"{s:.0f}s"
    if s < 7200:
        return f"{s / 60:.0f}m"
    return f"{s / 3600:.1f}h" if s < 172800 else f"{s / 86400:.0f}d"


def gpus_of(job: dict[str, Any]) -> str:
    """A job's GPU request: ``2``, ``1 x 10.0GiB``, or for a share of one GPU its
    fraction, ``0.25`` (the spec's ``resources.gpu_fraction``)."""
    resources = (job.get("spec") or {}).get("resources")
    fraction = resources.get("gpu_fraction") if isinstance(resources, dict) else None
    gpus = job.get("gpus")
    text = "-" if gpus is None else str(gpus)
    if isinstance(fraction, int | float) and not isinstance(fraction, bool) and 0 < fraction < 1:
        text = f"{fraction:g}"
    memory = job.get("gpu_memory")
    if isinstance(memory, int | float) and memory:
        text += f" x {format_bytes(memory)}"
    return text


JOB_COLUMNS = ("id", "name", "user", "state", "prio", "gpus", "restarts", "age")
"""The jobs table's columns before ``where / why``; under :data:`NARROW` columns without
user, prio and restarts."""
LABELS = {"user": "user ", "prio": "prio ", "gpus": "gpus ", "restarts": "restarts ", "age": "age "}
"""What a value is, in a job's line (:meth:`JobsTable.lines`)."""


ENDED = ("SUCCEEDED", "FAILED", "CANCELLED")
"""The states a job ends in."""


def needs_end_reason(job: dict[str, Any]) -> bool:
    """Whether ``job`` ended with nothing of its own to show in "where / why": no GPUs held
    and no exit code (cancelled or failed before it ran, or stopped without a run's exit);
    its ``end_reason`` (the reason of the event that ended it) is shown then
    (:func:`end_text`)."""
    return (
        job.get("state") in ENDED
        and not job.get("allocation")
        and job.get("exit_code") is None
        and not job.get("pending_reason")
    )


def end_text(job: dict[str, Any], reason: str) -> str:
    """A job's ending ``reason`` as "where / why" shows it: ``cancelled by alice (before it
    ran)`` for a job that never started."""
    return f"{reason} (before it ran)" if job.get("started_at") is None else reason


PLAIN_EXITS = ("exited", "failed (")
"""How an ``end_reason`` that says no more than the run's exit code starts: the server's
``exited 0`` and ``failed (exit code 1)`` / ``failed (signal 9)`` (whatever follows, such as
``; out of restarts (0 of 0)``). Any other reason of a job with an exit code says why the run
ended (``out of memory (exit code 1)``, ``time limit reached: ran 2h of 2h``, ``cancelled by
alice``, ``lost with its node (...)``) and is shown after the code. The dashboard's Jobs
table (``jobs.js``) keeps the same list."""


def told_end_reason(job: dict[str, Any]) -> str | None:
    """An ended job's ``end_reason`` where it says more than its exit code: any reason of a
    job without one, not :data:`PLAIN_EXITS` for a job with one (``out of memory (exit code
    1); out of restarts (0 of 0)``, not ``failed (exit code 1)``); None for a job not ended,
    or with no reason or nothing more to say. :func:`where_text`, ``danlu wait`` and
    ``danlu logs -f`` show it after the code."""
    reason = job.get("end_reason")
    if job.get("state") not in ENDED or not isinstance(reason, str) or not reason:
        return None
    plain = job.get("exit_code") is not None and reason.startswith(PLAIN_EXITS)
    return None if plain else reason


def where_text(job: dict[str, Any]) -> str:
    """A job's "where / why": the GPUs it holds; a pending job's reason; an ended run's
    ``exit N``, followed by its ``end_reason`` where that says more than the code (``exit 1:
    out of memory (exit code 1); ...``, not :data:`PLAIN_EXITS`); the ``end_reason`` of a job
    with nothing else to show (:func:`needs_end_reason`). The dashboard's ``where`` (in
    ``jobs.js``) is the same rule."""
    end_reason = job.get("end_reason")
    told = end_reason if isinstance(end_reason, str) and end_reason else None
    alloc = job.get("allocation") or []
    where = ", ".join(f"{a.get('node')}:{a.get('gpu')}" for a in alloc)
    if not where and job.get("state") == "PENDING":
        where = str(job.get("pending_reason") or "")
    elif job.get("exit_code") is not None and not where:
        where = f"exit {job['exit_code']}"
        more = told_end_reason(job)
        if more is not None:
            where += f": {more}"
    elif told is not None and needs_end_reason(job):
        where = end_text(job, told)
    return where


def _job_cells(job: dict[str, Any], now: float) -> dict[str, Text]:
    """A job's cells by column, as text (neither Rich markup nor control characters: a
    name like ``[/x]`` crashed the table; a reason's escape sequence is shown, not acted on).
    Its "where / why" is :func:`where_text`."""
    where = where_text(job)
    plain = {
        "id": job.get("id", ""),
        "name": job.get("name", ""),
        "user": job.get("user", ""),
        "prio": job.get("priority", ""),
        "gpus": gpus_of(job),
        "restarts": job.get("restarts", 0),
        "age": _ago(job.get("submitted_at"), now),
        "where": where,
    }
    cells = {key: Text(visible(str(value))) for key, value in plain.items()}
    cells["state"] = state_text(str(job.get("state", "")))
    return cells


class JobsTable(FittedTable):
    """The table of :func:`jobs_table`, laid out for the width it is printed at (or
    ``width``): under :data:`NARROW` columns without user, priority and restarts; where the
    ids and states would be cut, a line per job."""

    FLOORS: Mapping[str, int] = {"name": 8, "where / why": 14}

    def __init__(
        self, jobs: Sequence[dict[str, Any]], now: float, title: str, width: int | None
    ) -> None:
        self.rows = [_job_cells(job, now) for job in jobs]
        self.title = title
        self.width = width

    def _columns(self, width: int) -> list[str]:
        narrow = (width if self.width is None else self.width) < NARROW
        return [c for c in JOB_COLUMNS if not (narrow and c in ("user", "prio", "restarts"))]

    def table(self, width: int) -> Table:
        table = Table(title=self.title or None, title_justify="left")
        columns = self._columns(width)
        for col in columns:
            right = col in ("prio", "restarts", "age")
            table.add_column(
                col,
                justify="right" if right else "left",
                no_wrap=col != "name",
                overflow="fold",
                max_width=24 if col == "name" else None,
            )
        table.add_column("where / why", overflow="fold")
        for cells in self.rows:
            table.add_row(*(cells[c] for c in columns), cells["where"])
        return table

    def lines(self, width: int) -> RenderableType:
        out: list[RenderableType] = [Text(self.title)] if self.title else []
        for cells in self.rows:
            line = Text()
            line.append(cells["id"].plain, style="bold")  # where each record starts
            for col in [*self._columns(width)[1:], "where"]:
                if cells[col].plain:
                    line.append("  " + LABELS.get(col, "")).append_text(cells[col])
            out.append(line)
        return Group(*out)


def jobs_table(
    jobs: Sequence[dict[str, Any]],
    now: float | None = None,
    title: str = "",
    width: int | None = None,
) -> JobsTable:
    """A table of jobs: id, name, user, state, priority, GPUs, restarts, age, placement/reason
    (user, priority and restarts left out under 120 columns: ``width``, else the width it is
    printed at); a line per job where the table would cut its text (:class:`JobsTable`)."""
    return JobsTable(jobs, time.time() if now is None else now, title, width)


def summary_line(
    nodes: Sequence[dict[str, Any]], jobs: Sequence[dict[str, Any]], recent: int | None = None
) -> Text:
    """``4 GPUs, 120.0GiB/320.0GiB allocated; RUNNING 3, PENDING 5, SUCCEEDED 12``; with
    ``recent`` (the finished jobs are only those among the newest ``recent``, where there are
    more), the finished jobs' counts say so: ``...; of the newest 1000 jobs: SUCCEEDED 990``."""
    gpus = [g for n in nodes for g in n.get("gpus") or []]
    total = sum(int(g.get("memory") or 0) for g in gpus)
    used = sum(int(g.get("allocated_memory") or 0) for g in gpus)
    counts = Counter(str(j.get("state")) for j in jobs)
    line = Text(f"{len(nodes)} node(s), {len(gpus)} GPU(s), ")
    line.append(f"{format_bytes(used)}/{format_bytes(total)} GPU memory allocated; ")
    parts = [f"{s} {counts[s]}" for s in STATE_STYLE if counts.get(s)]
    if recent is None:
        line.append(", ".join(parts) or "no jobs")
        return line
    active = [f"{s} {counts[s]}" for s in STATE_STYLE if s in ACTIVE and counts.get(s)]
    ended = [f"{s} {counts[s]}" for s in STATE_STYLE if s not in ACTIVE and counts.get(s)]
    line.append(", ".join(active) or "no active jobs")
    line.append(f"; of the newest {recent} jobs: " + (", ".join(ended) or "none finished"))
    return line


def head(
    nodes: Sequence[dict[str, Any]],
    jobs: Sequence[dict[str, Any]],
    recent: int | None,
    problems: Sequence[str] = (),
) -> Text:
    """A frame's first lines: :func:`summary_line`, then (in red) the first of ``problems``,
    the fields of the wrong type the server sent, left out of the frame."""
    line = summary_line(nodes, jobs, recent)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        line.append("\n" + visible(f"error: {problems[0]}{more}"), style="red")
    return line


def queue_order(jobs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The active jobs among ``jobs``, running ones first, then by priority, then as queued
    (submitted first)."""
    order = {s: i for i, s in enumerate(ACTIVE)}
    active = [j for j in jobs if j.get("state") in ACTIVE]
    active.sort(
        key=lambda j: (
            order.get(str(j.get("state")), 9),
            -int(j.get("priority") or 0),
            float(j.get("submitted_at") or 0.0),
        )
    )
    return active


def _jobs_title(active: int, shown: int) -> str:
    return f"active jobs ({active})" + (f", first {shown}" if active > shown else "")


def render(
    nodes: Sequence[dict[str, Any]],
    jobs: Sequence[dict[str, Any]],
    now: float | None = None,
    max_jobs: int = 30,
    width: int | None = None,
    height: int | None = None,
    recent: int | None = None,
    problems: Sequence[str] = (),
) -> RenderableType:
    """One ``danlu top`` frame: a summary line, the GPU table and the first ``max_jobs``
    active jobs; with ``height`` (a live view), fitted to a terminal that many lines high
    (:class:`LiveFrame`), else all of it. ``recent``: the finished jobs among ``jobs`` are
    only those among the newest ``recent`` (:func:`summary_line`); ``problems`` are shown
    under that (:func:`head`)."""
    now = time.time() if now is None else now
    active = queue_order(jobs)
    if height is not None:
        shown = active[:max_jobs]
        return LiveFrame(nodes, jobs, shown, len(active), now, width, height, recent, problems)
    shown = active[:max_jobs]
    title = _jobs_title(len(active), len(shown))
    return Group(
        head(nodes, jobs, recent, problems),
        nodes_table(nodes),
        jobs_table(shown, now, title, width),
    )


def frame(
    client: Client,
    max_jobs: int = 30,
    width: int | None = None,
    height: int | None = None,
    problems: list[str] | None = None,
) -> RenderableType:
    """Fetch nodes, every active job and the recent finished ones (those among the newest
    :data:`RECENT` jobs; the summary says so where there are more), and render one frame for
    a console ``width`` wide (and, live, ``height`` high). Fields of the wrong type are left
    out (:mod:`danlu.cli.reply_fields`), each named in ``problems``, or where that is None,
    the first named in the frame."""
    found: list[str] = []
    nodes = checked_nodes(client.nodes(), found)
    active = checked_jobs(list(client.iter_jobs(list(ACTIVE))), found)
    seen = {str(j.get("id")) for j in active}
    newest = checked_jobs(client.list_jobs(limit=RECENT), found)
    recent = [j for j in newest if j.get("state") not in ACTIVE and str(j.get("id")) not in seen]
    capped = RECENT if len(newest) >= RECENT else None
    if problems is not None:
        problems.extend(found)
    shown = found if problems is None else []
    return render(
        nodes,
        active + recent,
        max_jobs=max_jobs,
        width=width,
        height=height,
        recent=capped,
        problems=shown,
    )


def _most(count: int, fits: Callable[[int], bool]) -> int:
    """The largest ``n`` in ``0..count`` for which ``fits(n)`` (true up to some ``n``, false
    from there), found by bisection; -1 when not even 0 fits."""
    if not fits(0):
        return -1
    low, high = 0, count
    while low < high:
        mid = (low + high + 1) // 2
        if fits(mid):
            low = mid
        else:
            high = mid - 1
    return low


Lines = list[list[Segment]]
"""A part of a frame, rendered: its lines of segments."""


class LiveFrame:
    """A ``danlu top`` frame fitted to a terminal ``height`` lines high (a live view shows
    no more): the summary line; the GPUs, a row per GPU where that leaves the jobs the lines
    they need (or two thirds of the terminal), else a row per node (:class:`NodeSummary`),
    as many as fit, the others counted; then as many of the active jobs as the lines left
    hold (the first holding GPUs and the first waiting, :meth:`jobs_part`). Laid out once
    for each width it is printed at, and kept rendered (Rich redraws a live view four times
    a second)."""

    def __init__(
        self,
        nodes: Sequence[dict[str, Any]],
        jobs: Sequence[dict[str, Any]],
        shown: Sequence[dict[str, Any]],
        active: int,
        now: float,
        width: int | None,
        height: int,
        recent: int | None = None,
        problems: Sequence[str] = (),
    ) -> None:
        self.nodes, self.jobs, self.shown = list(nodes), list(jobs), list(shown)
        self.active, self.now, self.width, self.height = active, now, width, height
        self._laid_out: dict[int, Lines] = {}
        self.recent = recent
        """As :func:`summary_line` takes it."""
        self.problems = list(problems)
        """As :func:`head` takes them."""

    def jobs_part(self, count: int) -> JobsTable:
        """The table of ``count`` of the jobs: all of them, or where they do not all fit,
        the first of those holding GPUs and the first waiting ones, the waiting given at
        least half the rows (so that the queue and its reasons stay on screen)."""
        if count >= len(self.shown):
            title = _jobs_title(self.active, len(self.shown))
            return jobs_table(self.shown, self.now, title, self.width)
        holding = [j for j in self.shown if j.get("state") != "PENDING"]
        waiting = [j for j in self.shown if j.get("state") == "PENDING"]
        queued = min(len(waiting), max(count // 2, count - len(holding)))
        states = Counter(str(j.get("state")) for j in self.jobs if j.get("state") in ACTIVE)
        title = (
            f"active jobs ({self.active}), {count} shown: {count - queued} of "
            f"{self.active - states['PENDING']} holding GPUs, {queued} of "
            f"{states['PENDING']} pending"
        )
        shown = holding[: count - queued] + waiting[:queued]
        return jobs_table(shown, self.now, title, self.width)

    def layout(self, console: Console, options: ConsoleOptions) -> Lines:
        """The frame rendered for ``options.max_width``: at most :attr:`height` lines (but
        for a terminal too short for a line of each part)."""
        options = options.update(height=None)

        def render(renderable: RenderableType) -> Lines:
            return console.render_lines(renderable, options, pad=False)

        summary = render(head(self.nodes, self.jobs, self.recent, self.problems))
        left = self.height - len(summary)
        every = render(self.jobs_part(len(self.shown)))
        gpus = self._gpus(render, max(left - len(every), left // 3))
        left -= len(gpus)
        if len(every) <= left:
            return summary + gpus + every
        jobs = self._some_jobs(render, left, len(every)) if self.shown else None
        if jobs is None:
            note = f"active jobs ({self.active})"
            note += ": a taller terminal shows them" if self.shown else ""
            jobs = render(Text(note))
            jobs = jobs if len(jobs) <= left else []
        return summary + gpus + jobs

    def _some_jobs(
        self, render: Callable[[RenderableType], Lines], room: int, every: int
    ) -> Lines | None:
        """The most jobs (but not all) that fit in ``room`` lines, rendered (``every``: the
        lines all of them take); None when not even one does. The count is guessed from the
        lines a row takes on average, then corrected a row at a time (a table is slow to
        render)."""
        total = len(self.shown)
        bare = len(render(self.jobs_part(0))) if total else every
        guess = (room - bare) * total // max(1, every - bare)
        count = max(1, min(total - 1, guess))
        best = render(self.jobs_part(count))
        if len(best) > room:
            while count > 1:
                count -= 1
                best = render(self.jobs_part(count))
                if len(best) <= room:
                    return best
            return None
        while count + 1 < total:
            more = render(self.jobs_part(count + 1))
            if len(more) > room:
                break
            count, best = count + 1, more
        return best

    def _gpus(self, render: Callable[[RenderableType], Lines], room: int) -> Lines:
        """The GPU part in at most ``room`` lines: a row per GPU, or per node, or the first
        nodes and a count of the others, or only that count (nothing when ``room`` < 1)."""
        gpus = sum(len(node.get("gpus") or []) for node in self.nodes)
        if gpus < room:  # else a line per GPU cannot fit: not rendered to find out
            every = render(nodes_table(self.nodes))
            if len(every) <= room:
                return every
        count = _most(len(self.nodes), lambda n: len(render(NodeSummary(self.nodes, n))) <= room)
        if count > 0:
            return render(NodeSummary(self.nodes, count))
        count = len(self.nodes)
        note = render(Text(f"GPUs: {count} node(s) not shown (a taller terminal shows them)"))
        return note if len(note) <= room else []

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        if width not in self._laid_out:
            self._laid_out[width] = self.layout(console, options)
        lines = self._laid_out[width]
        for index, line in enumerate(lines):
            yield from line
            if index < len(lines) - 1:
                yield Segment.line()
