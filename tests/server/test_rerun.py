"""``POST /jobs/{id}/rerun`` and ``danlu rerun``: a finished job is submitted again as a new
job with its spec, without its dependencies or its sweep membership (a trial's parameters and
an array task's index stay); an unfinished one is a conflict."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import live_server, spec, user_and_nodes, wait_state

from danlu.core.cluster import Node, gpu_type
from danlu.core.state import JobState
from danlu.server.db import Database
from danlu.server.errors import ConflictError
from danlu.server.services import jobs

NOW = 1_000_000.0
NODE = Node("a", 2, gpu_type("H100"))


def test_a_rerun_spec_leaves_out_dependencies_and_sweep_membership(db: Database) -> None:
    body = {"command": ["python", "train.py"], "resources": {"gpus": 1}}
    env = {"SEED": "3", "DANLU_TRIAL": "4", "DANLU_SWEEP_ID": "ab", "DANLU_ARRAY_INDEX": "7"}
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        first = jobs.submit(s, {"name": "prep", **body}, alice, now=NOW)
        later = jobs.submit(
            s, {"name": "train", "env": env, "depends_on": [first.id], **body}, alice, now=NOW
        )
        with pytest.raises(ConflictError, match="is PENDING; a rerun takes a finished job"):
            jobs.rerun_spec(later)
        jobs.change_state(s, later, JobState.CANCELLED, "test", NOW + 1)
        again = jobs.rerun_spec(later)
        assert (again.name, again.depends_on) == ("train", [])
        assert again.env == {"SEED": "3", "DANLU_ARRAY_INDEX": "7"}  # it redoes task 7
        assert again.resources == jobs.job_spec(later).resources


def test_danlu_rerun_submits_a_finished_job_again(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from danlu.cli.main import app

    with live_server(tmp_path, fake_gpus="2x80GiB", policy="fifo") as live, live.client() as c:
        failed = c.post("/jobs", json=spec("flaky", "import sys; sys.exit(3)", max_restarts=0))
        first = failed.json()["id"]
        wait_state(c, first, "FAILED")
        flags = ["--url", live.url, "--token", live.token]
        result = CliRunner().invoke(app, ["rerun", first, "--wait", *flags])
        assert result.exit_code == 1, result.output  # the new job failed too
        assert "submitted job" in result.stdout and "FAILED (exit 3)" in result.stdout
        runs = [j for j in c.get("/jobs").json() if j["name"] == "flaky"]
        assert len(runs) == 2 and {j["state"] for j in runs} == {"FAILED"}
        running = c.post("/jobs", json=spec("long", "import time; time.sleep(60)")).json()
        refused = c.post(f"/jobs/{running['id']}/rerun")
        assert refused.status_code == 409 and "cancel it first" in refused.text
        assert c.post("/jobs/nope/rerun").status_code == 404
        c.post(f"/jobs/{running['id']}/cancel")
        wait_state(c, running["id"], "CANCELLED")
        again = c.post(f"/jobs/{running['id']}/rerun")
        assert again.status_code == 201 and again.json()["id"] != running["id"]
        assert again.json()["spec"]["command"] == running["spec"]["command"]
        c.post(f"/jobs/{again.json()['id']}/cancel")
