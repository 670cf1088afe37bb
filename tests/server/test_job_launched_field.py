"""A Job's ``launched`` (docs/api.md "Job"): false while the job is RUNNING, placed on its
GPUs, but the executor has not launched its current run (``launched_attempt`` below
``attempt``: its cluster cannot be reached, or the executor's next pass has not come yet),
true once it has and in every other state. Its ``state`` stays RUNNING: a filter on it lists
the job. Before the field, nothing in a Job told such a job from one that runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from danlu.config import load_settings
from danlu.core.state import JobState
from danlu.core.units import GiB
from danlu.server.app import create_app
from danlu.server.db import Database
from danlu.server.services import jobs, users
from danlu.server.services.job_reasons import UNREACHED

NOW = 1_000_000.0
BODY = {"name": "train", "command": ["python", "train.py"], "resources": {"gpus": 1}}
SHARE = [{"node": "localhost", "gpu": 0, "milli": 1000, "memory": 80 * GiB}]


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[TestClient, Database]]:
    """The API app (no loops: nothing launches) on SQLite with one fake GPU, and its store;
    requests as alice."""
    settings = load_settings(home=tmp_path, fake_gpus="1x80GiB")
    db = Database(settings.db_url)
    with TestClient(create_app(settings, start_loops=False)) as http:
        with db.session() as s:
            alice = users.create_user(s, "alice", now=NOW)
            http.headers["Authorization"] = f"Bearer {users.issue_token(s, alice, now=NOW)}"
        try:
            yield http, db
        finally:
            db.dispose()


def test_a_placed_job_not_launched_says_so_until_its_launch(
    api: tuple[TestClient, Database],
) -> None:
    http, db = api
    job_id = http.post("/api/v1/jobs", json=BODY).json()["id"]
    assert http.get(f"/api/v1/jobs/{job_id}").json()["launched"] is True  # PENDING
    with db.session() as s:  # placed by the scheduler; the cluster cannot be reached
        row = jobs.get_job(s, job_id)
        jobs.change_state(s, row, JobState.RUNNING, "scheduled", NOW + 1, allocation=SHARE)
        row.pending_reason = f"{UNREACHED} (sbatch: connection refused): it keeps its GPUs"
        assert (row.launched_attempt, row.attempt) == (0, 1)
    placed = http.get(f"/api/v1/jobs/{job_id}").json()
    assert (placed["state"], placed["launched"]) == ("RUNNING", False)
    assert placed["pending_reason"].startswith(UNREACHED)
    (listed,) = http.get("/api/v1/jobs", params={"state": "RUNNING"}).json()  # still RUNNING
    assert (listed["id"], listed["launched"]) == (job_id, False)
    with db.session() as s:  # the executor took its launch
        row = jobs.get_job(s, job_id)
        row.launched_attempt, row.pending_reason = row.attempt, None
    assert http.get(f"/api/v1/jobs/{job_id}").json()["launched"] is True
    ended = http.post(f"/api/v1/jobs/{job_id}/cancel").json()  # still RUNNING: it stops
    assert ended["launched"] is True


def test_a_run_recorded_before_launches_were_kept_reads_launched(
    api: tuple[TestClient, Database],
) -> None:
    """A null ``launched_attempt`` (a run recorded before the column) is counted as launched,
    as :func:`~danlu.server.services.job_reasons.not_launched` counts it."""
    http, db = api
    job_id = http.post("/api/v1/jobs", json=BODY).json()["id"]
    with db.session() as s:
        row = jobs.get_job(s, job_id)
        jobs.change_state(s, row, JobState.RUNNING, "scheduled", NOW + 1, allocation=SHARE)
        row.launched_attempt = None
    assert http.get(f"/api/v1/jobs/{job_id}").json()["launched"] is True
