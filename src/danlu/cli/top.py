"""Rich renderings of the cluster for ``danlu nodes`` and ``danlu top``.

Pure functions of the API's Node / Job objects (``docs/api.md``), so they are tested without a
server; :func:`frame` fetches one snapshot through a :class:`~danlu.client.Client`. The tables
are :mod:`danlu.cli.node_tables` (GPUs) and :mod:`danlu.cli.job_table` (jobs), both
:class:`~danlu.cli.fitted_table.FittedTable`; their names are importable from here too.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.segment import Segment
from rich.text import Text

from danlu.cli.fitted_table import NARROW, WIDE, FittedTable, needed_width
from danlu.cli.job_table import (
    ENDED,
    JOB_COLUMNS,
    LABELS,
    PLAIN_EXITS,
    STATE_STYLE,
    JobsTable,
    end_text,
    gpus_of,
    jobs_table,
    needs_end_reason,
    state_text,
    told_end_reason,
    where_text,
)
from danlu.cli.node_tables import (
    BAR_WIDTH,
    SHORT_BAR,
    NodesTable,
    NodeSummary,
    gpu_holders,
    gpu_label,
    memory_bar,
    node_job_count,
    node_label,
    nodes_table,
    others_text,
    scheduled,
)
from danlu.cli.reply_fields import checked_jobs, checked_nodes
from danlu.client import Client
from danlu.client.errors import InvalidRequestError, parameter_not_taken
from danlu.client.job_calls import MAX_PAGE
from danlu.core.units import format_bytes
from danlu.core.values import visible

__all__ = [
    "ACTIVE",
    "BAR_WIDTH",
    "ENDED",
    "HOLDING",
    "JOB_COLUMNS",
    "LABELS",
    "NARROW",
    "PLAIN_EXITS",
    "RECENT",
    "SHORT_BAR",
    "STATE_STYLE",
    "WIDE",
    "FittedTable",
    "JobsTable",
    "LiveFrame",
    "NodeSummary",
    "NodesTable",
    "end_text",
    "finished_counts",
    "frame",
    "gpu_holders",
    "gpu_label",
    "gpus_of",
    "head",
    "jobs_table",
    "memory_bar",
    "needed_width",
    "needs_end_reason",
    "node_job_count",
    "node_label",
    "nodes_table",
    "others_text",
    "queue_order",
    "render",
    "scheduled",
    "shown_active_jobs",
    "state_text",
    "summary_line",
    "told_end_reason",
    "where_text",
]

ACTIVE = ("RUNNING", "PREEMPTING", "RESTARTING", "PENDING")
HOLDING = ACTIVE[:-1]
"""The active states but PENDING: the jobs holding GPUs (as many as the GPUs hold), which
``danlu top`` reads every one of; of the pending ones it reads the queue's head."""
RECENT = 1000
"""How many of the newest jobs ``danlu top`` reads for its counts of finished jobs against a
server that does not count jobs (``GET /jobs?count=true``); one that does is asked for each
ended state's count (:func:`finished_counts`)."""


def summary_line(
    nodes: Sequence[dict[str, Any]],
    jobs: Sequence[dict[str, Any]],
    recent: int | None = None,
    pending: int | None = None,
    *,
    finished: Mapping[str, int] | None = None,
) -> Text:
    """``4 GPUs, 120.0GiB/320.0GiB allocated; RUNNING 3, PENDING 5, SUCCEEDED 12``; with
    ``recent`` (the finished jobs are only those among the newest ``recent``, where there are
    more), the finished jobs' counts say so: ``...; of the newest 1000 jobs: SUCCEEDED 990``.
    ``pending``: how many jobs are PENDING, where ``jobs`` holds only the queue's head.
    ``finished``: how many jobs are in each ended state (:data:`ENDED`; a state left out: 0),
    counted by the server: those counts replace the finished jobs among ``jobs``, and
    ``recent`` is not used (the counts are exact)."""
    gpus = [g for n in nodes for g in n.get("gpus") or []]
    total = sum(int(g.get("memory") or 0) for g in gpus)
    used = sum(int(g.get("allocated_memory") or 0) for g in gpus)
    counts = Counter(str(j.get("state")) for j in jobs)
    if pending is not None:
        counts["PENDING"] = pending
    if finished is not None:
        for state in ENDED:
            counts[state] = finished.get(state, 0)
        recent = None
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
    pending: int | None = None,
    *,
    finished: Mapping[str, int] | None = None,
) -> Text:
    """A frame's first lines: :func:`summary_line` (``pending`` and ``finished`` as it takes
    them), then (in red) the first of ``problems``, the fields of the wrong type the server
    sent, left out of the frame."""
    line = summary_line(nodes, jobs, recent, pending, finished=finished)
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


