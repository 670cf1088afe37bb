"""Nodes over the REST client: ``danlu nodes``, and for admins ``danlu cordon / drain /
uncordon`` (now, or ``--at`` a later time: a maintenance window). Options, the client and
errors are those of :mod:`danlu.cli.jobs`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from danlu.cli import jobs as common
from danlu.cli import top as top_view
from danlu.cli.jobs import HomeOpt, JsonOpt, TokenOpt, UrlOpt
from danlu.core.errors import DanluError
from danlu.core.units import parse_time


def nodes(
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """List nodes and GPUs with allocated memory and the jobs on each GPU."""
    data = common.ask(home, url, token, lambda c: c.nodes())
    if json_out:
        common.print_json(data)
        return
    common.console.print(top_view.nodes_table(data))


NodeArg = Annotated[str, typer.Argument(help="Node name, as `danlu nodes` lists it.")]
ReasonOpt = Annotated[str, typer.Option("--reason", "-r", help="Why (shown by `danlu nodes`).")]
AtOpt = Annotated[
    str | None,
    typer.Option(
        "--at",
        help="Not now but then: 2026-12-01T02:00 (local time unless it has an offset) or a "
        "delay, +2h.",
    ),
]


GpuOpt = Annotated[
    int | None,
    typer.Option(
        "--gpu",
        min=0,
        help="Only this GPU of the node (its index, as `danlu nodes` lists it): the node's "
        "other GPUs take work as before.",
    ),
]


def _node_changed(data: dict[str, Any], json_out: bool, gpu: int | None = None) -> None:
    if json_out:
        common.print_json(data)
        return
    name = escape(str(data.get("name")))
    if gpu is not None:
        gpus: list[dict[str, Any]] = data.get("gpus") or []
        found = next((g for g in gpus if g.get("index") == gpu), {})
        reason = found.get("cordon_reason") or ""
        line = f"node [bold]{name}[/bold] GPU {gpu}: {found.get('state', '?')}"
        line += f" ({escape(reason)})" if reason else ""
        common.console.print(line, highlight=False)
        return
    reason = data.get("cordon_reason") or ""
    line = f"node [bold]{name}[/bold]: {data.get('state')}"
    line += f" ({escape(reason)})" if reason else ""
    if data.get("close_at") is not None:
        line += f"; {escape(top_view.scheduled(data))}"
    common.console.print(line, highlight=False)


def _close(
    node: str,
    reason: str,
    at: str | None,
    drain: bool,
    gpu: int | None,
    json_out: bool,
    home: Path | None,
    url: str | None,
    token: str | None,
) -> None:
    """Cordon (``drain``: drain) ``node`` (``gpu``: its GPU at that index) now, or ``at`` a
    later time (``--at``)."""
    try:
        when = None if at is None else parse_time(at, time.time(), "--at")
    except DanluError as exc:
        raise common.fail(exc) from None
    data = common.ask(
        home, url, token, lambda c: c.cordon(node, reason, drain=drain, at=when, gpu=gpu)
    )
    _node_changed(data, json_out, gpu)


def cordon(
    node: NodeArg,
    reason: ReasonOpt = "",
    at: AtOpt = None,
    gpu: GpuOpt = None,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Close a node (or with --gpu one of its GPUs) to new work (admin); the jobs on it run
    on. Undo with `danlu uncordon`."""
    _close(node, reason, at, False, gpu, json_out, home, url, token)


def drain(
    node: NodeArg,
    reason: ReasonOpt = "",
    at: AtOpt = None,
    gpu: GpuOpt = None,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Cordon a node (or with --gpu one of its GPUs) and preempt its jobs by checkpoint
    (admin): they resume elsewhere; a job that is not preemptible runs to its end. With
    --at, at that time (a maintenance window). Undo with `danlu uncordon`."""
    _close(node, reason, at, True, gpu, json_out, home, url, token)


def uncordon(
    node: NodeArg,
    gpu: GpuOpt = None,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Open a cordoned or drained node to new work again, and drop a cordon or drain
    scheduled for it (admin); its GPUs cordoned on their own stay so: open one with --gpu."""
    data = common.ask(home, url, token, lambda c: c.uncordon(node, gpu))
    _node_changed(data, json_out, gpu)


def register(app: typer.Typer) -> None:
    """Add ``nodes``, ``cordon``, ``drain`` and ``uncordon``."""
    for command in (nodes, cordon, drain, uncordon):
        app.command(name=command.__name__)(command)
