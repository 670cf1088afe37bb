"""Listing sweeps by state: ``GET /sweeps?state=RUNNING`` (repeatable, as ``GET /jobs``), and
``danlu sweep ls --state``: the dashboard asks for the RUNNING ones however old they are
instead of scanning the newest 1,000. An unknown state is a 422 naming ``state``; without
``state`` the list is what it was (every state, newest first)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import live_server, user_and_nodes
from typer.testing import CliRunner

from danlu.cli.main import app
from danlu.core.cluster import Node, gpu_type
from danlu.core.errors import SpecError
from danlu.server.db import Database
from danlu.server.services import cluster, jobs, sweeps, users

NOW = 1_000_000.0
NODE = Node("a", 2, gpu_type("H100"))


def _sweep(name: str, gpus: int = 1) -> dict[str, Any]:
    return {
        "name": name,
        "trial": {"command": ["python", "train.py"], "resources": {"gpus": gpus}},
        "parameters": {"lr": {"values": [0.1]}},
        "method": "grid",
    }


def _names(rows: list[Any]) -> list[str]:
    return [row.name for row in rows]


def test_sweeps_are_listed_by_state_newest_first(db: Database) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        bob = users.create_user(s, "bob", now=NOW)
        old = sweeps.create(s, _sweep("old"), alice, now=NOW)  # RUNNING, the oldest
        done = sweeps.create(s, _sweep("done"), alice, now=NOW + 1)
        jobs.cancel_job(s, sweeps.results(s, done)[0].job_id, alice, now=NOW + 2)
        sweeps.advance(s, done.id, NOW + 3)  # its one trial ended: DONE
        failed = sweeps.create(s, _sweep("failed", gpus=2), alice, now=NOW + 4)
        jobs.cancel_job(s, sweeps.results(s, failed)[0].job_id, alice, now=NOW + 5)
        cluster.replace_inventory(s, [Node("a", 1, gpu_type("H100"))], fake=True, now=NOW + 6)
        failed.submitted = 0  # its trial must be submitted again, and 2 GPUs never fit now
        sweeps.advance(s, failed.id, NOW + 7)
        cluster.replace_inventory(s, [NODE], fake=True, now=NOW + 8)
        cancelled = sweeps.create(s, _sweep("cancelled"), alice, now=NOW + 9)
        sweeps.cancel(s, cancelled.id, alice, now=NOW + 10)
        theirs = sweeps.create(s, _sweep("theirs"), bob, now=NOW + 11)  # RUNNING, bob's
        for i in range(3):
            sweeps.create(s, _sweep(f"new{i}"), alice, now=NOW + 12 + i)
        states = {sw.name: sw.state for sw in sweeps.list_sweeps(s)}
        assert (states["old"], states["done"], states["failed"]) == ("RUNNING", "DONE", "FAILED")
        assert (states["cancelled"], states["theirs"]) == ("CANCELLED", "RUNNING")

        every = ["new2", "new1", "new0", "theirs", "cancelled", "failed", "done", "old"]
        assert _names(sweeps.list_sweeps(s)) == every  # no state: every one, as before
        running = sweeps.list_sweeps(s, states=["RUNNING"])
        assert _names(running) == ["new2", "new1", "new0", "theirs", "old"]
        assert _names(sweeps.list_sweeps(s, limit=1, states=["running"])) == ["new2"]
        ended = sweeps.list_sweeps(s, states=["DONE", "FAILED", "CANCELLED", "DONE"])
        assert _names(ended) == ["cancelled", "failed", "done"]
        assert _names(sweeps.list_sweeps(s, bob, states=["RUNNING"])) == ["theirs"]
        assert _names(sweeps.list_sweeps(s, bob, states=["DONE"])) == []
        assert theirs.user_id == bob.id and old.state == "RUNNING"
        for bad in ("PENDING", "", "RUNNING;"):
            with pytest.raises(SpecError) as refused:
                sweeps.list_sweeps(s, states=[bad])
            assert refused.value.field == "state"
            assert refused.value.message == (
                f"{bad!r} is not a sweep state; use one of RUNNING, DONE, CANCELLED, FAILED"
            )


def test_the_api_and_the_cli_list_sweeps_by_state(tmp_path: Path, db_url: str) -> None:
    with (
        live_server(tmp_path, fake_gpus="2x80GiB", db_url=db_url, start_loops=False) as live,
        live.client() as c,
    ):
        made = []
        for name in ("old", "ended", "new"):
            response = c.post("/sweeps", json=_sweep(name))
            assert response.status_code == 201, response.text
            made.append(response.json()["id"])
        old, ended, new = made
        c.post(f"/sweeps/{ended}/cancel").raise_for_status()

        def ids(**params: Any) -> list[str]:
            response = c.get("/sweeps", params=params)
            assert response.status_code == 200, response.text
            return [sweep["id"] for sweep in response.json()]

        assert ids() == [new, ended, old]  # the default is unchanged
        assert ids(limit=2) == [new, ended]
        assert ids(state="RUNNING") == [new, old]
        assert ids(state="RUNNING", limit=1) == [new]
        assert ids(state=["CANCELLED", "running"]) == [new, ended, old]
        assert ids(state="DONE") == []
        for bad in ("PENDING", "bogus"):
            refused = c.get("/sweeps", params={"state": ["RUNNING", bad]})
            assert refused.status_code == 422, refused.text
            error = refused.json()["error"]
            assert error["field"] == "state"
            assert error["message"] == (
                f"{bad!r} is not a sweep state; use one of RUNNING, DONE, CANCELLED, FAILED"
            )

        flags = ["--url", live.url, "--token", live.token]

        def danlu(*args: str) -> tuple[int, str]:
            result = CliRunner().invoke(app, ["sweep", "ls", *args, *flags])
            return result.exit_code, result.stdout + result.stderr

        code, out = danlu("--state", "RUNNING", "--json")
        assert code == 0, out
        assert [sweep["id"] for sweep in json.loads(out)] == [new, old]
        code, out = danlu("-s", "running", "--state", "CANCELLED,DONE", "--limit", "2", "--json")
        assert code == 0, out
        assert [sweep["id"] for sweep in json.loads(out)] == [new, ended]
        code, out = danlu("--json")
        assert code == 0 and [sweep["id"] for sweep in json.loads(out)] == [new, ended, old]
        code, out = danlu("--state", "PENDING")
        assert code == 2, out
        # the flag, not the query field; the states the server's words
        assert " ".join(out.split()) == (
            "error: --state: 'PENDING' is not a sweep state; use one of RUNNING, DONE, "
            "CANCELLED, FAILED"
        )
