"""The Rich table of jobs of ``danlu ls`` and ``danlu top`` (:func:`jobs_table`), and the
rules of its "where / why" column that ``danlu wait`` and the dashboard share
(:func:`where_text`, :func:`told_end_reason`)."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from danlu.cli.fitted_table import NARROW, FittedTable, needed_width
from danlu.core.units import format_bytes
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


NOT_LAUNCHED = "not launched"
"""What follows the state of a job holding GPUs (RUNNING, PREEMPTING) whose current run the
executor has not launched (the API's ``launched`` false): placed, or stopped before its
launch, it holds its GPUs but runs nothing, so no output comes. It wins over :data:`HELD`: a
held job whose run never launched runs nothing to checkpoint (its ``why`` says it is held).
The dashboard's Jobs table (``jobs.js``'s ``stateNote``) says the same."""

HELD = "held"
"""What follows the state of an unfinished job that is held (the API's ``held_at`` set:
``danlu hold``): a PENDING one is passed by until released, a RUNNING one is preempted by
checkpoint in the next round. Not said of an ended job, which keeps its ``held_at``, nor
where :data:`NOT_LAUNCHED` is, nor where the job's why says it (:func:`state_note`); the
dashboard's Jobs table (``jobs.js``'s ``stateNote``) says the same."""

WAITING = "waiting"
"""What follows the state of an unfinished job that waits for a job, sweep or job array it
depends on (the API's ``waiting_on`` set): the scheduler passes it by until the condition
holds. Not where :data:`NOT_LAUNCHED` or :data:`HELD` is, nor where the job's why names
what it waits for (:func:`state_note`); the dashboard's Jobs table says the same."""

HOLDING_STATES = ("RUNNING", "PREEMPTING")
"""The states of a job that holds GPUs: those whose run may be not launched."""

UNFINISHED = ("PENDING", "RUNNING", "PREEMPTING", "RESTARTING")
"""The states of a job not ended: those that :data:`HELD` and :data:`WAITING` are said of."""

SAYS_HELD = re.compile(r"held(?![A-Za-z0-9_])")
"""How the ``pending_reason`` of a held job begins when it says so (the server's ``held by
alice``, or ``held`` where it does not know who): ``jobs.js``'s ``saysHeld``, one rule."""


def state_note(job: Mapping[str, Any]) -> str | None:
    """What follows ``job``'s state (``RUNNING (not launched)``, ``PENDING (held)``,
    ``PENDING (waiting)``), or None: the first of :data:`NOT_LAUNCHED`, :data:`HELD` and
    :data:`WAITING` that holds, left out where the why beside the state says it already (a
    PENDING job's ``pending_reason``, its "where / why" here and on the dashboard: ``held by
    alice``, ``waiting for job 0a1b2c3d4e5f (prep) to succeed``), so the table says it once;
    said where the why says something else (``owner alice is disabled (...): ...``). The
    dashboard's Jobs table (``jobs.js``'s ``stateNote``) is the same rule."""
    state = job.get("state")
    if state in HOLDING_STATES and not run_launched(job):
        return NOT_LAUNCHED
    if state not in UNFINISHED:
        return None
    reason = job.get("pending_reason") if state == "PENDING" else None
    why = reason if isinstance(reason, str) else ""
    if job.get("held_at") is not None:
        return None if SAYS_HELD.match(why) else HELD
    waiting = job.get("waiting_on")
    if not waiting:
        return None
    return None if names_dependency(why, str(waiting)) else WAITING


def names_dependency(why: str, waiting_on: str) -> bool:
    """Whether ``why`` names ``waiting_on`` as what the job waits for, as the server says it
    (``waiting for job ID (NAME) to succeed``, ``... sweep ID ...``, ``... array ID ...``):
    ``jobs.js``'s ``namesDependency``, one rule."""
    words = why.split(" ")
    return words[:2] == ["waiting", "for"] and words[3:4] == [waiting_on]


def state_text(state: str, note: str | None = None, stacked: bool = False) -> Text:
    """A job state, coloured; a state no danlu sends (another version's, a bad reply's) is
    shown with its control characters written as escapes, never acted on. ``note``
    (:func:`state_note`) follows it: ``RUNNING (not launched)``, or with ``stacked`` on a line
    under the state (a narrow table's cell)."""
    text = Text(visible(state), style=STATE_STYLE.get(state, ""))
    if note is not None:
        text.append(f"\n{note}" if stacked else f" ({note})", style=STATE_STYLE["PENDING"])
    return text


def job_state_text(job: Mapping[str, Any], stacked: bool = False) -> Text:
    """``job``'s state as :func:`state_text` shows it, with its note (:func:`state_note`), as
    the dashboard's Jobs table writes it."""
    return state_text(str(job.get("state", "")), state_note(job), stacked)


def run_launched(job: Mapping[str, Any]) -> bool:
    """Whether ``job``'s current run is launched, as its ``launched`` says; a server older
    than the field sends none: launched, as such a server showed every RUNNING job."""
    return job.get("launched") is not False


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
    """A job's GPUs: those it holds (``2``, ``1 x 10.0GiB``) while it holds some (its
    ``allocation``), else what it asks for: an elastic range ``1..2`` (the API's ``gpus`` is
    then the range's least), ``2``; for a share of one GPU its fraction, ``0.25`` (the
    spec's ``resources.gpu_fraction``)."""
    resources = (job.get("spec") or {}).get("resources")
    fraction = resources.get("gpu_fraction") if isinstance(resources, dict) else None
    gpus = job.get("gpus")
    text = "-" if gpus is None else str(gpus)
    asked = _elastic_range(resources.get("gpus") if isinstance(resources, dict) else None)
    if asked is not None and not job.get("allocation"):
        text = asked
    if isinstance(fraction, int | float) and not isinstance(fraction, bool) and 0 < fraction < 1:
        text = f"{fraction:g}"
    memory = job.get("gpu_memory")
    if isinstance(memory, int | float) and memory:
        text += f" x {format_bytes(memory)}"
    return text


def _elastic_range(gpus: Any) -> str | None:
    """A spec's ``resources.gpus`` as the range ``min..max`` when it is one (``max`` above
    ``min``, both whole numbers); None for a fixed count or a value of another shape."""
    if not isinstance(gpus, Mapping):
        return None
    low, high = gpus.get("min"), gpus.get("max")
    if not (isinstance(low, int) and isinstance(high, int)) or bool in (type(low), type(high)):
        return None
    return f"{low}..{high}" if high > low else None


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
    cells["state"] = job_state_text(job)
    cells[STACKED_STATE] = job_state_text(job, stacked=True)
    return cells


STACKED_STATE = "stacked state"
"""The key of a job's cells whose state is on two lines where it has a note (``RUNNING`` over
``not launched``, ``held`` or ``waiting``): the state column of a table that is too wide with
it on one."""


class JobsTable(FittedTable):
    """The table of :func:`jobs_table`, laid out for the width it is printed at (or
    ``width``): under :data:`NARROW` columns without user, priority and restarts; where the
    ids and states would be cut, a line per job. A state with a note (``RUNNING (not
    launched)``, ``RUNNING (held)``) is on one line where the table fits so, else on two lines
    of its cell (``RUNNING`` over ``not launched``: no wider than ``PREEMPTING`` by more than
    2, where the note on one line turned many a table at 80 columns into a line per job); into
    a pipe or a file on one line (:meth:`whole_table`)."""

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
        return self._table(self._columns(width))

    def layout(self, console: Console, width: int) -> RenderableType:
        """:meth:`table` where it fits in ``width``, else the table with each state's note
        under its state, where that fits, else :meth:`lines`."""
        table = self.table(width)
        if needed_width(console, table, self.FLOORS) <= width:
            return table
        if any("\n" in cells[STACKED_STATE].plain for cells in self.rows):
            stacked = self._table(self._columns(width), state=STACKED_STATE)
            if needed_width(console, stacked, self.FLOORS) <= width:
                return stacked
        return self.lines(width)

    def whole_table(self) -> Table:
        """Every column, whatever ``width`` the table was made for."""
        return self._table(list(JOB_COLUMNS))

    def _table(self, columns: list[str], state: str = "state") -> Table:
        """The table of ``columns``; the state column's cells are the cells' ``state`` (one
        line) or :data:`STACKED_STATE`."""
        table = Table(title=self.title or None, title_justify="left")
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
            table.add_row(*(cells[state if c == "state" else c] for c in columns), cells["where"])
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
