"""Hyper-parameter sweeps over the REST client: ``danlu sweep submit / ls / show / cancel``.

A sweep spec (:mod:`danlu.core.sweep`) names a trial job spec, the parameters to search and
the metric to optimise; the control plane submits its trials as jobs and stops the ones the
median rule rules out. Options, the client and errors are those of :mod:`danlu.cli.jobs`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Group, RenderableType
from rich.text import Text

from danlu.cli import jobs as common
from danlu.cli.markup import after_state, as_text, note_lines
from danlu.cli.options import (
    HomeOpt,
    JsonOpt,
    TokenOpt,
    UrlOpt,
    empty_error,
    int_option,
    load_spec_file,
    path_of,
)
from danlu.cli.output import stdout_written
from danlu.cli.reply_fields import SWEEP
from danlu.cli.reply_views import show_data
from danlu.cli.spec_flags import flag_error
from danlu.cli.sweep_hint import JOB_ID_TEXT
from danlu.cli.titled_table import TitledTable, titled_table
from danlu.client import Client
from danlu.client.errors import InvalidRequestError, NotFoundError
from danlu.core.errors import DanluError, SpecError
from danlu.core.state import TERMINAL_STATES
from danlu.core.sweep import parse_sweep
from danlu.core.values import visible

sweep_app = typer.Typer(
    rich_markup_mode="markdown",  # as the main app (danlu.cli.main)
    help="Hyper-parameter sweeps run as trial jobs.",
    no_args_is_help=True,
)
SweepArg = Annotated[str, typer.Argument(help="The sweep's id (or a unique prefix).")]
SWEEP_SPEC_FIX = "give the sweep spec file (YAML or JSON)"
"""What to give instead of a SPEC refused (empty, or a named pipe)."""


@sweep_app.command("submit")
def sweep_submit(
    spec: Annotated[
        Path,
        typer.Argument(
            help="Sweep spec file (YAML or JSON).",
            parser=path_of("SPEC", SWEEP_SPEC_FIX),
        ),
    ],
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Validate a sweep spec locally, then submit it: its first trials are queued at once."""
    try:
        data = load_spec_file(spec, SWEEP_SPEC_FIX, "sweep spec")
        parse_sweep(data)
    except DanluError as exc:
        raise common.fail(exc, spec) from None
    out = common.ask(home, url, token, lambda c: c.submit_sweep(data))
    made = visible(str(out.get("id")))
    with stdout_written(f"sweep {made} was submitted all the same (danlu sweep show {made})"):
        show_data(out, json_out, lambda sweep: _with_notes(_line(sweep), sweep))


