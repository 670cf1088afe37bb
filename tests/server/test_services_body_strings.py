"""Strings of request bodies that reach the store: one with a NUL character (PostgreSQL's text
takes none) is a 422 naming the field, as ``POST /jobs`` makes it, and nothing is written;
a webhook naming an unknown project or user is a 422 naming that field too."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import live_server, user_and_nodes
from sqlalchemy.orm import Session

from danlu.core.cluster import Node, gpu_type
from danlu.core.errors import SpecError
from danlu.server.db import Database
from danlu.server.services import cluster, members, nodes, projects, webhooks

NOW = 1_000_000.0
NODE = Node("a", 2, gpu_type("H100"))


def test_the_services_refuse_nul_characters_naming_the_field(db: Database) -> None:
    with db.session() as s:
        user_and_nodes(s, (NODE,), NOW)
        projects.create_project(s, "vision", now=NOW)
    refused: dict[str, Callable[[Session], object]] = {
        "members.1": lambda s: members.set_members(
            s, projects.get_project(s, "vision"), ["alice", "a\0b"]
        ),
        "reason": lambda s: nodes.cordon(s, "a", "bad\0disk", drain=True, now=NOW),
        "project": lambda s: webhooks.create(s, "http://h/", "admin", project="p\0"),
        "user": lambda s: webhooks.create(s, "http://h/", "admin", user="u\0"),
    }
    for field, call in refused.items():
        with db.session() as s, pytest.raises(SpecError, match="NUL") as raised:
            call(s)
        assert raised.value.field == field
    with db.read_session() as s:  # nothing written
        assert members.members(s, projects.get_project(s, "vision")) == []
        assert [nodes.state(n) for n in cluster.list_nodes(s)] == ["ready"]
        assert webhooks.list_webhooks(s) == []


def test_the_api_answers_422_naming_the_field(tmp_path: Path, db_url: str) -> None:
    with (
        live_server(tmp_path, fake_gpus="1x80GiB", db_url=db_url, start_loops=False) as live,
        live.client() as c,
    ):
        node = c.get("/cluster/nodes").json()[0]["name"]
        assert c.post("/projects", json={"name": "open"}).status_code == 201
        hook = {"url": "http://example.com/x"}
        refused = [
            ("POST", "/projects", {"name": "p1", "members": ["a\0b"]}, "members.0"),
            ("PUT", "/projects/open", {"members": ["admin", "x\0"]}, "members.1"),
            ("POST", "/webhooks", {**hook, "project": "p\0"}, "project"),
            ("POST", "/webhooks", {**hook, "user": "u\0"}, "user"),
            ("POST", "/webhooks", {**hook, "project": "nope"}, "project"),
            ("POST", "/webhooks", {**hook, "user": "nobody"}, "user"),
            ("POST", f"/cluster/nodes/{node}/cordon", {"reason": "bad\0disk"}, "reason"),
            ("POST", f"/cluster/nodes/{node}/drain", {"reason": "\0"}, "reason"),
            # the other body strings that reach the store were refused already
            ("POST", "/projects", {"name": "p\0"}, "name"),
            ("POST", "/users", {"name": "u\0"}, "name"),
            ("POST", "/users", {"name": "u", "os_user": "u\0"}, "os_user"),
            ("PUT", "/users/admin", {"os_user": "\0"}, "os_user"),
            ("POST", "/users/admin/tokens", {"name": "t\0"}, "name"),
            ("POST", "/webhooks", {"url": "http://example.com/\0"}, "url"),
        ]
        for method, path, body, field in refused:
            answer = c.request(method, path, json=body)
            assert answer.status_code == 422, (path, body, answer.text)
            error = answer.json()["error"]
            assert (error["type"], error["field"]) == ("SpecError", field), (path, body)
        listed = {p["name"]: p["members"] for p in c.get("/projects").json()}
        assert "p1" not in listed and listed["open"] == []
        assert c.get("/webhooks").json() == []
        assert c.get("/cluster/nodes").json()[0]["state"] == "ready"


def test_lone_surrogates_are_refused_before_they_reach_the_store(
    tmp_path: Path, db_url: str
) -> None:
    """A lone UTF-16 surrogate (``\\ud800`` in JSON) in a job spec, a sweep or a metric is
    a 422 naming the field: stored, it made every listing of the row a 500 (the admin's
    job list and the dashboard too), and the submitter got a 500 for a job it had made."""
    with (
        live_server(tmp_path, fake_gpus="1x80GiB", db_url=db_url, start_loops=False) as live,
        live.client() as c,
    ):
        raw = {"content-type": "application/json"}
        job = b'{"name": "evil", "command": ["python", "\\ud800"]}'
        answer = c.post("/jobs", content=job, headers=raw)
        assert answer.status_code == 422, answer.text
        assert answer.json()["error"]["field"] == "command.1"
        keyed = b'{"name": "evil", "command": ["true"], "env": {"\\udfff": "x"}}'
        answer = c.post("/jobs", content=keyed, headers=raw)
        assert answer.status_code == 422, answer.text
        assert c.get("/jobs").status_code == 200 and c.get("/jobs").json() == []
        made = c.post("/jobs", json={"name": "ok", "command": ["true"]}).json()["id"]
        metric = b'{"metrics": [{"step": 1, "note": "\\ud800"}]}'
        answer = c.post(f"/jobs/{made}/metrics", content=metric, headers=raw)
        assert answer.status_code == 422, answer.text
        assert answer.json()["error"]["field"] == "metrics.0.note"
        assert c.get(f"/jobs/{made}/metrics").status_code == 200
