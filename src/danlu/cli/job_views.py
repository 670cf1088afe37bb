"""The commands that read and change nothing: ``danlu ls`` and ``danlu show`` (jobs listed,
one job shown with its recent events), ``danlu logs`` (a job's output), ``danlu why`` and
``danlu top`` (a live view of the cluster). Output goes through
:data:`danlu.cli.jobs.console` (tests replace it), the client through
:func:`danlu.cli.jobs.connect`."""

from __future__ import annotations

import shlex
import time
from collections import deque
from typing import Annotated, Any

import typer
from rich.console import RenderableType
from rich.live import Live
from rich.table import Table

from danlu.cli import jobs as common
from danlu.cli import top as top_view
from danlu.cli import waiting
from danlu.cli.fitted_table import print_whole
from danlu.cli.job_table import job_state_text
from danlu.cli.log_attempts import attempt_marks
from danlu.cli.markup import after_state, as_text, reason_after_state
from danlu.cli.options import (
    HomeOpt,
    JobArg,
    JsonOpt,
    TokenOpt,
    UrlOpt,
    fail,
    float_option,
    int_option,
    job_states,
    refuse_empty,
)
from danlu.cli.output import PIPE_CLOSED, quiet_stdout, write_bytes
from danlu.cli.reply_fields import checked_events, checked_job, checked_jobs
from danlu.cli.sweep_hint import JOB_ID_TEXT, sweep_hint
from danlu.client import Client, NotFoundError, ServerError
from danlu.client.rest import read_across_restart
from danlu.core.errors import DanluError, SpecError
from danlu.core.state import JobState
from danlu.core.units import SINCE_FORMS, format_bytes, format_duration, format_energy, parse_since


