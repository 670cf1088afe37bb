"""Nodes over the REST client: ``danlu nodes`` (``danlu node ls``), ``danlu node show NAME``
(a node's record and history), and for admins ``danlu cordon / drain / uncordon`` (now, or
``--at`` a later time, and ``--until`` a time it ends: a maintenance window). Options, the
client and errors are those of :mod:`danlu.cli.jobs`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Group, RenderableType
from rich.text import Text

from danlu.cli import jobs as common
from danlu.cli import top as top_view
from danlu.cli import waiting
from danlu.cli.fitted_table import print_whole
from danlu.cli.history_table import KEPT_EVENTS, SHOWN_EVENTS, events_table
from danlu.cli.markup import as_text
from danlu.cli.node_tables import close_end, node_record
from danlu.cli.options import HomeOpt, JsonOpt, TokenOpt, UrlOpt, int_option
from danlu.cli.reply_fields import USER_EVENT_FIELDS, Record, checked_nodes
from danlu.client.errors import NotFoundError
from danlu.client.rest import read_across_restart
from danlu.core.errors import DanluError, SpecError
from danlu.core.units import parse_time
from danlu.core.values import visible


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
    problems: list[str] = []
    print_whole(common.console, top_view.nodes_table(checked_nodes(data, problems)))
    common.fail_on(problems)


NodeArg = Annotated[str, typer.Argument(help="Node name, as `danlu nodes` lists it.")]

node_app = typer.Typer(
    rich_markup_mode="markdown",  # as the main app (danlu.cli.main)
    help="Nodes: the inventory, and one node's record and history.",
    no_args_is_help=True,
)
node_app.command("ls")(nodes)

NODE_EVENT = Record(USER_EVENT_FIELDS, "node event", "id")
"""A node event's fields that ``danlu node show`` renders (those of a user event)."""


