"""Fields of the wrong type in the replies ``events -f``, ``metrics`` (``-f``), ``cordon`` /
``drain`` / ``uncordon``, ``drain --wait`` and ``project ls`` read: a clear error naming the
field (exit 2), never a raw ``ValueError`` or ``TypeError``, nor a guess shown as fact; and
user arguments or server text printed as text, never as Rich markup (``[/x]`` made Rich
fail). Against a stub server answering fixed replies."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
from cli_fake_api import TOKEN, invoke, no_raw_control, serve_replies
from rich.console import Console

from danlu.cli import events as events_cli
from danlu.cli import job_submit, waiting
from danlu.cli import jobs as jobs_cli
from danlu.cli import main as main_cli
from danlu.cli import metrics as metrics_cli
from danlu.cli import nodes as nodes_cli
from danlu.cli import top as top_view
from danlu.cli.follow import GapCursor
from danlu.client import Client
from danlu.client.errors import ServerError

T0 = 1_796_131_413.0
EVENT: dict[str, Any] = {"id": 1, "job_id": "0a1b", "time": T0, "old": None, "new": "PENDING"}
Replies = Mapping[tuple[str, str], Any]


class StopsFollowing:
    """The ``time`` module as a follower sees it, whose ``sleep`` does not wait and, after
    :attr:`SLEEPS` of them, is the user's Ctrl-C (a follower that goes on ends, exit 130)."""

    SLEEPS = 5

    def __init__(self) -> None:
        self.slept = 0

    def sleep(self, seconds: float) -> None:
        self.slept += 1
        if self.slept > self.SLEEPS:
            raise KeyboardInterrupt

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


def serve(monkeypatch: pytest.MonkeyPatch, replies: Replies) -> None:
    """Every command's client talks to a stub answering ``(method, path)`` (without
    ``/api/v1``) with its JSON reply (a tuple: the reply and its headers; a callable: that
    of the request), else a 404; the commands print to a console 250 columns wide and never
    sleep (:class:`StopsFollowing`)."""

    def handler(request: httpx.Request) -> httpx.Response:
        key = (request.method, request.url.path.removeprefix("/api/v1"))
        if key not in replies:
            return httpx.Response(404, json={"type": "NotFoundError", "message": str(key)})
        reply = replies[key]
        reply = reply(request) if callable(reply) else reply
        body, headers = reply if isinstance(reply, tuple) else (reply, {})
        return httpx.Response(200, json=body, headers=headers)

    def factory(home: Path | None, url: str | None, token: str | None) -> Client:
        return Client("http://fake", TOKEN, transport=httpx.MockTransport(handler))

    monkeypatch.setattr(jobs_cli, "client_factory", factory)
    wide = Console(width=250)
    for module in (jobs_cli, events_cli, metrics_cli):
        monkeypatch.setattr(module, "console", wide)
    monkeypatch.setattr(events_cli, "time", StopsFollowing())
    monkeypatch.setattr(metrics_cli, "time", StopsFollowing())
    monkeypatch.setattr(nodes_cli, "DRAIN_POLL", 0.0)


def flat(text: str) -> str:
    """``text`` on one line, as a reader sees a message Rich wrapped."""
    return " ".join(text.split())


# -- 1. a followed row's id --------------------------------------------------------------------


@pytest.mark.parametrize("ident", ["x", 7.5, None, True, [1]], ids=repr)
def test_events_follow_names_an_id_that_is_not_a_whole_number(
    monkeypatch: pytest.MonkeyPatch, ident: Any
) -> None:
    serve(monkeypatch, {("GET", "/events"): [EVENT | {"id": ident}]})
    code, out, err = invoke(main_cli.app, "events", "-f")
    assert code == 2, (out, err)
    assert f"server sent {ident!r} for field id of an event, expected a whole number" in flat(err)
    assert "cannot be followed" in flat(err)


def test_events_follow_names_an_id_of_a_later_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first read is fine; a later one holds an id the cursor cannot take."""
    reads = iter([[EVENT], [EVENT | {"id": "2"}]])
    monkeypatch.setattr(events_cli, "time", StopsFollowing())

    class Feed:
        def feed(self, **query: Any) -> list[dict[str, Any]]:
            return next(reads)

    with pytest.raises(ServerError, match="server sent '2' for field id of an event"):
        events_cli.follow(Feed(), [EVENT], {}, reads=2)  # type: ignore[arg-type]


def test_gap_cursor_names_the_rows_it_follows() -> None:
    with pytest.raises(ServerError, match="server sent None for field id of a delivery"):
        GapCursor().fresh_ids([{"id": 1}, {}], "a delivery")


# -- 2. metric records, a followed job's state, cordon / drain replies ----------------------------


def _metrics(records: list[dict[str, Any]], state: Any = "SUCCEEDED") -> Replies:
    """A job's ``records`` (none after the cursor, 9) and the job in ``state``."""

    def page(request: httpx.Request) -> tuple[list[dict[str, Any]], dict[str, str]]:
        after = "after_id" in request.url.params
        return ([] if after else records), {"X-Danlu-Metrics-Cursor": "9"}

    return {
        ("GET", "/jobs/j1/metrics"): page,
        ("GET", "/jobs/j1"): {"id": "j1", "state": state},
    }


