"""The CLI's live views: ``danlu top`` fits its frame to the terminal's height
(the pending jobs were never on screen), tables never crop a narrow terminal's text (they
fall back to a record per line), the followers (``events -f``, ``top``, ``drain --wait``)
ride out a control-plane restart, a fractional GPU shows as its fraction, jobs of equal
priority are listed in queue order, and a node's reason is printed with its control
characters escaped."""

from __future__ import annotations

import io
import time as real_time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest
import typer
from cli_fake_api import TOKEN, FakeApi, no_raw_control, serve_commands
from rich.console import Console, RenderableType
from typer.testing import CliRunner

from danlu.cli import events as events_cli
from danlu.cli import job_views, top
from danlu.cli import jobs as jobs_cli
from danlu.cli import metrics as metrics_cli
from danlu.cli import nodes as nodes_cli
from danlu.client import Client, ServerUnavailable, rest

GiB = 1024**3
URL = "http://fake"
BOX_RIGHT = "┓┃┫┩┤│┘"
"""The characters a table's line ends with when its right edge is not cut."""


class Clock:
    """The ``time`` module as a module sees it: ``sleep`` advances ``now`` (and calls
    ``on_sleep``; after ``sleeps_left`` sleeps it raises KeyboardInterrupt, as Ctrl-C)."""

    def __init__(
        self, sleeps_left: int | None = None, on_sleep: Callable[[], None] = lambda: None
    ) -> None:
        self.now = 0.0
        self.sleeps_left = sleeps_left
        self.on_sleep = on_sleep

    def sleep(self, seconds: float) -> None:
        if self.sleeps_left is not None:
            if self.sleeps_left == 0:
                raise KeyboardInterrupt
            self.sleeps_left -= 1
        self.on_sleep()
        self.now += seconds

    def monotonic(self) -> float:
        return self.now

    def __getattr__(self, name: str) -> Any:
        return getattr(real_time, name)


def _terminal() -> Console:
    """A console that is a 30-line terminal (top's Live view; into a file or a pipe it
    prints whole frames instead)."""
    return Console(width=100, height=30, file=io.StringIO(), force_terminal=True)


def printed(renderable: RenderableType, width: int, height: int = 25) -> list[str]:
    """The lines ``renderable`` prints as on a console ``width`` x ``height``."""
    out = io.StringIO()
    Console(file=out, width=width, height=height, force_terminal=False).print(renderable)
    return out.getvalue().splitlines()


def cluster(nodes: int, gpus: int) -> list[dict[str, Any]]:
    """``nodes`` nodes of ``gpus`` 80 GiB GPUs, each GPU half allocated to one job."""
    return [
        {
            "name": f"localhost-{n}",
            "fake": True,
            "state": "ready",
            "gpus": [
                {
                    "index": g,
                    "type": "A100-80GB",
                    "memory": 80 * GiB,
                    "allocated_memory": 40 * GiB,
                    "allocated_milli": 1000,
                    "jobs": [f"run{n:03d}{g:05d}"],
                }
                for g in range(gpus)
            ],
        }
        for n in range(nodes)
    ]


def job(ident: str, state: str, submitted: float, **extra: Any) -> dict[str, Any]:
    return {
        "id": ident,
        "name": f"train-{ident[-4:]}",
        "user": "admin",
        "state": state,
        "priority": 0,
        "gpus": 1,
        "gpu_memory": 40 * GiB,
        "restarts": 0,
        "submitted_at": submitted,
        "allocation": [],
        "pending_reason": None,
    } | extra


def workload(running: int, pending: int) -> list[dict[str, Any]]:
    """``running`` RUNNING jobs on localhost-0, then ``pending`` PENDING ones, newest first
    (as ``GET /jobs`` lists them)."""
    jobs = [
        job(f"run{i:09d}", "RUNNING", 100.0 + i, allocation=[{"node": "localhost-0", "gpu": i}])
        for i in range(running)
    ]
    reason = "needs 1 GPU(s) with 70.0GiB, 3 free"
    jobs += [
        job(f"pend{i:08d}", "PENDING", 500.0 + i, pending_reason=reason) for i in range(pending)
    ]
    return list(reversed(jobs))


# -- 1. top fits the terminal's height ------------------------------------------------------