@sweep_app.command("ls")
def sweep_ls(
    state: Annotated[
        list[str] | None,
        typer.Option(
            "--state",
            "-s",
            help="Only sweeps in this state: RUNNING, DONE, CANCELLED or FAILED "
            "(repeatable or a,b).",
        ),
    ] = None,
    limit: Annotated[
        int,
        int_option("--limit", help="Newest N sweeps.", example="100", low=1, high=1000),
    ] = 100,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Sweeps, newest first (an admin sees everyone's); with --state, those in that state."""
    try:
        states = sweep_states(list(state or []))
    except SpecError as exc:
        raise common.fail(exc) from None
    rows = common.ask(home, url, token, lambda c: _listed(c, limit, states))
    show_data(rows, json_out, _sweeps_table, SWEEP)


LS_QUERY_FLAGS = {"state": "--state", "limit": "--limit"}
"""The ``danlu sweep ls`` flag that sent each query field of ``GET /sweeps``."""


def _listed(client: Client, limit: int, states: list[str] | None) -> list[dict[str, Any]]:
    """``GET /sweeps``; the server's refusal of a query field (``state: 'BOGUS' is not a
    sweep state; use one of ...``) named by the flag that sent it (``--state: ...``), its
    words (the states it takes) the server's."""
    try:
        return client.sweeps(limit, states)
    except InvalidRequestError as exc:
        flag = LS_QUERY_FLAGS.get(exc.field or "")
        if flag is None:
            raise
        raise flag_error(exc.field or "", flag, exc.message) from None


def sweep_states(given: list[str]) -> list[str] | None:
    """``--state`` values, repeated or comma-separated (None for none given); an empty one
    (``--state "$S"`` with the variable unset, or ``RUNNING,``) is a :class:`SpecError`
    naming ``--state``, before anything is sent (it was sent on as a state named ``''``,
    which a server taking it as no filter answered with every sweep; danlu's with an error
    naming its query field, not the flag). Other names are the server's to judge."""
    states = [part.strip() for value in given for part in value.split(",")]
    if "" in states:
        raise empty_error(
            "--state",
            "give a sweep state (RUNNING, DONE, CANCELLED or FAILED), or leave --state out "
            "to list every sweep",
        )
    return states or None


def _sweeps_table(sweeps: list[dict[str, Any]]) -> TitledTable:
    """``danlu sweep ls``'s table (server text as text, :func:`~danlu.cli.markup.as_text`):
    its text left-aligned, the trials' counts right, as ``danlu ls`` aligns its columns."""
    columns = ("ID", "NAME", "USER", "STATE", "TRIALS", "METRIC")
    rows = (
        (
            as_text(s.get("id")),
            as_text(s.get("name")),
            as_text(s.get("user")),
            as_text(s.get("state")),
            f"{s.get('submitted')}/{s.get('total')}",
            _objective(s),
        )
        for s in sweeps
    )
    return titled_table("sweeps", columns, rows, numbers=("TRIALS",))


@sweep_app.command("show")
def sweep_show(
    sweep: SweepArg,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """A sweep's trials, best first: parameters, state and best value of the metric; then
    what its submission told of every trial (``note:`` lines), if anything."""

    def read(client: Client) -> tuple[dict[str, Any], str | None]:
        try:
            shown = client.sweep(sweep)
        except NotFoundError as exc:  # a sweep's name given for its id: say where names are
            hint = "" if JOB_ID_TEXT.fullmatch(sweep) else "; `danlu sweep ls` lists sweeps by name"
            raise common.fail(f"{exc}{hint}") from None
        return shown, None if json_out else unreported_metric(client, shown)

    data, unreported = common.ask(home, url, token, read)
    show_data(data, json_out, lambda shown: _with_notes(_trials(shown), shown, unreported), SWEEP)


REPORTED_SHOWN = 8
"""The most of the trials' reported fields an :func:`unreported_metric` note names."""

RECORD_KEYS = frozenset({"step", "time", "attempt", "rollback", "superseded"})
"""The fields of a metric record that are no metric of the job's."""


def unreported_metric(client: Client, data: dict[str, Any]) -> str | None:
    """A ``note:`` line for a sweep whose metric none of its trials has reported, once one
    has ended (or reported something else), naming the numeric fields its trials do report,
    read from the latest records of up to 3 of them; None otherwise. Such a sweep (``metric:
    {name: accuracy}`` for trials that report ``loss``) ran every trial to its end, never
    stopped one early, and ended DONE with no best trial and not a word of why."""
    metric = data.get("metric")
    listed = data.get("trials")  # its types are checked where it is shown (SWEEP)
    trials = [t for t in listed if isinstance(t, dict)] if isinstance(listed, list) else []
    if not isinstance(metric, str) or not trials:
        return None
    if any(t.get("step") is not None or t.get("best") is not None for t in trials):
        return None  # some trial reported it (a NaN report has a step too)
    reported: dict[str, None] = {}
    for trial in trials[:3]:
        job = trial.get("job_id")
        if not isinstance(job, str):
            continue
        try:
            records = client.metrics(job, limit=20, tail=True)
        except DanluError:
            continue  # a trial deleted by the retention, say: the note names no fields
        for record in records:
            for key, value in record.items():
                number = isinstance(value, int | float) and not isinstance(value, bool)
                if number and key not in RECORD_KEYS:
                    reported.setdefault(key)
    ended = any(isinstance(t.get("state"), str) and t["state"] in TERMINAL_STATES for t in trials)
    if not reported and not ended:
        return None  # nothing reported yet: the trials may not have got that far
    named = as_text(metric)
    if not reported:
        return (
            f"note: no trial has reported {named}, nor any other metric: check that the "
            "trials report it (danlu metrics JOB)"
        )
    fields = list(reported)
    named_fields = ", ".join(as_text(key) for key in fields[:REPORTED_SHOWN])
    more = f" and {len(fields) - REPORTED_SHOWN} more" if len(fields) > REPORTED_SHOWN else ""
    return (
        f"note: no trial has reported {named}; they report {named_fields}{more}: metric.name "
        "must name one of them"
    )


@sweep_app.command("cancel")
def sweep_cancel(
    sweep: SweepArg,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Cancel a sweep and its unfinished trials (finished ones keep their results)."""
    data = common.ask(home, url, token, lambda c: c.cancel_sweep(sweep))
    show_data(data, json_out, _line, SWEEP)


def _objective(sweep: dict[str, Any]) -> str:
    """The METRIC column: the metric and its goal, ``array`` for a job array, else ``-``."""
    if sweep.get("metric") is None:
        return "array" if sweep.get("array") else "-"
    return f"{as_text(sweep['metric'])} ({as_text(sweep.get('goal'))})"


def _line(data: dict[str, Any]) -> str:
    reason = as_text(after_state(data.get("state"), data.get("reason")))
    kind, unit = ("array", "tasks") if data.get("array") else ("sweep", "trials")
    return (
        f"{kind} {as_text(data.get('id'))} ({as_text(data.get('name'))}): "
        f"{as_text(data.get('state'))}{reason}; "
        f"{as_text(data.get('submitted'))} of {as_text(data.get('total'))} {unit} submitted"
    )


def _with_notes(
    shown: RenderableType, data: dict[str, Any], unreported: str | None = None
) -> RenderableType:
    """``shown`` (a sweep's line or table), then a ``note:`` line for each of its ``notes``
    (:func:`~danlu.cli.markup.note_lines`): what the submission told of every trial (a
    memory estimate that was not possible, the model family inferred); then ``unreported``,
    the note of a metric no trial reports (:func:`unreported_metric`), if any."""
    notes = note_lines(data.get("notes")) + ([unreported] if unreported else [])
    if not notes:
        return shown
    first = Text.from_markup(shown) if isinstance(shown, str) else shown  # not highlighted
    return Group(first, *(Text.from_markup(note) for note in notes))


def _trials(data: dict[str, Any]) -> Any:
    """A sweep's trials, best first, as a table under its line; of a sweep with no metric
    (a job array's tasks, a ``random`` or ``grid`` sweep that only runs its trials) without
    the metric and step columns, which could only say ``-`` (an array's first column is
    ``TASK``: ``number, job, state, index``, as docs/sweeps.md shows it)."""
    sign = -1.0 if data.get("goal") == "maximize" else 1.0
    trials = sorted(
        data.get("trials") or [],
        key=lambda t: (t.get("best") is None, sign * (t.get("best") or 0.0), t.get("trial") or 0),
    )
    title = _line(data)
    if data.get("best"):
        best = data["best"]
        title += f"; best: trial {best.get('trial')} ({as_text(best.get('job_id'))})"
    metric = data.get("metric")
    first = "TASK" if data.get("array") else "TRIAL"
    rows = [
        [
            str(t.get("trial")),
            as_text(t.get("job_id")),
            as_text(t.get("state")) + (" (stopped early)" if t.get("stopped_early") else ""),
            "-" if t.get("best") is None else f"{t['best']:.6g}",
            "-" if t.get("step") is None else str(t["step"]),
            as_text(", ".join(f"{k}={_value(v)}" for k, v in _parameters(t))),
        ]
        for t in trials
    ]
    if metric is None:  # no metric's column, nor the step's
        shown = (first, "JOB", "STATE", "PARAMETERS")
        return titled_table(title, shown, ([*r[:3], r[5]] for r in rows), numbers=())
    columns = (first, "JOB", "STATE", as_text(metric), "STEP", "PARAMETERS")
    return titled_table(title, columns, rows, numbers=columns[3:5])


def _parameters(trial: dict[str, Any]) -> list[tuple[str, Any]]:
    return list((trial.get("parameters") or {}).items())


def _value(value: Any) -> str:
    """A parameter's value as the spec and ``DANLU_HPARAMS`` write it: a boolean ``true`` or
    ``false`` (it read ``True``, Python's word, which no spec or trial sees), a float to 4
    significant digits."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def register(app: typer.Typer) -> None:
    """Add the ``sweep`` group."""
    app.add_typer(sweep_app, name="sweep")