def ls(
    ctx: typer.Context,
    state: Annotated[
        list[str] | None,
        typer.Option("--state", "-s", help="Only jobs in this state (repeatable or a,b)."),
    ] = None,
    project: Annotated[str | None, typer.Option("--project", help="Only this project.")] = None,
    user: Annotated[str | None, typer.Option("--user", help="Only this user's jobs.")] = None,
    all_: Annotated[bool, typer.Option("--all", "-a", help="Every job, not only the newest.")] = (
        False
    ),
    limit: Annotated[
        int,
        int_option("--limit", help="Newest N jobs.", example="100", low=1, high=1000),
    ] = 100,
    since: Annotated[
        str | None,
        typer.Option("--since", help=f"Submitted since then: {SINCE_FORMS}."),
    ] = None,
    name: Annotated[
        str | None, typer.Option("--name", help="Named like this: train-*, run-? (quote it).")
    ] = None,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """List jobs, newest first."""
    source = ctx.get_parameter_source("limit")
    if all_ and source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP"):
        # --all lists every job: a --limit beside it was dropped without a word
        raise common.fail("--limit: --all lists every job; give one of --all and --limit, not both")
    try:
        for flag, value in (("--project", project), ("--user", user), ("--name", name)):
            # an unset shell variable (--project "$P") matched no job: "no jobs", no word
            refuse_empty(flag, value, f"give a {flag[2:]}, or leave {flag} out to list every one")
        states = job_states(list(state or []))
        start = None if since is None else parse_since(since, time.time(), "--since")
    except SpecError as exc:
        raise common.fail(exc) from None
    with common.connect(home, url, token) as client:
        try:
            if all_:
                found = client.iter_jobs(states, project=project, user=user, since=start, name=name)
                jobs = list(found)
            else:
                jobs = client.list_jobs(
                    states, project=project, user=user, limit=limit, since=start, name=name
                )
        except DanluError as exc:
            raise common.fail(exc) from None
    if json_out:
        common.print_json(jobs)
        return
    if not jobs:
        common.console.print("no jobs")
        return
    problems: list[str] = []
    shown = top_view.jobs_table(checked_jobs(jobs, problems), width=common.console.width)
    print_whole(common.console, shown)  # a pipe, a file: a row a line, none folded
    common.fail_on(problems)


SHOWN_EVENTS = 100
"""How many of a job's events ``danlu show --json`` holds (the table shows the last 20)."""


def recent_events(client: Client, job: str, keep: int = SHOWN_EVENTS) -> list[dict[str, Any]]:
    """The job's ``keep`` most recent events, oldest first: the server lists them from the
    oldest, so they are read a page at a time after the last one seen."""
    kept: deque[dict[str, Any]] = deque(maxlen=keep)
    after = 0
    while True:
        page = client.events(job, after_id=after, limit=EVENTS_PAGE)
        kept.extend(page)
        if len(page) < EVENTS_PAGE:
            return list(kept)
        last = page[-1].get("id")
        if not isinstance(last, int) or isinstance(last, bool):  # no cursor to read on from
            raise ServerError(
                200,
                "http",
                None,
                f"server sent {last!r} for field id of an event of job "
                f"{job}, expected a whole number: its later events cannot be read",
            )
        if last <= after:  # the server did not read on from ``after``: it would loop forever
            raise ServerError(
                200,
                "http",
                None,
                f"server answered events of job {job} after id {after} with id {last}, not "
                "later ones: its later events cannot be read",
            )
        after = last


EVENTS_PAGE = 1000
"""Events read a request (the server's most)."""


def show(
    job: JobArg,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Show one job, with its allocation and recent events."""
    with common.connect(home, url, token) as client:
        try:
            try:
                data = client.get_job(job)
            except NotFoundError as exc:
                raise common.fail(f"{exc}{by_name_hint(job)}{sweep_hint(client, job)}") from None
            events = recent_events(client, str(data.get("id", job)))
        except DanluError as exc:
            raise common.fail(exc) from None
    if json_out:
        common.print_json(data | {"events": events})
        return
    problems: list[str] = []
    _show_job(checked_job(data, problems), checked_events(events, problems))
    common.fail_on(problems)


def by_name_hint(job: str) -> str:
    """What follows a not-found error of ``danlu show JOB`` when ``JOB`` is no id (not hex
    digits: a job's name, ``danlu show train``): ``; `danlu ls --name train` lists jobs by
    name``, the name quoted for a shell; nothing for text an id could be."""
    if JOB_ID_TEXT.fullmatch(job):
        return ""
    return f"; `danlu ls --name {shlex.quote(job)}` lists jobs by name"


def _show_job(data: dict[str, Any], events: list[dict[str, Any]]) -> None:
    """``danlu show``'s tables of a job and its last events (fields of the type the API
    gives them, :mod:`danlu.cli.reply_fields`)."""
    table = Table(show_header=False, box=None, padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    for key in ("id", "name", "project", "user", "priority"):
        table.add_row(key, as_text(data.get(key)))
    table.add_row("state", job_state_text(data))
    for key in ("restarts", "preemptions", "exit_code", "batch_size", "checkpoint_step"):
        if data.get(key) is not None:
            table.add_row(key, as_text(data[key]))
    table.add_row("gpus", as_text(top_view.gpus_of(data)))
    if data.get("time_limit"):
        table.add_row(
            "time_limit",
            f"{format_duration(float(data['time_limit']))} "
            f"({format_duration(float(data.get('run_time') or 0))} used by runs ended)",
        )
    if data.get("energy_joules") is not None:
        table.add_row("energy", format_energy(float(data["energy_joules"])))
    for key in ("submitted_at", "started_at", "finished_at", "deadline_at", "held_at", "purged_at"):
        if data.get(key):
            table.add_row(key, time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(data[key])))
    for a in data.get("allocation") or []:
        share = f"{(a.get('milli') or 0) / 10:.0f}% compute, {format_bytes(a.get('memory') or 0)}"
        table.add_row("allocation", as_text(f"{a.get('node')} gpu {a.get('gpu')}: {share}"))
    if data.get("pending_reason"):
        table.add_row("pending", as_text(data["pending_reason"]))
    command = (data.get("spec") or {}).get("command")
    if command:
        table.add_row("command", as_text(shlex.join(str(arg) for arg in command)))
    print_whole(common.console, table)
    if events:
        ev = Table(title="events", title_justify="left")
        for col in ("time", "from", "to", "reason"):
            ev.add_column(col)
        for e in events[-20:]:
            stamp = e.get("time")  # none, or one left out as not a time: no time shown
            when = "-" if stamp is None else time.strftime("%H:%M:%S", time.localtime(stamp))
            # the state once: CANCELLED beside "by alice", not "cancelled by alice"
            reason = reason_after_state(e.get("new"), e.get("reason")) if e.get("old") else None
            ev.add_row(
                when,
                as_text(e.get("old") or "-"),
                as_text(e.get("new")),
                as_text((e.get("reason") or "") if reason is None else reason),
            )
        print_whole(common.console, ev)


def logs(
    job: JobArg,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Stream until the job finishes.")
    ] = False,
    separators: Annotated[
        bool | None,
        typer.Option(
            "--separators/--no-separators",
            help="Put a line where each attempt (run) begins: '── attempt 2 (started ...) ──'. "
            "Default: when stdout is a terminal.",
        ),
    ] = None,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Print a job's output (stdout and stderr), its bytes as they are; on a terminal (or
    with --separators) with a line where each attempt (run) after the first begins, as the
    server's executor recorded them. With --follow, a run that starts while following gets
    its line too; the exit status is then danlu wait's: 0 when the job SUCCEEDED, 1 when it
    FAILED or was CANCELLED (said on stderr), 2 for an error (output that cannot be written,
    a full disk, too); 141 once the reader of the output has gone (`| head`), as a shell's
    SIGPIPE."""
    with common.connect(home, url, token) as client:
        try:
            marks = attempt_marks(client, job, write_bytes, separators, common.console.is_terminal)
            if not follow:
                for raw in client.read_log_bytes(job):
                    (write_bytes if marks is None else marks.write)(raw)
                if marks is not None:
                    marks.finish()
                return
            for chunk in client.follow_log_bytes(job):
                (write_bytes if marks is None else marks.follow)(chunk)
            if marks is not None:
                marks.finish()
            ended = client.get_job(job)
        except NotFoundError as exc:
            raise fail(f"{exc}{sweep_hint(client, job)}") from None
        except DanluError as exc:
            raise fail(exc) from None
        except KeyboardInterrupt:
            raise typer.Exit(code=waiting.INTERRUPTED) from None
        except BrokenPipeError:  # not 1, which says the job FAILED
            quiet_stdout()
            raise typer.Exit(code=PIPE_CLOSED) from None
        except OSError as exc:  # only stdout's writes raise it (the client's are DanluError)
            quiet_stdout()
            raise fail(f"cannot write the output: {exc.strerror or exc}") from None
    if ended.get("state") != JobState.SUCCEEDED.value:
        status = waiting.end_status(ended)
        common.err.print(
            f"job {as_text(ended.get('id', job))} ended {as_text(ended.get('state'))}{status}",
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(code=waiting.NOT_SUCCEEDED)


def why(
    job: JobArg,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Explain why a job is pending (or what state it is in)."""
    data = common.ask_job(home, url, token, job, lambda c: c.why(job))
    if json_out:
        common.print_json(data)
        return
    # the state once: an ended job's reason says it again ("failed: out of memory ...")
    said = after_state(data.get("state"), data.get("reason"))
    common.console.print(as_text(f"{data.get('id')} {data.get('state')}{said}"), highlight=False)


def top(
    once: Annotated[bool, typer.Option("--once", help="Print one frame and exit.")] = False,
    interval: Annotated[
        float,
        float_option(
            "--interval", help="Seconds between refreshes.", example="2", low=0.1, high=3600.0
        ),
    ] = 1.0,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """A live view of nodes, GPUs and jobs, as many as the terminal holds (Ctrl-C to
    quit); with --once, one frame with every GPU. Into a pipe or a file, a frame with every
    GPU each --interval, one after another (as ``top -b``)."""
    with common.connect(home, url, token) as client:
        try:
            if once:
                problems: list[str] = []
                print_whole(
                    common.console,
                    top_view.frame(client, width=common.console.width, problems=problems),
                )
                common.fail_on(problems)
                return
            while not common.console.is_terminal:  # Live would show nothing there until Ctrl-C
                frame = read_across_restart(
                    client, lambda: top_view.frame(client, width=common.console.width)
                )
                print_whole(common.console, frame)
                common.console.file.flush()
                time.sleep(interval)

            def live_frame() -> RenderableType:
                # fitted to the terminal (Live shows no more than its height); a control-plane
                # restart is waited out, the last frame on screen
                return read_across_restart(
                    client,
                    lambda: top_view.frame(
                        client, width=common.console.width, height=common.console.height
                    ),
                )

            with Live(live_frame(), console=common.console, screen=False) as live:
                while True:
                    time.sleep(interval)
                    live.update(live_frame())
        except DanluError as exc:
            raise fail(exc) from None
        except KeyboardInterrupt:
            return
        except BrokenPipeError:  # `danlu top | head`: its reader has gone
            quiet_stdout()
            raise typer.Exit(code=PIPE_CLOSED) from None
