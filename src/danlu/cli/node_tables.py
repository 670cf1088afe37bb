"""Rich renderings of the cluster's nodes and GPUs (``GET /cluster/nodes``, ``docs/api.md``)
for ``danlu nodes`` and ``danlu top``: a row per GPU (:class:`NodesTable`) or per node
(:class:`NodeSummary`), each laid out for the width it is printed at."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from danlu.cli.fitted_table import NARROW, FittedTable
from danlu.cli.markup import as_text
from danlu.core.units import format_bytes, format_duration
from danlu.core.values import visible

BAR_WIDTH = 20
SHORT_BAR = 10
"""The memory bar of a row per node (:class:`NodeSummary`): its text beside it on one line."""


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


def _moment(at: float) -> str:
    """POSIX seconds as a local time with its zone: ``2026-12-01 02:00 UTC``."""
    try:
        return datetime.fromtimestamp(at).astimezone().strftime("%Y-%m-%d %H:%M %Z")
    except (ValueError, OverflowError, OSError):  # past the calendar (a time stored in ms)
        return f"{at:g} s after 1970"


def scheduled(node: dict[str, Any]) -> str:
    """A node's scheduled cordon or drain in words (plain text, control characters written
    as escapes): ``drain at 2026-12-01 02:00 UTC (in 3h) until 2026-12-01 06:00 UTC: new
    DIMMs`` (``until``: when it ends, the node uncordoned)."""
    at = float(node["close_at"])
    left = format_duration(max(0.0, at - time.time()))
    until = node.get("close_until")
    ends = "" if until is None else f" until {_moment(float(until))}"
    reason = visible(str(node.get("close_reason") or ""))  # shown, not acted on
    return f"{node.get('close_action')} at {_moment(at)} (in {left}){ends}" + (
        f": {reason}" if reason else ""
    )


def close_end(node: dict[str, Any]) -> str:
    """When a node's cordon or drain ends (its ``open_at``), in words: ``until 2026-12-01
    06:00 UTC (in 2h)``, the node uncordoned then."""
    at = float(node["open_at"])
    return f"until {_moment(at)} (in {format_duration(max(0.0, at - time.time()))})"


def node_label(node: dict[str, Any]) -> str:
    """A node's name (``(fake)`` for a fake one), with its state and reason when not ready
    and its scheduled close; plain text, control characters written as escapes."""
    name = str(node.get("name", "?")) + (" (fake)" if node.get("fake") else "")
    state = node.get("state") or "ready"
    if state != "ready":
        reason = node.get("cordon_reason") or ""
        ending = f"; {close_end(node)}" if node.get("open_at") is not None else ""
        name += f" [{state}{': ' + str(reason) if reason else ''}{ending}]"
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


def node_record(node: dict[str, Any]) -> Table:
    """``danlu node show``'s lines of a node's record (``GET /cluster/nodes/{name}``): its
    name, state (since when, why, until when), GPUs, the GPUs closed on their own, rack,
    how many jobs hold its GPUs, its failed launches in a row and a scheduled close; plain
    text, control characters written as escapes."""
    table = Table(show_header=False, box=None, padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    for key, value in _record_lines(node):
        table.add_row(key, Text(visible(value)))
    return table


def _record_lines(node: dict[str, Any]) -> list[tuple[str, str]]:
    gpus = list(node.get("gpus") or [])
    lines = [
        ("node", str(node.get("name", "?")) + (" (fake)" if node.get("fake") else "")),
        ("state", _state_text(node)),
        ("GPUs", _gpus_text(node, gpus)),
    ]
    closed = [f"GPU {gpu_label(gpu)}" for gpu in gpus if (gpu.get("state") or "ready") != "ready"]
    if closed:
        lines.append(("closed GPUs", ", ".join(closed)))
    lines += [("rack", str(node.get("rack") or "-")), ("jobs", str(node_job_count(gpus)))]
    failures = int(node.get("launch_failures") or 0)
    if failures:
        lines.append(("launch failures", f"{failures} in a row"))
    if node.get("close_at") is not None:
        lines.append(("scheduled", scheduled(node)))
    return lines


def _state_text(node: dict[str, Any]) -> str:
    """``ready``, or ``draining since 2026-12-01 02:00 UTC: new DIMMs; until ...``."""
    state = str(node.get("state") or "ready")
    if state == "ready":
        return state
    since = node.get("cordoned_at")
    text = state + ("" if since is None else f" since {_moment(float(since))}")
    reason = node.get("cordon_reason")
    text += f": {reason}" if reason else ""
    return text + (f"; {close_end(node)}" if node.get("open_at") is not None else "")


def _gpus_text(node: dict[str, Any], gpus: Sequence[dict[str, Any]]) -> str:
    """``4 x H100 (80.0GiB)``, a group a type and memory; ``none``."""
    kinds = Counter((_gpu_type(node, gpu), int(gpu.get("memory") or 0)) for gpu in gpus)
    return (
        ", ".join(f"{n} x {kind} ({format_bytes(size)})" for (kind, size), n in kinds.items())
        or "none"
    )
