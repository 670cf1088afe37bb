"""The cluster-wide event feed: ``GET /events`` (from a time, after an event, by project, user
and state, the newest with ``tail``; a non-admin sees their own jobs') and ``danlu events``
(a table, JSON, followed as they happen)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from helpers import live_server, spec, submit, wait_state
from rich.console import Console
from typer.testing import CliRunner

from danlu.cli import events as events_cli
from danlu.cli import jobs as jobs_cli
from danlu.cli.main import app
from danlu.core.cluster import Node, gpu_type
from danlu.core.errors import SpecError
from danlu.server.db import Database
from danlu.server.services import cluster, events, jobs, projects, users

NOW = 1_000_000.0


def _body(name: str, project: str = "default") -> dict[str, object]:
    return {"name": name, "command": ["python", "t.py"], "project": project}


def test_the_feed_filters_and_pages_every_jobs_events(db: Database) -> None:
    with db.session() as s:
        alice = users.create_user(s, "alice", now=NOW)
        bob = users.create_user(s, "bob", now=NOW)
        admin = users.create_user(s, "root", role="admin", now=NOW)
        projects.create_project(s, "vision", now=NOW)
        cluster.replace_inventory(s, [Node("a", 2, gpu_type("H100"))], fake=True, now=NOW)
        first = jobs.submit(s, _body("first"), alice, now=NOW).id
        second = jobs.submit(s, _body("second", "vision"), bob, now=NOW + 10).id
        jobs.cancel_job(s, first, alice, "not needed", now=NOW + 20)
    with db.read_session() as s:
        everything = events.feed(s, viewer=admin)
        assert [(f.event.job_id, f.event.new) for f in everything] == [
            (first, "PENDING"),
            (second, "PENDING"),
            (first, "CANCELLED"),
        ]
        assert [(f.job_name, f.user, f.project) for f in everything][:2] == [
            ("first", "alice", "default"),
            ("second", "bob", "vision"),
        ]
        assert everything[2].event.reason == "not needed"
        ids = [f.event.id for f in everything]
        # from a time, after an event, by project, user and state, the newest
        assert [f.event.id for f in events.feed(s, since=NOW + 10)] == ids[1:]
        assert [f.event.id for f in events.feed(s, after_id=ids[0])] == ids[1:]
        assert [f.job_name for f in events.feed(s, project="vision")] == ["second"]
        assert [f.event.id for f in events.feed(s, user="alice")] == [ids[0], ids[2]]
        assert [f.event.id for f in events.feed(s, states=["cancelled"])] == [ids[2]]
        assert [f.event.id for f in events.feed(s, limit=2)] == ids[:2]
        assert [f.event.id for f in events.feed(s, limit=2, tail=True)] == ids[1:]
        # a user sees their own jobs' events only
        assert [f.event.id for f in events.feed(s, viewer=bob)] == [ids[1]]
        with pytest.raises(SpecError, match="'DONE' is not a job state"):
            events.feed(s, states=["DONE"])
        with pytest.raises(SpecError, match="limit"):
            events.feed(s, limit=0)


def test_the_api_and_danlu_events(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobs_cli, "console", Console(width=200))
    monkeypatch.setattr(events_cli, "console", Console(width=200))
    monkeypatch.setattr(events_cli, "FOLLOW_SECONDS", 0.05)
    with live_server(tmp_path, fake_gpus="1x80GiB") as live:
        with live.client() as c:
            done = submit(c, spec("quick-one", "pass", resources={"gpus": 1}))
            wait_state(c, done["id"], "SUCCEEDED")
            feed = c.get("/events", params={"state": "SUCCEEDED"}).json()
            assert [(e["job_id"], e["new"], e["job_name"], e["user"]) for e in feed] == [
                (done["id"], "SUCCEEDED", "quick-one", "admin")
            ]
            assert c.get("/events", params={"limit": 0}).status_code == 422
            bad = c.get("/events", params={"state": "DONE"})
            assert bad.status_code == 422 and "DONE" in bad.text
        flags = ["--url", live.url, "--token", live.token]

        def danlu(*args: str) -> tuple[int, str]:
            result = CliRunner().invoke(app, [*args, *flags])
            return result.exit_code, result.stdout + result.stderr

        code, out = danlu("events", "--json")
        assert code == 0, out
        changes = [(e["old"], e["new"]) for e in json.loads(out) if e["job_id"] == done["id"]]
        assert changes[0] == (None, "PENDING") and changes[-1] == ("RUNNING", "SUCCEEDED")
        code, out = danlu("events", "--since", "10m", "--state", "SUCCEEDED")
        assert code == 0 and "RUNNING -> SUCCEEDED" in out and "quick-one" in out, out
        assert "submitted" not in out
        # several states in one flag, as `danlu ls --state a,b` takes them
        code, out = danlu("events", "--since", "10m", "--state", "succeeded, FAILED")
        assert code == 0 and "RUNNING -> SUCCEEDED" in out and "submitted" not in out, out
        code, out = danlu("events", "--since", "2000-01-01T00:00", "--state", "FAILED")
        assert code == 0 and "no events" in out
        # a user that does not exist is named, not read as one with no events
        code, out = danlu("events", "--since", "2000-01-01T00:00", "--user", "nobody")
        assert code != 0 and "user 'nobody' not found" in out, out
        code, out = danlu("events", "--since", "yesterday-ish")
        assert code == 2 and "--since" in out
        # following: what there was, then what happens next
        buffer = io.StringIO()
        monkeypatch.setattr(events_cli, "console", Console(file=buffer, width=200))
        with live.client() as c:
            later = submit(c, spec("later", "import time; time.sleep(60)"))
            c.post(f"/jobs/{later['id']}/cancel").raise_for_status()
            wait_state(c, later["id"], "CANCELLED")
        query = {"since": 0.0, "project": None, "user": None, "state": ["CANCELLED"]}
        with jobs_cli.connect(None, live.url, live.token) as client:
            events_cli.follow(client, [], query, reads=2)
    printed = buffer.getvalue()
    assert f"{later['id']}  later  admin/default  " in printed, printed
    assert "-> CANCELLED" in printed and printed.count("CANCELLED") == 1