def _active_count(active: Sequence[dict[str, Any]], pending: int | None) -> int:
    """How many jobs are active: those of ``active`` (:func:`queue_order`'s), where
    ``pending`` (how many are PENDING, where ``active`` holds only the queue's head) is None,
    else its jobs holding GPUs and ``pending``."""
    if pending is None:
        return len(active)
    return sum(1 for j in active if j.get("state") != "PENDING") + pending


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
    pending: int | None = None,
    *,
    finished: Mapping[str, int] | None = None,
) -> RenderableType:
    """One ``danlu top`` frame: a summary line, the GPU table and the first ``max_jobs``
    active jobs; with ``height`` (a live view), fitted to a terminal that many lines high
    (:class:`LiveFrame`), else all of it. ``recent``: the finished jobs among ``jobs`` are
    only those among the newest ``recent`` (:func:`summary_line`); ``problems`` are shown
    under that (:func:`head`). ``pending``: how many jobs are PENDING, where ``jobs`` holds
    only the first of them in the queue's order (None: ``jobs`` holds every one).
    ``finished``: the server's counts of jobs in each ended state, shown instead of the
    finished jobs among ``jobs`` (:func:`summary_line`)."""
    now = time.time() if now is None else now
    active = queue_order(jobs)
    count = _active_count(active, pending)
    shown = active[:max_jobs]
    if height is not None:
        return LiveFrame(
            nodes,
            jobs,
            shown,
            count,
            now,
            width,
            height,
            recent,
            problems,
            pending,
            finished=finished,
        )
    title = _jobs_title(count, len(shown))
    return Group(
        head(nodes, jobs, recent, problems, pending, finished=finished),
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
    """Fetch nodes, the active jobs a frame of ``max_jobs`` shows with how many there are
    (:func:`shown_active_jobs`) and how many jobs are in each ended state
    (:func:`finished_counts`), and render one frame for a console ``width`` wide (and, live,
    ``height`` high). A server that does not count jobs has the finished jobs counted among
    the newest :data:`RECENT` jobs instead (the summary says so where there are more).
    Fields of the wrong type are left out (:mod:`danlu.cli.reply_fields`), each named in
    ``problems``, or where that is None, the first named in the frame."""
    found: list[str] = []
    nodes = checked_nodes(client.nodes(), found)
    active, pending = shown_active_jobs(client, max_jobs, found)
    finished = finished_counts(client)
    recent: list[dict[str, Any]] = []
    capped: int | None = None
    if finished is None:  # a server older than count=true: the newest jobs read, as before
        seen = {str(j.get("id")) for j in active}
        newest = checked_jobs(client.list_jobs(limit=RECENT), found)
        recent = [
            j for j in newest if j.get("state") not in ACTIVE and str(j.get("id")) not in seen
        ]
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
        pending=pending,
        finished=finished,
    )


def finished_counts(client: Client) -> dict[str, int] | None:
    """How many jobs are in each ended state (:data:`ENDED`), as the server counts them: a
    ``GET /jobs?state=S&count=true&limit=1`` for each state (:meth:`Client.count_jobs`), one
    request a state, so that each count comes apart. None from a server older than
    ``count`` (a reply without the count, or a 422 naming it): no more is asked of it."""
    counts: dict[str, int] = {}
    for state in ENDED:
        try:
            count = client.count_jobs(state)
        except InvalidRequestError as exc:
            if not parameter_not_taken(exc, "count"):
                raise
            return None
        if count is None:
            return None
        counts[state] = count
    return counts


def shown_active_jobs(
    client: Client, max_jobs: int, found: list[str]
) -> tuple[list[dict[str, Any]], int | None]:
    """The active jobs a frame of at most ``max_jobs`` shows, and how many jobs are PENDING:
    every job holding GPUs (:data:`HOLDING`: as many as the GPUs hold), and of the queue
    only its head, as many pending jobs as the rows left (``GET /jobs?order=queue``, with
    ``count=true`` for how many), so that a queue of 10,000 is not read each refresh. A
    server older than those parameters (a 422 naming one, or a reply without the count)
    has every pending job read, as before, and the count None (the jobs hold them all).
    Fields of the wrong type are left out, each named in ``found``."""
    holding = checked_jobs(list(client.iter_jobs(list(HOLDING))), found)
    rows = min(MAX_PAGE, max(1, max_jobs - len(holding)))  # the server asks for 1 at least
    try:
        queued, pending = client.list_jobs_counted("PENDING", order="queue", limit=rows)
    except InvalidRequestError as exc:
        if not (parameter_not_taken(exc, "order") or parameter_not_taken(exc, "count")):
            raise
        queued, pending = [], None
    if pending is None:  # oldest first: as the queue orders jobs of one priority and time
        queued = list(client.iter_jobs("PENDING"))[::-1]
    held = {str(j.get("id")) for j in holding}  # a job preempted between the two reads
    queued = [j for j in checked_jobs(queued, found) if str(j.get("id")) not in held]
    return holding + queued, pending


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
        pending: int | None = None,
        *,
        finished: Mapping[str, int] | None = None,
    ) -> None:
        self.nodes, self.jobs, self.shown = list(nodes), list(jobs), list(shown)
        self.finished = None if finished is None else dict(finished)
        """As :func:`summary_line` takes it: the server's counts of the finished jobs."""
        self.pending = pending
        """As :func:`render` takes it: how many jobs are PENDING, where :attr:`jobs` holds
        only the queue's head."""
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
        pending = states["PENDING"] if self.pending is None else self.pending
        title = (
            f"active jobs ({self.active}), {count} shown: {count - queued} of "
            f"{self.active - pending} holding GPUs, {queued} of {pending} pending"
        )
        shown = holding[: count - queued] + waiting[:queued]
        return jobs_table(shown, self.now, title, self.width)

    def layout(self, console: Console, options: ConsoleOptions) -> Lines:
        """The frame rendered for ``options.max_width``: at most :attr:`height` lines (but
        for a terminal too short for a line of each part)."""
        options = options.update(height=None)

        def render(renderable: RenderableType) -> Lines:
            return console.render_lines(renderable, options, pad=False)

        summary = render(
            head(
                self.nodes,
                self.jobs,
                self.recent,
                self.problems,
                self.pending,
                finished=self.finished,
            )
        )
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