BAD_RECORDS: list[dict[str, Any]] = [
    {"step": 1, "time": T0, "loss": 0.5},
    {"step": [2], "time": "noon", "loss": {"a": 1}, "superseded": "no", "attempt": "x"},
]


def test_metrics_names_each_field_of_the_wrong_type(monkeypatch: pytest.MonkeyPatch) -> None:
    serve(monkeypatch, _metrics(BAD_RECORDS))
    code, out, err = invoke(main_cli.app, "metrics", "j1", "--superseded")
    assert code == 2, (out, err)
    assert "0.5" in out  # the rest is shown
    assert "yes" not in out  # "superseded": "no" is not read as true
    for field in ("step", "time", "loss", "superseded", "attempt"):
        assert f"for field {field} of metric record" in flat(err), (field, err)
    assert "server sent 'noon' for field time" in flat(err)


def test_metrics_keeps_a_time_no_clock_shows(monkeypatch: pytest.MonkeyPatch) -> None:
    """A time in nanoseconds (stored before the API refused them) and a string metric are
    shown, not errors."""
    records = [{"step": 1, "time": 1_796_159_889_844_468_800, "loss": 0.5, "note": "warmup"}]
    serve(monkeypatch, _metrics(records))
    code, out, err = invoke(main_cli.app, "metrics", "j1", "--keys", "loss,note")
    assert code == 0, err
    assert "warmup" in out and "0.5" in out


def test_metrics_follow_reports_wrong_fields_and_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    serve(monkeypatch, _metrics(BAD_RECORDS))
    code, out, err = invoke(main_cli.app, "metrics", "j1", "-f", "--superseded")
    assert code == 0, (out, err)  # it followed the job to its end
    assert "superseded" not in out.splitlines()[1]
    assert "server sent 'no' for field superseded of metric record" in flat(err)


@pytest.mark.parametrize("state", ["DONE", None, ["RUNNING"]], ids=repr)
def test_metrics_follow_names_a_job_state_it_does_not_know(
    monkeypatch: pytest.MonkeyPatch, state: Any
) -> None:
    serve(monkeypatch, _metrics([], state=state))
    code, _, err = invoke(main_cli.app, "metrics", "j1", "-f")
    assert code == 2
    assert f"server sent {state!r} for field state of job j1, expected a job state" in flat(err)


def test_metrics_names_a_purged_at_of_the_wrong_type(monkeypatch: pytest.MonkeyPatch) -> None:
    replies = dict(_metrics([]))
    replies[("GET", "/jobs/j1")] = {"id": "j1", "state": "FAILED", "purged_at": "yesterday"}
    serve(monkeypatch, replies)
    code, _, err = invoke(main_cli.app, "metrics", "j1")
    assert code == 2
    assert "server sent 'yesterday' for field purged_at of job j1" in flat(err)


NODE: dict[str, Any] = {"name": "node-0", "state": "cordoned", "cordon_reason": "dimm"}


@pytest.mark.parametrize(
    ("args", "reply", "named"),
    [
        (["cordon", "node-0"], NODE | {"close_at": "soon"}, "close_at"),
        (["cordon", "node-0"], NODE | {"cordon_reason": ["x"]}, "cordon_reason"),
        (["cordon", "node-0", "--gpu", "1"], NODE | {"gpus": "8 x H100"}, "gpus"),
        (["cordon", "node-0", "--gpu", "1"], NODE | {"gpus": [3]}, "gpus"),
        (["uncordon", "node-0", "--gpu", "1"], NODE | {"gpus": [{"index": "1"}]}, "gpus[0].index"),
    ],
    ids=lambda v: v[-1] if isinstance(v, list) else None,
)
def test_node_changed_names_each_field_of_the_wrong_type(
    monkeypatch: pytest.MonkeyPatch, args: list[str], reply: dict[str, Any], named: str
) -> None:
    action = args[0]
    serve(monkeypatch, {("POST", f"/cluster/nodes/node-0/{action}"): reply})
    code, out, err = invoke(main_cli.app, *args)
    assert code == 2, (out, err)
    assert "node-0" in out  # the rest is shown
    assert f"for field {named} of node node-0" in flat(err), err


def test_node_changed_shows_markup_and_controls_as_text(monkeypatch: pytest.MonkeyPatch) -> None:
    reply = NODE | {"name": "n[/x]", "state": "[bold]x\x1b[2J", "close_at": T0}
    reply |= {"close_action": "drain[/y]\x1b[0m", "close_reason": "r"}
    serve(monkeypatch, {("POST", "/cluster/nodes/node-0/cordon"): reply})
    code, out, err = invoke(main_cli.app, "cordon", "node-0")
    assert code == 0, err
    assert "n[/x]" in out and "[bold]x\\x1b[2J" in out and "drain[/y]\\x1b[0m at" in out
    no_raw_control(out)