@node_app.command("show")
def node_show(
    node: NodeArg,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Show one node: its state (since when, why, until when), GPUs, rack and jobs, and
    what happened to it lately, each by whom ('-': the control plane itself): joined, lost,
    back, GPUs changed, changed (rack, CPUs, memory), cordoned, drained, scheduled,
    uncordoned. A node gone from the inventory shows its history. --json: the node (null
    when gone) with its last 100 events."""
    data: dict[str, Any] | None = None
    gone: NotFoundError | None = None
    with common.connect(home, url, token) as client:
        try:
            try:
                data = client.node(node)
            except NotFoundError as exc:
                if exc.type == "http":  # no such route: a server from before node histories
                    raise
                gone = exc  # its history may tell where it went
            events = client.node_events(node, limit=KEPT_EVENTS, tail=True)
        except DanluError as exc:
            raise common.fail(gone or exc) from None
    if json_out:
        common.print_json({"node": data, "events": events})
        return
    problems: list[str] = []
    shown = [NODE_EVENT.check(e, problems) for e in events[-SHOWN_EVENTS:]]
    head: RenderableType
    if data is None:
        head = Text(visible(f"node {node}: not in the inventory now"))
    else:
        head = node_record(checked_nodes([data], problems)[0])
    print_whole(common.console, Group(head, *events_table(shown, len(events))))
    common.fail_on(problems)


ReasonOpt = Annotated[str, typer.Option("--reason", "-r", help="Why (shown by `danlu nodes`).")]
AtOpt = Annotated[
    str | None,
    typer.Option(
        "--at",
        help="Not now but then: 2026-12-01T02:00 (local time unless it has an offset), a "
        "time of day, 02:00 (the next one), or a delay, +2h.",
    ),
]
UntilOpt = Annotated[
    str | None,
    typer.Option(
        "--until",
        help="Then it ends: the node is uncordoned (the end of a maintenance window). A time "
        "as --at takes; a time of day or a delay counts from --at when given (--at 02:00 "
        "--until +4h). Left out: until `danlu uncordon`.",
    ),
]


GpuOpt = Annotated[
    int | None,
    int_option(
        "--gpu",
        example="0",
        low=0,
        help="Only this GPU of the node (its index, as `danlu nodes` lists it): the node's "
        "other GPUs take work as before.",
    ),
]


def _node_changed(data: dict[str, Any], json_out: bool, gpu: int | None = None) -> None:
    """The node ``data`` (``cordon``, ``drain``, ``uncordon``'s reply) as one line, or GPU
    ``gpu`` of it; its fields of the type the API gives them (the others named as errors,
    exit 2: :mod:`danlu.cli.reply_fields`)."""
    if json_out:
        common.print_json(data)
        return
    problems: list[str] = []
    data = checked_nodes([data], problems)[0]
    if gpu is not None:
        gpus: list[dict[str, Any]] = data.get("gpus") or []
        found = next((g for g in gpus if g.get("index") == gpu), {})
        rest = f" GPU {gpu}: {found.get('state') or '?'}" + _reason(found)
    else:
        rest = f": {data.get('state') or '?'}" + _reason(data)
        if data.get("open_at") is not None:
            rest += f"; {close_end(data)}"
        if data.get("close_at") is not None:
            rest += f"; {top_view.scheduled(data)}"
    # names and reasons are text, neither Rich markup nor control characters (a reason's
    # escape sequence or line break is shown as \x1b, \n, never acted on); the text after
    # the name is escaped as one string: escaped apart, a cordon reason's "[/ops" and a
    # scheduled drain's reason "x]" made one tag between them (a MarkupError, or both gone)
    line = f"node [bold]{as_text(data.get('name'))}[/bold]{as_text(rest)}"
    common.console.print(line, highlight=False)
    common.fail_on(problems)


def _reason(found: dict[str, Any]) -> str:
    """`` (REASON)`` of a node or GPU cordoned for one (plain text), else nothing."""
    reason = found.get("cordon_reason")
    return f" ({reason})" if reason else ""


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
    until: str | None = None,
) -> None:
    """Cordon (``drain``: drain) ``node`` (``gpu``: its GPU at that index) now, or ``at`` a
    later time (``--at``), until ``until`` (``--until``: :func:`window_end`)."""
    try:
        now = time.time()
        when = None if at is None else parse_time(at, now, "--at")
        ends = None if until is None else window_end(until, when, gpu, now)
    except DanluError as exc:
        raise common.fail(exc) from None
    data = common.ask(
        home,
        url,
        token,
        lambda c: c.cordon(node, reason, drain=drain, at=when, gpu=gpu, until=ends),
    )
    _node_changed(data, json_out, gpu)


def window_end(until: str, at: float | None, gpu: int | None, now: float) -> float:
    """``--until``'s time: a time of day or a delay counts from ``at`` (``--at``'s time)
    when that is later than ``now``, else from now. A :class:`SpecError` naming ``--until``
    for one GPU's close (it has no end), or a time not later than the window's start (the
    server checks it again, by its own clock)."""
    if gpu is not None:
        raise SpecError("--until", "a cordon or drain of one GPU has no end; leave out --until")
    starts = at if at is not None and at > now else now
    ends = parse_time(until, starts, "--until")
    if ends <= starts:
        since = "--at" if starts != now else "now"
        raise SpecError(
            "--until",
            f"{until!r} is not later than {since}: give the time the window ends, e.g. --until +4h",
        )
    return ends


def cordon(
    node: NodeArg,
    reason: ReasonOpt = "",
    at: AtOpt = None,
    until: UntilOpt = None,
    gpu: GpuOpt = None,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Close a node (or with --gpu one of its GPUs) to new work (admin); the jobs on it run
    on. With --until, until then. Undo with `danlu uncordon`."""
    _close(node, reason, at, False, gpu, json_out, home, url, token, until)


DRAIN_POLL = 2.0
"""Seconds between two looks at a draining node (``danlu drain --wait``)."""


def holders(data: dict[str, Any], gpu: int | None = None) -> list[str]:
    """The jobs holding a GPU of node ``data`` (as ``GET /cluster/nodes`` shows it), or GPU
    ``gpu`` of it."""
    held: set[str] = set()
    for entry in data.get("gpus") or []:
        if gpu is None or entry.get("index") == gpu:
            held.update(str(job) for job in entry.get("jobs") or [])
    return sorted(held)


def wait_empty(
    home: Path | None,
    url: str | None,
    token: str | None,
    node: str,
    gpu: int | None,
    timeout: float | None,
    quiet: bool = False,
) -> None:
    """Wait until no job holds the node's GPUs (``gpu``: that GPU), printing the jobs still
    there as they change (not when ``quiet``); exit 124 when ``timeout`` seconds pass
    first. A control-plane restart is waited out
    (:func:`~danlu.client.rest.read_across_restart`)."""
    start = time.monotonic()
    shown: list[str] | None = None
    where = f"{node} GPU {gpu}" if gpu is not None else node
    with common.connect(home, url, token) as client:
        while True:
            try:
                listed = read_across_restart(client, client.nodes)
                found = next((n for n in listed if n.get("name") == node), None)
            except DanluError as exc:
                raise common.fail(exc) from None
            if found is None:
                raise common.fail(f"node {node!r} left the inventory")
            problems: list[str] = []  # a field left out could hide a job: never "empty"
            jobs = holders(checked_nodes([found], problems)[0], gpu)
            common.fail_on(problems)
            if not jobs:
                if not quiet:
                    common.console.print(f"{as_text(where)} is empty", highlight=False)
                return
            if jobs != shown and not quiet:
                names = as_text(", ".join(jobs))
                common.console.print(
                    f"waiting for {len(jobs)} job(s) on {as_text(where)}: {names}",
                    highlight=False,
                )
                shown = jobs
            spent = time.monotonic() - start
            if timeout is not None and spent >= timeout:
                if not quiet:
                    common.console.print(
                        f"timed out: {len(jobs)} job(s) still on {as_text(where)}",
                        highlight=False,
                    )
                raise typer.Exit(code=waiting.WAIT_TIMEOUT_EXIT)
            time.sleep(DRAIN_POLL if timeout is None else min(DRAIN_POLL, timeout - spent))


def drain(
    node: NodeArg,
    reason: ReasonOpt = "",
    at: AtOpt = None,
    until: UntilOpt = None,
    gpu: GpuOpt = None,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait",
            help="Then wait until no job holds its GPUs (a job that is not preemptible runs "
            "to its end first); exit 124 when --timeout passes first.",
        ),
    ] = False,
    timeout: Annotated[
        str | None,
        typer.Option("--timeout", help="With --wait, give up after this long: 600, 30m."),
    ] = None,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Cordon a node (or with --gpu one of its GPUs) and preempt its jobs by checkpoint
    (admin): they resume elsewhere; a job that is not preemptible runs to its end. With
    --at, at that time, and with --until until then (a maintenance window: the node is
    uncordoned then); with --wait, until it is empty. Undo with `danlu uncordon`."""
    try:
        if wait and at is not None:
            raise SpecError("--wait", "waits for a drain done now; leave out --at")
        if timeout is not None and not wait:
            raise SpecError("--timeout", "applies to --wait; add --wait")
        seconds = waiting.parse_timeout(timeout)
    except DanluError as exc:
        raise common.fail(exc) from None
    _close(node, reason, at, True, gpu, json_out, home, url, token, until)
    if wait:
        try:
            wait_empty(home, url, token, node, gpu, seconds, quiet=json_out)
        except KeyboardInterrupt:  # the drain stays; only the waiting stops
            raise typer.Exit(code=130) from None


def uncordon(
    node: NodeArg,
    gpu: GpuOpt = None,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Open a cordoned or drained node to new work again, and drop the end its close had
    and a cordon or drain scheduled for it (admin); its GPUs cordoned on their own stay so:
    open one with --gpu."""
    data = common.ask(home, url, token, lambda c: c.uncordon(node, gpu))
    _node_changed(data, json_out, gpu)


def register(app: typer.Typer) -> None:
    """Add ``nodes``, ``cordon``, ``drain``, ``uncordon`` and the ``node`` group."""
    for command in (nodes, cordon, drain, uncordon):
        app.command(name=command.__name__)(command)
    app.add_typer(node_app, name="node")