@pytest.mark.parametrize(
    ("nodes", "gpus", "width", "height"),
    [(3, 4, 100, 30), (3, 4, 120, 40), (8, 8, 120, 40), (8, 8, 200, 60), (1, 2, 60, 20)],
)
def test_a_live_frame_fits_the_terminal_and_shows_pending_jobs(
    nodes: int, gpus: int, width: int, height: int
) -> None:
    """The reviewer's: with 10 GPUs a 100x30 terminal showed no job row, 120x40 five of 53
    active jobs and no PENDING one; with 64 GPUs no terminal showed any job."""
    jobs = workload(running=23, pending=30)
    frame = top.render(cluster(nodes, gpus), jobs, now=1000.0, height=height)
    lines = printed(frame, width, height)
    text = "\n".join(lines)
    assert len(lines) <= height, text
    assert "run000000000" in text and "pend00000000" in text, text
    assert "active jobs (53), " in text, text


def test_the_live_gpu_part_shrinks_to_a_line_per_node_with_the_rest_counted() -> None:
    lines = printed(top.render(cluster(8, 8), workload(23, 30), height=40), 120, 40)
    text = "\n".join(lines)
    assert "localhost-0" in text and "8 GPUs" in text, text
    assert "run00700007" not in text, text  # not a row per GPU


def test_a_short_terminal_counts_the_nodes_it_cannot_show() -> None:
    lines = printed(top.render(cluster(8, 8), workload(23, 30), height=16), 120, 16)
    text = "\n".join(lines)
    assert len(lines) <= 16, text
    assert "more node" in text or "node(s) not shown" in text, text
    assert "pend00000000" in text, text


def test_a_frame_printed_once_stays_complete() -> None:
    """``danlu top --once`` (a pipe): every GPU, whatever the console's height."""
    lines = printed(top.render(cluster(8, 8), workload(23, 30), now=1000.0), 200, 25)
    text = "\n".join(lines)
    assert all(f"run{n:03d}{g:05d}" in text for n in range(8) for g in range(8)), text


class RecordingLive:
    """``rich.live.Live`` as ``danlu top`` drives it: what it was given to show."""

    shown: ClassVar[list[RenderableType]] = []

    def __init__(self, renderable: RenderableType, **_: Any) -> None:
        RecordingLive.shown = [renderable]

    def __enter__(self) -> RecordingLive:
        return self

    def __exit__(self, *_: object) -> None:
        return None

    def update(self, renderable: RenderableType) -> None:
        RecordingLive.shown.append(renderable)


def top_app() -> typer.Typer:
    cli = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    jobs_cli.register(cli)
    return cli


def add_workload(fake: FakeApi) -> list[str]:
    """Twelve RUNNING jobs on the fake's two GPUs, then eight PENDING ones; their ids."""
    for i in range(12):
        share = {"node": "node-0", "gpu": i % 2, "milli": 80, "memory": 5 * GiB}
        fake.add_job(f"run-{i}", "RUNNING", allocation=[share], gpu_memory=5 * GiB)
    return [fake.add_job(f"wait-{i}", "PENDING")["id"] for i in range(8)]


def test_danlu_top_live_shows_pending_jobs_in_a_30_line_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = serve_commands(monkeypatch)
    pending = add_workload(fake)
    monkeypatch.setattr(jobs_cli, "console", _terminal())
    monkeypatch.setattr(job_views, "Live", RecordingLive)
    monkeypatch.setattr(job_views, "time", Clock(sleeps_left=1))
    result = CliRunner().invoke(top_app(), ["top"])
    assert result.exit_code == 0, result.output
    assert len(RecordingLive.shown) == 2
    for frame in RecordingLive.shown:
        lines = printed(frame, 100, 30)
        text = "\n".join(lines)
        assert len(lines) <= 30, text
        assert pending[0] in text, text  # the oldest waiting job


# -- 2. narrow terminals: nothing cropped --------------------------------------------------------


def _right_edges_whole(lines: list[str]) -> None:
    for line in lines:
        if line[:1] in "┏┃┡│└":
            assert line.rstrip()[-1] in BOX_RIGHT, "\n".join(lines)
            assert "┃┃" not in line and "││" not in line, "\n".join(lines)  # no empty column


