"""403 and 409 answers name the field they are about, as a 422 does: a non-admin's job
naming another ``user`` (``trial.user`` in a sweep), a listing of another user's jobs, a
project its owner is no member of, a user or project name already taken. Their ``field``
was null, and a client could not tell which of its inputs to change."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from helpers import live_server, spec

from danlu.core.job_array import array_sweep, parse_array


def _error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text[:300]
    error: dict[str, Any] = response.json()["error"]
    return error


def test_refusals_and_conflicts_name_their_field(tmp_path: Path) -> None:
    with live_server(tmp_path, start_loops=False) as live, live.client() as admin:
        for name in ("alice", "bob"):
            assert admin.post("/users", json={"name": name}).status_code == 201
        token = admin.post("/users/bob/tokens", json={"name": "t"}).json()["token"]
        taken = _error(admin.post("/users", json={"name": "alice"}), 409)
        assert taken["field"] == "name" and "already exists" in taken["message"]
        assert admin.post("/projects", json={"name": "vision"}).status_code == 201
        taken = _error(admin.post("/projects", json={"name": "vision"}), 409)
        assert taken["field"] == "name" and "already exists" in taken["message"]
        members = admin.put("/projects/vision", json={"members": ["alice"]})
        assert members.status_code == 200, members.text[:300]
        with live.client(token) as bob:
            refused = _error(bob.post("/jobs", json=spec("j", "pass", user="alice")), 403)
            assert refused["field"] == "user"
            assert refused["message"] == "'bob' may submit only as themselves, not as 'alice'"
            trial = spec("t", "pass", user="alice")
            sweep = array_sweep(trial, parse_array("0-1"))
            refused = _error(bob.post("/sweeps", json=sweep), 403)
            assert refused["field"] == "trial.user"
            refused = _error(bob.post("/jobs", json=spec("j", "pass", project="vision")), 403)
            assert refused["field"] == "project"
            assert "is not a member of project 'vision'" in refused["message"]
            sweep = array_sweep(spec("t", "pass", project="vision"), parse_array("0-1"))
            refused = _error(bob.post("/sweeps", json=sweep), 403)
            assert refused["field"] == "trial.project"
            refused = _error(bob.get("/jobs", params={"user": "alice"}), 403)
            assert refused["field"] == "user" and "may list only their own" in refused["message"]
            # a refusal of the request as a whole names no field
            assert _error(bob.get("/users"), 403)["field"] is None


def test_an_empty_spec_names_the_body(tmp_path: Path) -> None:
    """``{}`` as a job or a sweep was a 422 naming no field (the spec's own check names
    none: it is about the spec as a whole)."""
    with live_server(tmp_path, start_loops=False) as live, live.client() as admin:
        for route in ("/jobs", "/sweeps"):
            refused = _error(admin.post(route, json={}), 422)
            assert refused["field"] == "body" and "spec is empty" in refused["message"]
