"""Fields of the wrong type in the server's replies (``"gpus": "2"``, ``"priority": "high"``,
a list where an object belongs): ``danlu show``, ``ls``, ``top`` and ``nodes`` print what
they can, name each such field on stderr (``server sent ... for field X``) and exit 2,
never a raw TypeError. Against the in-memory API of ``cli_fake_api``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from cli_fake_api import FakeApi, invoke, serve_jobs_commands, serve_replies

from danlu.cli import main as main_cli
from danlu.cli import top as top_view
from danlu.cli.reply_fields import JOB_FIELDS, checked, checked_job


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    return serve_jobs_commands(monkeypatch)


def test_show_prints_the_rest_and_names_each_wrong_field(api: FakeApi) -> None:
    job = api.add_job(
        "train-a",
        "RUNNING",
        gpus="2",
        priority="high",
        submitted_at="yesterday",
        allocation=[{"node": "node-0", "gpu": 0, "milli": "all", "memory": 1}],
        spec=["python", "x.py"],
    )
    code, out, err = invoke(main_cli.app, "show", job["id"])
    assert code == 2
    assert "train-a" in out and "node-0 gpu 0" in out  # the rest is shown
    for field in ("gpus", "priority", "submitted_at", "allocation[0].milli", "spec"):
        assert f"for field {field} of job {job['id']}" in err, (field, err)
    assert "server sent 'yesterday'" in err
    assert "Traceback" not in out + err


def test_show_with_events_of_the_wrong_type(api: FakeApi) -> None:
    job = api.add_job("train-b", "RUNNING")
    api.events[job["id"]][0].update(time="noon", reason=["x"])
    code, out, err = invoke(main_cli.app, "show", job["id"])
    assert code == 2
    assert "train-b" in out and "PENDING" in out
    assert "for field time of event 1" in err and "for field reason of event 1" in err


def test_show_json_prints_the_reply_as_sent(api: FakeApi) -> None:
    job = api.add_job("train-c", "RUNNING", gpus="2")
    code, out, _ = invoke(main_cli.app, "show", job["id"], "--json")
    assert code == 0
    assert '"gpus": "2"' in out


@pytest.mark.parametrize(
    ("field", "value"),
    [("submitted_at", "x"), ("spec", "x"), ("allocation", "node-0"), ("gpus", [1])],
)
def test_ls_prints_the_rest_and_names_the_field(api: FakeApi, field: str, value: Any) -> None:
    api.add_job("fine", "RUNNING")
    api.add_job("odd", "RUNNING", **{field: value})
    code, out, err = invoke(main_cli.app, "ls")
    assert code == 2
    assert "fine" in out and "odd" in out
    assert f"for field {field} of job" in err, err


def test_top_once_prints_the_frame_and_names_the_field(api: FakeApi) -> None:
    api.add_job("train-d", "RUNNING", priority="high")
    api.add_job("train-e", "PENDING", priority=[3])
    code, out, err = invoke(main_cli.app, "top", "--once")
    assert code == 2
    assert "train-d" in out and "train-e" in out
    assert "server sent 'high' for field priority" in err
    assert "server sent [3] for field priority" in err


def test_nodes_with_gpus_of_the_wrong_type(api: FakeApi, monkeypatch: pytest.MonkeyPatch) -> None:
    nodes = api._nodes()
    nodes[0]["gpus"][0]["allocated_memory"] = "lots"
    nodes[0]["gpus"][1]["jobs"] = {"a": 1}
    monkeypatch.setattr(api, "_nodes", lambda: nodes)
    code, out, err = invoke(main_cli.app, "nodes")
    assert code == 2
    assert "node-0" in out and "H100" in out
    assert "for field gpus[0].allocated_memory of node node-0" in err
    assert "for field gpus[1].jobs of node node-0" in err


def test_nodes_with_gpus_null_or_not_a_list(api: FakeApi, monkeypatch: pytest.MonkeyPatch) -> None:
    nodes = [{"name": "node-0", "gpus": None}, {"name": "node-1", "gpus": "8 x H100"}]
    monkeypatch.setattr(api, "_nodes", lambda: nodes)
    code, out, err = invoke(main_cli.app, "top", "--once")
    assert code == 2
    assert "2 node(s), 0 GPU(s)" in out
    assert "server sent '8 x H100' for field gpus of node node-1" in err


def test_live_frame_shows_the_first_problem_within_its_height() -> None:
    jobs = [{"id": "j1", "name": "a", "state": "RUNNING", "priority": 0}]
    problems = ["server sent 'x' for field priority of job j2", "another"]
    frame = top_view.render([], jobs, now=0.0, width=100, height=8, problems=problems)
    from rich.console import Console

    console = Console(width=100, record=True)
    console.print(frame)
    text = console.export_text()
    assert "error: server sent 'x' for field priority of job j2 (and 1 more)" in text
    assert len(text.rstrip("\n").splitlines()) <= 8


def test_checked_keeps_what_is_right_and_null() -> None:
    job: dict[str, Any] = {
        "id": "j",
        "priority": None,
        "gpus": 2,
        "gpu_memory": 1.5e9,
        "allocation": [],
    }
    problems: list[str] = []
    assert checked_job(job, problems) == job
    assert problems == []


def test_checked_quotes_a_long_value_shortened() -> None:
    problems: list[str] = []
    kept = checked({"name": [1] * 500, "state": "OK"}, {"name": JOB_FIELDS["name"]}, "x", problems)
    assert kept == {"state": "OK"}
    assert problems[0].startswith("server sent [1, 1, ") and "..." in problems[0]
    assert len(problems[0]) < 200


USER: dict[str, Any] = {"name": "ann", "role": "user", "os_user": None, "quota_gpus": None}
PROJECT: dict[str, Any] = {
    "name": "vision",
    "priority": 0,
    "quota_gpus": None,
    "quota_gpu_memory": None,
}
USAGE: dict[str, Any] = {
    "project": "vision",
    "user": "ann",
    "gpu_hours": 1.0,
    "gpu_memory_gib_hours": 2.0,
}
TOKEN_ROW: dict[str, Any] = {"prefix": "dl_ab", "name": "ci", "job_id": None, "created_at": 1.0e9}
EVENT: dict[str, Any] = {"id": 1, "job_id": "0a1b", "time": 1.0e9, "old": None, "new": "PENDING"}
SWEEP: dict[str, Any] = {
    "id": "s1",
    "name": "lr",
    "user": "ann",
    "state": "RUNNING",
    "submitted": 1,
    "total": 2,
}
TRIAL: dict[str, Any] = {"trial": 0, "job_id": "0a1b", "state": "RUNNING", "best": 0.5, "step": 3}
HOOK: dict[str, Any] = {
    "id": "w1",
    "url": "http://x",
    "states": ["FAILED"],
    "project": None,
    "user": None,
}
HOOK |= {"pending": 0, "delivered": 1, "failed": 0, "last_error": None}
DELIVERY: dict[str, Any] = {
    "id": 1,
    "kind": "ping",
    "event": {},
    "created_at": 1.0e9,
    "attempts": 0,
}
DELIVERY |= {"next_attempt_at": 1.0e9, "done_at": None, "delivered": False, "status_code": None}


@pytest.mark.parametrize(
    ("args", "path", "reply", "named"),
    [
        (["whoami"], "/users/me", USER | {"role": ["admin"]}, "role of user ann"),
        (["user", "ls"], "/users", [USER | {"quota_gpus": "2"}], "quota_gpus of user ann"),
        (
            ["user", "tokens", "ann"],
            "/users/ann/tokens",
            [TOKEN_ROW | {"last_used_at": "today"}],
            "last_used_at of token dl_ab",
        ),
        (["project", "ls"], "/projects", [PROJECT | {"share": "fair"}], "share of project vision"),
        (
            ["project", "ls"],
            "/projects",
            [PROJECT | {"members": 7, "gpus_held": [1]}],
            "members of project vision",
        ),
        (["usage"], "/usage", [USAGE | {"gpu_hours": None, "jobs": "3"}], "jobs of usage row"),
        (["usage"], "/usage", [USAGE | {"gpu_hours": 10**400}], "gpu_hours of usage row"),
        (["events"], "/events", [EVENT | {"time": "noon", "reason": 3}], "time of event 1"),
        (["sweep", "ls"], "/sweeps", [SWEEP | {"total": "2"}], "total of sweep s1"),
        (
            ["sweep", "show", "s1"],
            "/sweeps/s1",
            SWEEP | {"goal": "min", "trials": [TRIAL | {"best": "0.4", "parameters": [1]}]},
            "trials[0].best of sweep s1",
        ),
        (["webhook", "ls"], "/webhooks", [HOOK | {"states": [1]}], "states of webhook w1"),
        (
            ["webhook", "deliveries", "w1"],
            "/webhooks/w1/deliveries",
            [DELIVERY | {"created_at": "now", "event": "x"}],
            "created_at of delivery 1",
        ),
    ],
    ids=lambda v: v[0] if isinstance(v, list) else None,
)
def test_other_replies_with_fields_of_the_wrong_type(
    monkeypatch: pytest.MonkeyPatch, args: list[str], path: str, reply: Any, named: str
) -> None:
    serve_replies(monkeypatch, {path: reply})
    code, out, err = invoke(main_cli.app, *args)
    assert code == 2, (out, err)
    assert f"for field {named}" in err, err
    assert out.strip()  # the rest was shown
    code, out, _ = invoke(main_cli.app, *args, "--json")
    assert code == 0 and json.loads(out) == reply  # JSON: the reply as sent


def test_show_names_an_event_id_it_cannot_read_on_from(monkeypatch: pytest.MonkeyPatch) -> None:
    """A full page of events whose last id is not a number: the next page cannot be asked
    for; an error naming the field, not a ValueError."""
    from danlu.cli import job_views

    monkeypatch.setattr(job_views, "EVENTS_PAGE", 1)
    job = {"id": "j1", "name": "a", "state": "RUNNING"}
    serve_replies(monkeypatch, {"/jobs/j1": job, "/jobs/j1/events": [EVENT | {"id": "x"}]})
    code, _, err = invoke(main_cli.app, "show", "j1")
    assert code == 2
    assert "server sent 'x' for field id of an event of job j1" in " ".join(err.split())
