"""Hyper-parameter sweeps over the REST client: ``danlu sweep submit / ls / show / cancel``.

A sweep spec (:mod:`danlu.core.sweep`) names a trial job spec, the parameters to search and
the metric to optimise; the control plane submits its trials as jobs and stops the ones the
median rule rules out. Options, the client and errors are those of :mod:`danlu.cli.jobs`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from danlu.cli import jobs as common
from danlu.cli.admin import show_data, titled_table
from danlu.cli.markup import as_text
from danlu.cli.options import HomeOpt, JsonOpt, TokenOpt, UrlOpt
from danlu.core.errors import DanluError
from danlu.core.spec import load_spec_data
from danlu.core.sweep import parse_sweep

sweep_app = typer.Typer(
    rich_markup_mode="markdown",  # as the main app (danlu.cli.main)
    help="Hyper-parameter sweeps run as trial jobs.",
    no_args_is_help=True,
)
SweepArg = Annotated[str, typer.Argument(help="The sweep's id.")]


@sweep_app.command("submit")
def sweep_submit(
    spec: Annotated[Path, typer.Argument(help="Sweep spec file (YAML or JSON).")],
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Validate a sweep spec locally, then submit it: its first trials are queued at once."""
    try:
        data = load_spec_data(spec)
        parse_sweep(data)
    except DanluError as exc:
        raise common.fail(f"{spec}: {exc}") from None
    out = common.ask(home, url, token, lambda c: c.submit_sweep(data))
    show_data(out, json_out, _line)


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
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000)] = 100,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Sweeps, newest first (an admin sees everyone's); with --state, those in that state."""
    states = [part.strip() for value in state or [] for part in value.split(",")] or None
    rows = common.ask(home, url, token, lambda c: c.sweeps(limit, states))
    columns = ("ID", "NAME", "USER", "STATE", "TRIALS", "METRIC")
    table = titled_table(
        "sweeps",
        columns,
        (
            (
                s["id"],
                as_text(s["name"]),
                as_text(s["user"]),
                s["state"],
                f"{s['submitted']}/{s['total']}",
                _objective(s),
            )
            for s in rows
        ),
    )
    show_data(rows, json_out, lambda _: table)


@sweep_app.command("show")
def sweep_show(
    sweep: SweepArg,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """A sweep's trials, best first: parameters, state and best value of the metric."""
    data = common.ask(home, url, token, lambda c: c.sweep(sweep))
    show_data(data, json_out, _trials)


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
    show_data(data, json_out, _line)


def _objective(sweep: dict[str, Any]) -> str:
    """The METRIC column: the metric and its goal, ``array`` for a job array, else ``-``."""
    if sweep.get("metric") is None:
        return "array" if sweep.get("array") else "-"
    return f"{as_text(sweep['metric'])} ({sweep['goal']})"


def _line(data: dict[str, Any]) -> str:
    reason = f": {as_text(data['reason'])}" if data.get("reason") else ""
    kind, unit = ("array", "tasks") if data.get("array") else ("sweep", "trials")
    return (
        f"{kind} {data['id']} ({as_text(data['name'])}): {data['state']}{reason}; "
        f"{data['submitted']} of {data['total']} {unit} submitted"
    )


def _trials(data: dict[str, Any]) -> Any:
    sign = -1.0 if data["goal"] == "maximize" else 1.0
    trials = sorted(
        data.get("trials") or [],
        key=lambda t: (t["best"] is None, sign * (t["best"] or 0.0), t["trial"]),
    )
    title = _line(data)
    if data.get("best"):
        title += f"; best: trial {data['best']['trial']} ({data['best']['job_id']})"
    metric = "BEST" if data.get("metric") is None else as_text(data["metric"])
    return titled_table(
        title,
        ("TRIAL", "JOB", "STATE", metric, "STEP", "PARAMETERS"),
        (
            (
                str(t["trial"]),
                t["job_id"],
                t["state"] + (" (stopped early)" if t.get("stopped_early") else ""),
                "-" if t["best"] is None else f"{t['best']:.6g}",
                "-" if t["step"] is None else str(t["step"]),
                as_text(", ".join(f"{k}={_value(v)}" for k, v in t["parameters"].items())),
            )
            for t in trials
        ),
    )


def _value(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def register(app: typer.Typer) -> None:
    """Add the ``sweep`` group."""
    app.add_typer(sweep_app, name="sweep")
