"""Rich renderings of the cluster for ``danlu nodes`` and ``danlu top``.

Pure functions of the API's Node / Job objects (``docs/api.md``), so they are tested without a
server; :func:`frame` fetches one snapshot through a :class:`~danlu.client.Client`.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from danlu.client import Client
from danlu.core.units import format_bytes, format_duration

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
NARROW = 120


def state_text(state: str) -> Text:
    """A job state, coloured."""
    return Text(state, style=STATE_STYLE.get(state, ""))


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
    """A node's scheduled cordon or drain in words (plain text):
    ``drain at 2026-12-01 02:00 UTC (in 3h): new DIMMs``."""
    at = float(node["close_at"])
    try:
        when = datetime.fromtimestamp(at).astimezone().strftime("%Y-%m-%d %H:%M %Z")
    except (ValueError, OverflowError, OSError):  # past the calendar (a time stored in ms)
        when = f"{at:g} s after 1970"
    left = format_duration(max(0.0, at - time.time()))
    reason = str(node.get("close_reason") or "")
    return f"{node.get('close_action')} at {when} (in {left})" + (f": {reason}" if reason else "")


class NodesTable:
    """The GPU table of :func:`nodes_table`, laid out for the width it is printed at: under
    :data:`NARROW` columns each job id on its own line and the memory's used/total under its
    bar, so that neither is ever cut with an ellipsis (the other columns fold)."""

    def __init__(self, nodes: Sequence[dict[str, Any]]) -> None:
        self.nodes = list(nodes)

    def table(self, width: int | None = None) -> Table:
        """The table for a console ``width`` wide (None: as wide as it likes)."""
        return _nodes_table(self.nodes, narrow=width is not None and width < NARROW)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.table(options.max_width)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.table(options.max_width))


def nodes_table(nodes: Sequence[dict[str, Any]]) -> NodesTable:
    """One row per GPU: node (with its state when not ready, and the reason), index (with
    the GPU's own state when not ready, and the reason), type, allocated memory bar, compute
    share, jobs; laid out for the width it is printed at (:class:`NodesTable`)."""
    return NodesTable(nodes)


def _nodes_table(nodes: Sequence[dict[str, Any]], narrow: bool) -> Table:
    table = Table(title="GPUs", title_justify="left", expand=False)
    for col in ("node", "gpu", "type", "memory", "compute", "jobs"):
        whole = narrow and col in ("memory", "jobs")  # the widest word of each line: kept
        table.add_column(
            col,
            justify="right" if col == "compute" else "left",
            no_wrap=whole,
            overflow="fold",
            min_width=12 if col == "jobs" else None,
        )
    for node in nodes:
        name = str(node.get("name", "?")) + (" (fake)" if node.get("fake") else "")
        state = node.get("state") or "ready"
        if state != "ready":
            reason = node.get("cordon_reason") or ""
            name += f" [{state}{': ' + str(reason) if reason else ''}]"
        if node.get("close_at") is not None:
            name += f" [{scheduled(node)}]"
        name = escape(name)  # a name or reason is text, not Rich markup
        for gpu in node.get("gpus", []):
            jobs = gpu.get("jobs", []) or []
            index = str(gpu.get("index", "?"))
            gpu_state = gpu.get("state") or "ready"
            if gpu_state != "ready":
                reason = gpu.get("cordon_reason") or ""
                index += escape(f" [{gpu_state}{': ' + str(reason) if reason else ''}]")
            used, total = int(gpu.get("allocated_memory") or 0), int(gpu.get("memory") or 0)
            table.add_row(
                name,
                index,
                str(gpu.get("type") or node.get("gpu_type") or ""),
                memory_bar(used, total, sep="\n" if narrow else " "),
                f"{int(gpu.get('allocated_milli') or 0) / 10:.0f}%",
                ("\n" if narrow else ", ").join(str(j) for j in jobs) or "-",
            )
            name = ""
    return table


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
    """A job's GPU request: ``2`` or ``1 x 10.0GiB``."""
    gpus = job.get("gpus")
    memory = job.get("gpu_memory")
    text = "-" if gpus is None else str(gpus)
    if isinstance(memory, int | float) and memory:
        text += f" x {format_bytes(memory)}"
    return text


def jobs_table(
    jobs: Sequence[dict[str, Any]],
    now: float | None = None,
    title: str = "",
    width: int | None = None,
) -> Table:
    """A table of jobs: id, name, user, state, priority, GPUs, restarts, age, placement/reason
    (user, priority and restarts left out when ``width`` is under 120 columns)."""
    now = time.time() if now is None else now
    narrow = width is not None and width < NARROW
    table = Table(title=title or None, title_justify="left")
    widths = {"id": 12, "user": 5, "state": 10, "prio": 4, "gpus": 6, "restarts": 8, "age": 5}
    columns = ["id", "name", "user", "state", "prio", "gpus", "restarts", "age"]
    if narrow:
        columns = [c for c in columns if c not in ("user", "prio", "restarts")]
    for col in columns:
        right = col in ("prio", "restarts", "age")
        table.add_column(
            col,
            justify="right" if right else "left",
            no_wrap=col != "name",
            overflow="fold" if col == "name" else "ellipsis",
            min_width=widths.get(col, 8),
            max_width=24 if col == "name" else None,
        )
    table.add_column("where / why", overflow="fold", min_width=10)
    for job in jobs:
        alloc = job.get("allocation") or []
        where = ", ".join(f"{a.get('node')}:{a.get('gpu')}" for a in alloc)
        if not where and job.get("state") == "PENDING":
            where = str(job.get("pending_reason") or "")
        elif job.get("exit_code") is not None and not where:
            where = f"exit {job['exit_code']}"
        cells: dict[str, str | Text] = {
            # fields are text, not Rich markup (a name like "[/x]" crashed the table)
            "id": Text(str(job.get("id", ""))),
            "name": Text(str(job.get("name", ""))),
            "user": Text(str(job.get("user", ""))),
            "state": state_text(str(job.get("state", ""))),
            "prio": Text(str(job.get("priority", ""))),
            "gpus": gpus_of(job),
            "restarts": Text(str(job.get("restarts", 0))),
            "age": _ago(job.get("submitted_at"), now),
        }
        table.add_row(*(cells[c] for c in columns), Text(where, overflow="fold"))
    return table


def summary_line(nodes: Sequence[dict[str, Any]], jobs: Sequence[dict[str, Any]]) -> Text:
    """``4 GPUs, 120.0GiB/320.0GiB allocated; RUNNING 3, PENDING 5``."""
    gpus = [g for n in nodes for g in n.get("gpus", [])]
    total = sum(int(g.get("memory") or 0) for g in gpus)
    used = sum(int(g.get("allocated_memory") or 0) for g in gpus)
    counts = Counter(str(j.get("state")) for j in jobs)
    line = Text(f"{len(nodes)} node(s), {len(gpus)} GPU(s), ")
    line.append(f"{format_bytes(used)}/{format_bytes(total)} GPU memory allocated; ")
    parts = [f"{s} {counts[s]}" for s in STATE_STYLE if counts.get(s)]
    line.append(", ".join(parts) or "no jobs")
    return line


def render(
    nodes: Sequence[dict[str, Any]],
    jobs: Sequence[dict[str, Any]],
    now: float | None = None,
    max_jobs: int = 30,
    width: int | None = None,
) -> RenderableType:
    """One ``danlu top`` frame: a summary line, the GPU table and the active jobs."""
    active = [j for j in jobs if j.get("state") in ACTIVE]
    order = {s: i for i, s in enumerate(ACTIVE)}
    active.sort(key=lambda j: (order.get(str(j.get("state")), 9), -int(j.get("priority") or 0)))
    shown = active[:max_jobs]
    title = f"active jobs ({len(active)})" + (
        f", first {max_jobs}" if len(active) > max_jobs else ""
    )
    return Group(
        summary_line(nodes, jobs), nodes_table(nodes), jobs_table(shown, now, title, width)
    )


def frame(client: Client, max_jobs: int = 30, width: int | None = None) -> RenderableType:
    """Fetch nodes, every active job and the recent finished ones (the newest 1000 jobs),
    and render one frame for a console ``width`` wide."""
    nodes = client.nodes()
    active = list(client.iter_jobs(list(ACTIVE)))
    seen = {str(j.get("id")) for j in active}
    recent = [
        j
        for j in client.list_jobs(limit=1000)
        if j.get("state") not in ACTIVE and str(j.get("id")) not in seen
    ]
    return render(nodes, active + recent, max_jobs=max_jobs, width=width)