@pytest.mark.parametrize("width", range(36, 132, 4))
def test_the_jobs_table_never_crops_its_text(width: int) -> None:
    lines = printed(top.jobs_table(workload(1, 1), now=1000.0, width=width), width)
    _right_edges_whole(lines)
    text = "\n".join(lines)
    words = " ".join(text.replace("│", " ").split())
    assert "run000000000" in text and "pend00000000" in text, text
    assert "localhost-0:0" in text, text
    assert "needs 1 GPU(s) with 70.0GiB, 3 free" in words, text


@pytest.mark.parametrize("width", range(36, 132, 4))
def test_the_gpu_table_never_crops_its_text(width: int) -> None:
    nodes = cluster(1, 2)
    nodes[0] |= {"state": "cordoned", "cordon_reason": "bad DIMM"}
    lines = printed(top.nodes_table(nodes), width)
    _right_edges_whole(lines)
    text = "\n".join(lines)
    assert "run00000000" in text and "40.0GiB/80.0GiB" in text, text


def test_a_50_column_gpu_table_keeps_node_gpu_and_type() -> None:
    nodes = cluster(1, 2)
    text = "\n".join(printed(top.nodes_table(nodes), 50))
    assert "localhost-0" in text and "A100-80GB" in text and "gpu 1" in text, text


def test_ls_at_72_columns_keeps_where_and_why_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = serve_commands(monkeypatch)
    share = {"node": "localhost-0", "gpu": 0, "milli": 1000, "memory": 20 * GiB}
    ran = fake.add_job("train", "RUNNING", allocation=[share])["id"]
    waits = fake.add_job("big", "PENDING", pending_reason="needs 1 GPU(s) with 70.0GiB, 3 free")
    monkeypatch.setattr(jobs_cli, "console", Console(width=72))
    result = CliRunner().invoke(top_app(), ["ls"])
    assert result.exit_code == 0, result.output
    assert ran in result.stdout and waits["id"] in result.stdout, result.stdout
    assert "localhost-0:0" in result.stdout, result.stdout
    assert "70.0GiB, 3 free" in result.stdout, result.stdout


# -- 3. followers ride out a control-plane restart ----------------------------------------------


class Outage:
    """``inner`` behind a server that goes away after ``up`` requests (or once :meth:`cut`)
    for ``down`` requests (None: for good)."""

    def __init__(
        self, inner: Callable[[httpx.Request], httpx.Response], up: int, down: int | None
    ) -> None:
        self.inner, self.up, self.down = inner, up, down
        self.refused = 0

    def cut(self) -> None:
        """The server goes away now."""
        self.up = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if self.up > 0:
            self.up -= 1
        elif self.down is None or self.refused < self.down:
            self.refused += 1
            raise httpx.ConnectError("connection refused", request=request)
        return self.inner(request)


def client_of(handler: Callable[[httpx.Request], httpx.Response]) -> Client:
    return Client(URL, TOKEN, transport=httpx.MockTransport(handler))


def ok(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={"status": "ok", "version": "0"})


