"""A project's members: only they (and the admins) own jobs in a project that has members;
a project without is open to every user. Checked on submission, for jobs, sweeps and
reruns; jobs already queued stay when a member is removed."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import live_server, spec, user_and_nodes, wait_state
from typer.testing import CliRunner

from danlu.core.cluster import Node, gpu_type
from danlu.core.errors import SpecError
from danlu.server.db import Database
from danlu.server.errors import PermissionDenied
from danlu.server.services import jobs, members, projects, users

T = 1_000_000.0
BODY = {"command": ["python", "train.py"]}


def test_only_members_and_admins_own_jobs_in_a_project_with_members(db: Database) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (Node("a", 2, gpu_type("H100")),), T)
        bob = users.create_user(s, "bob", now=T)
        root = users.create_user(s, "root2", role="admin", now=T)
        vision = projects.create_project(s, "vision", now=T)
        assert members.members(s, vision) == []  # open: anyone submits
        jobs.submit(s, {"name": "open", "project": "vision", **BODY}, bob, now=T)
        assert members.set_members(s, vision, ["alice", "alice"]) == ["alice"]
        jobs.submit(s, {"name": "mine", "project": "vision", **BODY}, alice, now=T)
        jobs.submit(s, {"name": "admin", "project": "vision", **BODY}, root, now=T)
        with pytest.raises(PermissionDenied, match="'bob' is not a member of project 'vision'"):
            jobs.submit(s, {"name": "theirs", "project": "vision", **BODY}, bob, now=T)
        as_bob = {"name": "for-bob", "project": "vision", "user": "bob", **BODY}
        with pytest.raises(PermissionDenied, match="'bob' is not a member"):
            jobs.submit(s, as_bob, root, now=T)  # the owner counts, not the caller
        jobs.submit(s, {"name": "default", **BODY}, bob, now=T)  # default stays open
        with pytest.raises(SpecError, match="unknown user") as raised:
            members.set_members(s, vision, ["alice", "nobody"])
        assert raised.value.field == "members"
        assert members.members_by_project(s) == {vision.id: ["alice"]}
        assert members.set_members(s, vision, []) == []
        jobs.submit(s, {"name": "open-again", "project": "vision", **BODY}, bob, now=T)


def test_the_api_and_the_cli_list_and_change_members(tmp_path: Path) -> None:
    from danlu.cli.main import app

    with live_server(tmp_path, fake_gpus="1x80GiB") as live, live.client() as c:
        for name in ("erin", "fred"):
            c.post("/users", json={"name": name}).raise_for_status()
        made = c.post("/projects", json={"name": "nlp", "members": ["erin"]}).json()
        assert made["members"] == ["erin"]
        bad = c.post("/projects", json={"name": "cv", "members": ["ghost"]})
        assert bad.status_code == 422 and bad.json()["error"]["field"] == "members"
        assert "cv" not in {p["name"] for p in c.get("/projects").json()}  # nothing made
        tokens = {
            name: c.post(f"/users/{name}/tokens", json={"name": "t"}).json()["token"]
            for name in ("erin", "fred")
        }
        with live.client(tokens["fred"]) as fred:
            refused = fred.post("/jobs", json=spec("x", "pass", project="nlp"))
            assert refused.status_code == 403
            assert "not a member of project 'nlp'" in refused.json()["error"]["message"]
            sweep = {
                "name": "s",
                "trial": spec("t", "pass", project="nlp"),
                "parameters": {"lr": {"values": [1, 2]}},
                "trials": 2,
            }
            assert fred.post("/sweeps", json=sweep).status_code == 403
        with live.client(tokens["erin"]) as erin:
            job = erin.post("/jobs", json=spec("y", "pass", project="nlp")).json()
            wait_state(erin, job["id"], "SUCCEEDED")
        changed = c.put("/projects/nlp", json={"members": ["fred"]}).json()
        assert changed["members"] == ["fred"]
        with live.client(tokens["erin"]) as erin:  # no longer a member: no rerun either
            assert erin.post(f"/jobs/{job['id']}/rerun").status_code == 403
        assert c.put("/projects/nlp", json={"priority": 3}).json()["members"] == ["fred"]
        flags = ["--url", live.url, "--token", live.token]
        runner = CliRunner()
        result = runner.invoke(app, ["project", "set", "nlp", "--members", "erin,fred", *flags])
        assert result.exit_code == 0 and "members: erin, fred" in " ".join(result.stdout.split())
        listed = runner.invoke(app, ["project", "ls", *flags])
        assert "members" in listed.stdout and "erin," in listed.stdout and "fred" in listed.stdout
        result = runner.invoke(app, ["project", "set", "nlp", "--members", "all", *flags])
        assert result.exit_code == 0 and "members: all" in " ".join(result.stdout.split())
        result = runner.invoke(app, ["project", "add", "ml", "--members", "erin", *flags])
        assert result.exit_code == 0 and "members: erin" in " ".join(result.stdout.split())
