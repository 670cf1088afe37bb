"""``danlu events``: the state changes of every job (yours, unless admin), from a time on, as
a table, or followed as they happen."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Annotated, Any

import typer
from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from danlu.cli.fitted_table import FittedTable, prints_whole
from danlu.cli.follow import PAGE, GapCursor, read_pages, row_id
from danlu.cli.jobs import connect, console, fail, fail_on, print_json, report
from danlu.cli.markup import after_state, reason_after_state
from danlu.cli.options import (
    HomeOpt,
    JsonOpt,
    TokenOpt,
    UrlOpt,
    int_option,
    job_states,
    refuse_empty,
)
from danlu.cli.reply_fields import checked_events
from danlu.client import Client
from danlu.client.rest import read_across_restart
from danlu.core.errors import DanluError
from danlu.core.units import SINCE_FORMS, parse_since
from danlu.core.values import visible

FOLLOW_SECONDS = 1.0
"""Seconds between two reads while following."""


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return time.strftime("%m-%d %H:%M:%S", time.localtime(float(seconds)))


def _change(event: dict[str, Any]) -> str:
    old = event.get("old")
    return f"{old} -> {event.get('new')}" if old else f"submitted ({event.get('new')})"


def _cells(event: dict[str, Any]) -> list[str]:
    """An event's time, job, name, user/project, change and reason, as text with its
    control characters written as escapes (a reason may quote a node's: shown, never acted
    on by the terminal); its fields of the type the API gives them
    (:func:`~danlu.cli.reply_fields.checked_events`). The reason of a change into a state
    does not say the state again (``RUNNING -> CANCELLED``, ``by alice``:
    :func:`~danlu.cli.markup.reason_after_state`)."""
    reason = event.get("reason") or ""
    cells = [
        _clock(event.get("time")),
        str(event.get("job_id", "?")),
        str(event.get("job_name", "")),
        f"{event.get('user')}/{event.get('project')}",
        _change(event),
        reason_after_state(event.get("new"), reason) if event.get("old") else str(reason),
    ]
    return [visible(cell) for cell in cells]


class EventsTable(FittedTable):
    """``danlu events``' table: time, job, name, user/project, change, reason. The time,
    the job's id and the change are never wrapped; where the other columns cannot each have
    :attr:`FLOORS` (80 columns), one event per line as ``danlu events -f`` prints it
    (:func:`line`), folded when long: at 80 columns the table folded ``admin/default`` and
    the time mid-word, a name one character a line."""

    FLOORS: Mapping[str, int] = {"name": 10, "user/project": 12, "reason": 12}

    def __init__(self, events: Sequence[dict[str, Any]]) -> None:
        self.events = list(events)

    def table(self, width: int) -> Table:
        out = Table()
        for column in ("time", "job", "name", "user/project", "change", "reason"):
            if column in ("time", "job", "change"):  # the job: the id other commands take
                out.add_column(column, no_wrap=True, min_width=12 if column == "job" else None)
            else:
                out.add_column(column, overflow="fold")
        for event in self.events:
            out.add_row(*map(escape, _cells(event)))
        return out

    def lines(self, width: int) -> RenderableType:
        return Group(*(Text(line(event)) for event in self.events))


def table(events: Sequence[dict[str, Any]]) -> EventsTable:
    """The events as a table (:class:`EventsTable`): time, job, name, user/project, change,
    reason; one event per line where a table would not fit."""
    return EventsTable(events)


def line(event: dict[str, Any]) -> str:
    """One event as a line (text, not markup), the state it changed into said once: ``...
    RUNNING -> CANCELLED by alice``, ``PENDING -> RUNNING on n1:0``, ``RUNNING -> FAILED:
    out of memory (exit code 1)`` (:func:`~danlu.cli.markup.after_state`)."""
    *parts, _ = _cells(event)
    reason = str(event.get("reason") or "")
    if event.get("old"):
        said = after_state(event.get("new"), reason)
    else:  # "submitted (PENDING)": the state is not the line's last word
        said = f": {reason}" if reason else ""
    return "  ".join(parts) + visible(said)


def print_line(event: dict[str, Any]) -> None:
    """Print ``event`` as its :func:`line`, never folded however narrow the output: ``danlu
    events -f | grep`` and ``danlu events | grep`` see each event whole."""
    console.print(escape(line(event)), highlight=False, soft_wrap=True)


def follow(
    client: Client, shown: Sequence[dict[str, Any]], query: dict[str, Any], reads: int = 0
) -> None:
    """Print ``shown``, then every new event matching ``query`` (``client.feed``'s filters)
    as it comes, reading every :data:`FOLLOW_SECONDS`; ``reads``: stop after that many reads
    (0: until Ctrl-C). Each event once, also one that commits after a higher id was shown
    (:class:`~danlu.cli.follow.GapCursor`); a control-plane restart is waited out
    (:func:`~danlu.client.rest.read_across_restart`)."""
    # time.sleep and time.monotonic through this module's ``time``: tests replace it
    first = min((row_id(e, "an event") for e in shown), default=1)
    gaps = GapCursor(first - 1, clock=time.monotonic)
    shown = gaps.fresh_ids(shown, "an event")
    done = 0
    while True:
        problems: list[str] = []
        for event in checked_events(list(shown), problems):
            print_line(event)
        report(problems)  # and goes on following
        if reads and done >= reads:
            return
        time.sleep(FOLLOW_SECONDS)
        found, _ = read_pages(lambda after: _page(client, after, query), gaps.after())
        shown = gaps.fresh_ids(found, "an event")
        done += 1


def _page(client: Client, after: int, query: dict[str, Any]) -> tuple[list[dict[str, Any]], int]:
    """The events after ``after`` matching ``query``, a page of them, and the highest id
    (asked again across a control-plane restart)."""
    found = read_across_restart(client, lambda: client.feed(after_id=after, limit=PAGE, **query))
    return found, max((row_id(e, "an event") for e in found), default=after)


def events(
    since: Annotated[
        str,
        typer.Option(
            "--since",
            help=f"From then on: {SINCE_FORMS}.",
        ),
    ] = "1h",
    project: Annotated[str | None, typer.Option("--project", help="Only this project.")] = None,
    user: Annotated[str | None, typer.Option("--user", help="Only this user's jobs.")] = None,
    state: Annotated[
        list[str] | None,
        typer.Option("--state", "-s", help="Only changes into this state (repeatable or a,b)."),
    ] = None,
    limit: Annotated[
        int,
        int_option("--limit", help="The newest N events.", example="100", low=1, high=1000),
    ] = 100,
    follow_on: Annotated[
        bool, typer.Option("--follow", "-f", help="Then print new events as they happen.")
    ] = False,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Job state changes across the cluster (your jobs', unless admin): when, which job,
    from which state to which, and why; the newest --limit since --since (into a pipe or a
    file, one change a line)."""
    if follow_on and json_out:
        raise fail(
            "--follow and --json cannot be combined: --json prints them once; leave out one of them"
        )
    try:
        start = parse_since(since, time.time(), "--since")
        for flag, value in (("--project", project), ("--user", user)):
            # an unset shell variable (--user "$U") matched no job: "no events", no word
            refuse_empty(flag, value, f"give a {flag[2:]}, or leave {flag} out for every one")
        # a state read as given ("" or "failed") was sent on for the server to refuse
        states = job_states(list(state or [])) or None
    except DanluError as exc:
        raise fail(exc) from None
    query: dict[str, Any] = {"since": start, "project": project, "user": user, "state": states}
    with connect(home, url, token) as client:
        try:
            found = client.feed(limit=limit, tail=True, **query)
            if json_out:
                print_json(found)
                return
            if follow_on:
                follow(client, found, query)
                return
        except DanluError as exc:
            raise fail(exc) from None
        except KeyboardInterrupt:
            raise typer.Exit(code=130) from None
    if not found:
        console.print("no events", highlight=False)
        return
    problems: list[str] = []
    checked = checked_events(found, problems)
    if not prints_whole(console):  # a terminal
        console.print(table(checked))
    else:  # a pipe or a file: one event a line, as -f prints them (a table folds its cells)
        for event in checked:
            print_line(event)
    fail_on(problems)


def register(app: typer.Typer) -> None:
    """Add ``events``."""
    app.command(name="events")(events)