def test_a_read_is_asked_again_across_a_restart(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr(rest, "time", clock)
    server = Outage(ok, up=1, down=3)
    client = client_of(server)
    client.health()
    assert rest.read_across_restart(client, client.health)["status"] == "ok"
    assert server.refused == 3 and clock.now == 3 * rest.RECONNECT_PAUSE


def test_a_read_gives_up_once_the_server_stays_away(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr(rest, "time", clock)
    client = client_of(Outage(ok, up=1, down=None))
    client.health()
    with pytest.raises(ServerUnavailable, match="cannot reach"):
        rest.read_across_restart(client, client.health)
    assert clock.now >= rest.RECONNECT_FOR


def test_a_server_never_reached_is_not_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr(rest, "time", clock)
    client = client_of(Outage(ok, up=0, down=None))
    with pytest.raises(ServerUnavailable):
        rest.read_across_restart(client, client.health)
    assert clock.now == 0.0


def feed_server(events: list[dict[str, Any]]) -> Callable[[httpx.Request], httpx.Response]:
    """``GET /events`` over ``events``, after ``after_id``."""

    def handler(request: httpx.Request) -> httpx.Response:
        after = int(request.url.params.get("after_id", 0))
        return httpx.Response(200, json=[e for e in events if e["id"] > after])

    return handler


def event(ident: int, new: str) -> dict[str, Any]:
    return {
        "id": ident,
        "job_id": f"{ident:012x}",
        "time": 1_796_131_413.0,
        "old": "PENDING",
        "new": new,
        "reason": "",
        "job_name": "train",
        "user": "admin",
        "project": "default",
    }


def test_events_follow_rides_out_a_restart(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rest, "time", Clock())
    monkeypatch.setattr(events_cli, "FOLLOW_SECONDS", 0.0)
    out = io.StringIO()
    monkeypatch.setattr(events_cli, "console", Console(file=out, width=200))
    events = [event(1, "RUNNING")]
    client = client_of(Outage(feed_server(events), up=1, down=4))
    shown = client.feed(limit=100, tail=True)
    events.append(event(2, "SUCCEEDED"))
    events_cli.follow(client, shown, {}, reads=1)
    assert "PENDING -> SUCCEEDED" in out.getvalue(), out.getvalue()


def test_metrics_follow_rides_out_a_restart(monkeypatch: pytest.MonkeyPatch) -> None:
    """``danlu metrics -f`` waits a control-plane restart out, as ``logs -f`` does."""
    records = [{"step": 1, "time": 1.0, "loss": 0.5, "attempt": 1, "superseded": False}]

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/metrics"):
            after = int(request.url.params.get("after_id", 0))
            found = records[after:]
            cursor = str(after + len(found))
            return httpx.Response(200, json=found, headers={"X-Danlu-Metrics-Cursor": cursor})
        return httpx.Response(200, json={"id": "abc", "state": "SUCCEEDED"})

    monkeypatch.setattr(rest, "time", Clock())
    monkeypatch.setattr(metrics_cli, "time", Clock())
    out = io.StringIO()
    monkeypatch.setattr(metrics_cli, "console", Console(file=out, width=200))
    client = client_of(Outage(handler, up=1, down=4))
    client.health()  # the server answered once: then it restarts
    metrics_cli.follow(client, "abc", [], [], 0)
    assert "loss" in out.getvalue() and "0.5" in out.getvalue(), out.getvalue()


def test_top_rides_out_a_restart(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeApi()
    add_workload(fake)
    server = Outage(fake.handler, up=10**6, down=5)  # cut after the first frame

    def factory(home: Path | None, url: str | None, token: str | None) -> Client:
        return client_of(server)

    monkeypatch.setattr(jobs_cli, "client_factory", factory)
    monkeypatch.setattr(rest, "time", Clock())
    monkeypatch.setattr(jobs_cli, "console", _terminal())
    monkeypatch.setattr(job_views, "Live", RecordingLive)
    monkeypatch.setattr(job_views, "time", Clock(sleeps_left=1, on_sleep=server.cut))
    result = CliRunner().invoke(top_app(), ["top"])
    assert result.exit_code == 0, result.output
    assert server.refused == 5 and len(RecordingLive.shown) == 2


def test_drain_wait_rides_out_a_restart(monkeypatch: pytest.MonkeyPatch) -> None:
    looks = [0]

    def handler(request: httpx.Request) -> httpx.Response:
        looks[0] += 1
        held = ["abc"] if looks[0] == 1 else []
        node = {"name": "n0", "gpus": [{"index": 0, "jobs": held}]}
        return httpx.Response(200, json=[node])

    server = Outage(handler, up=1, down=3)

    def factory(home: Path | None, url: str | None, token: str | None) -> Client:
        return client_of(server)

    monkeypatch.setattr(jobs_cli, "client_factory", factory)
    monkeypatch.setattr(rest, "time", Clock())
    monkeypatch.setattr(nodes_cli, "time", Clock())
    out = io.StringIO()
    monkeypatch.setattr(jobs_cli, "console", Console(file=out, width=200))
    nodes_cli.wait_empty(None, None, None, "n0", None, None)
    assert "n0 is empty" in out.getvalue() and server.refused == 3


# -- 4. a fractional GPU -------------------------------------------------------------------------


def test_a_fractional_gpu_job_shows_its_fraction() -> None:
    spec = {"resources": {"gpus": 1, "gpu_fraction": 0.25}}
    shared = job("frac00000001", "RUNNING", 1.0, spec=spec, gpu_memory=None)
    assert top.gpus_of(shared) == "0.25"
    assert top.gpus_of(shared | {"gpu_memory": 10 * GiB}) == "0.25 x 10.0GiB"
    text = "\n".join(printed(top.jobs_table([shared], now=2.0), 160))
    assert "│ 0.25 " in text, text


# -- 5. queue order among equal priorities --------------------------------------------------------


def test_top_lists_jobs_of_equal_priority_oldest_first() -> None:
    jobs = workload(running=0, pending=3)  # newest first, as the API lists them
    text = "\n".join(printed(top.render([], jobs, now=1000.0, max_jobs=2), 200))
    assert "pend00000000" in text and "pend00000001" in text, text
    assert "pend00000002" not in text, text
    assert text.index("pend00000000") < text.index("pend00000001"), text


# -- 6. a node's reason with control characters ------------------------------------------------

EVIL = "bad\x1b[31mDIMM\nnode-1 ready\r\x9b2J"


def test_cordon_prints_a_reason_escaped(monkeypatch: pytest.MonkeyPatch) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        gpu = {"index": 0, "state": "cordoned", "cordon_reason": EVIL, "jobs": []}
        node = {"name": "n0", "state": "cordoned", "cordon_reason": EVIL, "gpus": [gpu]}
        node |= {"close_at": 4_000_000_000.0, "close_action": "drain", "close_reason": EVIL}
        return httpx.Response(200, json=node)

    def factory(home: Path | None, url: str | None, token: str | None) -> Client:
        return client_of(handler)

    monkeypatch.setattr(jobs_cli, "client_factory", factory)
    monkeypatch.setattr(jobs_cli, "console", Console(width=300))
    cli = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    nodes_cli.register(cli)
    for args in (["cordon", "n0", "--reason", EVIL], ["cordon", "n0", "--gpu", "0"]):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 0, result.output
        no_raw_control(result.stdout)
        assert "bad\\x1b[31mDIMM\\nnode-1" in result.stdout, result.stdout
        assert len(result.stdout.splitlines()) == 1, result.stdout


def test_the_gpu_table_prints_reasons_escaped() -> None:
    nodes = cluster(1, 1)
    nodes[0] |= {"state": "cordoned", "cordon_reason": EVIL}
    nodes[0]["gpus"][0] |= {"state": "cordoned", "cordon_reason": EVIL}
    for width in (200, 60):
        text = "\n".join(printed(top.nodes_table(nodes), width))
        no_raw_control(text)
        assert "\\x1b" in text, text


def test_why_prints_a_reason_escaped(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = serve_commands(monkeypatch)
    waiting = fake.add_job("wait", "PENDING", pending_reason=f"node n0 cordoned: {EVIL}")
    monkeypatch.setattr(jobs_cli, "console", Console(width=300))
    for args in (["why", waiting["id"]], ["ls"], ["show", waiting["id"]]):
        result = CliRunner().invoke(top_app(), args)
        assert result.exit_code == 0, result.output
        no_raw_control(result.stdout)
        assert "bad\\x1b[31mDIMM\\nnode-1" in result.stdout, result.stdout


def test_events_print_a_reason_escaped(monkeypatch: pytest.MonkeyPatch) -> None:
    """A drain's reason reaches the jobs' events ("preempted: node drained: ...")."""
    drained = event(1, "PENDING") | {"old": "RUNNING", "reason": f"node n0 drained: {EVIL}"}
    out = io.StringIO()
    monkeypatch.setattr(events_cli, "console", Console(file=out, width=300))
    events_cli.follow(client_of(feed_server([])), [drained], {}, reads=1)
    text = "\n".join([out.getvalue(), *printed(events_cli.table([drained]), 200)])
    no_raw_control(text)
    assert "bad\\x1b[31mDIMM\\nnode-1" in text, text


@pytest.mark.parametrize("height", [4, 8, 12])
@pytest.mark.parametrize("width", [30, 60])
@pytest.mark.parametrize("running", [0, 3])
def test_a_tiny_terminal_gets_a_frame_as_high_as_it_is(
    height: int, width: int, running: int
) -> None:
    jobs = workload(running=running, pending=running)
    lines = printed(top.render(cluster(2, 2), jobs, now=1000.0, height=height), width, height)
    assert len(lines) <= height, "\n".join(lines)