def test_drain_wait_never_reads_a_node_of_the_wrong_type_as_empty(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The jobs on a GPU sent as text: left out, the node would look empty."""
    node = NODE | {"gpus": [{"index": 0, "jobs": "j1,j2"}]}
    serve(
        monkeypatch,
        {("POST", "/cluster/nodes/node-0/drain"): node, ("GET", "/cluster/nodes"): [node]},
    )
    code, out, err = invoke(main_cli.app, "drain", "node-0", "--wait", "--timeout", "0")
    assert code == 2, (out, err)
    assert "is empty" not in out
    assert "server sent 'j1,j2' for field gpus[0].jobs of node node-0" in flat(err)


def test_drain_wait_prints_the_jobs_and_node_as_text(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    busy = NODE | {"name": "n[/x]", "gpus": [{"index": 0, "jobs": ["j[/y]\x1b[2J"]}]}
    serve(monkeypatch, {("GET", "/cluster/nodes"): [busy]})
    with pytest.raises(typer.Exit) as stopped:
        nodes_cli.wait_empty(None, None, None, "n[/x]", None, 0.0)
    assert stopped.value.exit_code == waiting.WAIT_TIMEOUT_EXIT
    out = flat(capsys.readouterr().out)
    assert "waiting for 1 job(s) on n[/x]: j[/y]\\x1b[2J" in out
    assert "timed out: 1 job(s) still on n[/x]" in out
    serve(monkeypatch, {("GET", "/cluster/nodes"): [busy | {"gpus": []}]})
    nodes_cli.wait_empty(None, None, None, "n[/x]", 0, None)
    assert "n[/x] GPU 0 is empty" in capsys.readouterr().out


# -- 3. user arguments and server text in markup ---------------------------------------------


def test_webhook_rm_prints_its_argument_as_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """``[bold]`` vanished, a control character reached the terminal (``/`` the client
    refuses in an id)."""
    serve(monkeypatch, {("DELETE", "/webhooks/[bold]w\x1b[2J"): {}})
    code, out, err = invoke(main_cli.app, "webhook", "rm", "[bold]w\x1b[2J")
    assert code == 0, err
    assert "removed webhook [bold]w\\x1b[2J" in out
    no_raw_control(out)


@pytest.mark.parametrize("width", [250, 60])
def test_nodes_table_prints_job_ids_as_text(width: int) -> None:
    """Both layouts: the table (wide) and the lines (too narrow for it)."""
    node = {"name": "node-0", "gpus": [{"index": 0, "memory": 1, "jobs": ["j[/x]\x1b[2J"]}]}
    console = Console(width=width, record=True)
    console.print(top_view.nodes_table([node]))
    text = console.export_text()
    assert "j[/x]\\x1b[2J" in text
    no_raw_control(text)


def test_print_end_prints_an_exit_code_as_text(capsys: pytest.CaptureFixture[str]) -> None:
    waiting.print_end({"id": "j1", "name": "a", "state": "FAILED", "exit_code": "[/x]"})
    assert "(exit [/x])" in capsys.readouterr().out


def test_array_submitted_prints_its_counts_as_text(capsys: pytest.CaptureFixture[str]) -> None:
    sweep = {"id": "s1", "name": "a", "total": "[/x]", "spec": {"parallel": "[/y]"}}
    job_submit._array_submitted(sweep, json_out=False)
    assert "[/x] tasks, at most [/y] at once" in flat(capsys.readouterr().out)


# -- 4. a project's members ------------------------------------------------------------------


def test_project_members_of_the_wrong_type_are_not_shown_as_all(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    project = {"name": "vision", "priority": 0, "quota_gpus": None, "quota_gpu_memory": None}
    serve_replies(monkeypatch, {"/projects": [project | {"members": "ann,bob"}]})
    code, out, err = invoke(main_cli.app, "project", "ls")
    assert code == 2
    assert "for field members of project vision" in flat(err)
    row = next(line for line in out.splitlines() if "vision" in line)
    assert "all" not in row and row.rstrip(" │").endswith("?"), row
    serve_replies(monkeypatch, {"/projects": [project | {"members": []}]})
    code, out, _ = invoke(main_cli.app, "project", "ls")
    assert code == 0
    assert next(line for line in out.splitlines() if "vision" in line).rstrip(" │").endswith("all")


def test_sim_wrote_prints_the_path_as_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from danlu.cli import sim as sim_cli

    recording = Console(width=250, record=True)
    monkeypatch.setattr(sim_cli, "console", recording)
    path = tmp_path / "out[bold]x\x1b[2J.json"
    sim_cli.write_output(path, lambda where: where.write_text("{}"), "--json")
    text = recording.export_text()
    assert "out[bold]x\\x1b[2J.json" in text
    no_raw_control(text)
