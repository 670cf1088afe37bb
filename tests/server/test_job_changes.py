"""Changing an unfinished job beyond its priority (``PATCH /jobs/{id}``,
:mod:`danlu.server.services.job_changes`): a PENDING job's resources, time limit, deadline
and max_restarts, a RUNNING one's priority, time limit and deadline only (the refusal names
the fields that need a PENDING job), validated as a submission, an event recording each
change; the scheduler's cached view of a job sees its new resources. And a rerun with
changes (``POST /jobs/{id}/rerun`` with a body) is validated and recorded on the new job."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from helpers import user_and_nodes

from danlu.config import load_settings
from danlu.core.cluster import Node, gpu_type
from danlu.core.errors import SpecError
from danlu.core.state import JobState
from danlu.core.units import GiB
from danlu.server.app import create_app
from danlu.server.db import Database, User
from danlu.server.errors import AdmissionError, ConflictError
from danlu.server.services import events, jobs, users, view
from danlu.server.services.job_changes import JobChange, change_job

NOW = 1_000_000.0
NODE = Node("a", 4, gpu_type("H100"))
BODY = {"name": "train", "command": ["python", "train.py"], "resources": {"gpus": 1}}
SHARE = [{"node": "a", "gpu": 0, "milli": 1000, "memory": 80 * GiB}]


def _queued(db: Database) -> tuple[User, str]:
    """alice and a PENDING job of hers (one GPU, a time limit of an hour)."""
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        return alice, jobs.submit(s, {**BODY, "time_limit": "1h"}, alice, now=NOW).id


def test_a_queued_job_changes_its_resources_and_limits_with_an_event(sqlite_db: Database) -> None:
    alice, job_id = _queued(sqlite_db)
    cache = view.StatusCache()  # the reconcile loop's, across rounds
    with sqlite_db.read_session() as s:
        (before,) = view.build_snapshot(s, NOW + 1, cache).view.pending
    assert before.request.gpus == 1
    change = JobChange(
        time_limit="2h",
        deadline="1d",
        max_restarts=0,
        resources={"gpus": 2, "gpu_memory": "20GiB"},
    )
    with sqlite_db.session() as s:
        changed = change_job(s, job_id, change, alice, now=NOW + 2)
    assert changed.notes == []
    with sqlite_db.read_session() as s:
        job = jobs.get_job(s, job_id)
        spec = jobs.job_spec(job)
        assert (spec.resources.gpus.min, spec.resources.gpu_memory) == (2, 20 * GiB)
        assert (spec.time_limit, spec.deadline, spec.max_restarts) == (7200, 86400, 0)
        assert (job.time_limit, job.deadline_at) == (7200, NOW + 86400)
        assert job.gpu_memory_per_gpu == 20 * GiB
        (after,) = view.build_snapshot(s, NOW + 3, cache).view.pending
        rows = events.list_events(s, job_id)
        assert events.replay(rows) is JobState.PENDING
        said = (rows[-1].old, rows[-1].new, rows[-1].reason)
    # the scheduler's cache of the job's parsed spec saw the change
    assert (after.request.gpus, after.request.gpu_memory) == (2, 20 * GiB)
    assert after.request.expected_duration == 7200
    assert said == (
        "PENDING",
        "PENDING",
        "changed by alice: time_limit 1h -> 2h; deadline none -> 1d; max_restarts 3 -> 0; "
        "resources.gpus 1 -> 2; resources.gpu_memory none -> 20.0GiB",
    )


def test_new_resources_are_checked_as_a_submission_and_named(sqlite_db: Database) -> None:
    alice, job_id = _queued(sqlite_db)
    refusals = [
        (JobChange(resources={"gpus": 8}), AdmissionError, "resources.gpus"),
        (JobChange(resources={"gpus": 0}), SpecError, "resources.gpus"),
        (JobChange(resources={"gpu_type": "V100"}), AdmissionError, "resources.gpu_type"),
        (JobChange(resources={"gpu": 2}), SpecError, "resources.gpu"),
        (JobChange(time_limit="soon"), SpecError, "time_limit"),
        (JobChange(max_restarts=-1), SpecError, "max_restarts"),
    ]
    for change, kind, field in refusals:
        with sqlite_db.session() as s, pytest.raises(kind) as refused:
            change_job(s, job_id, change, alice, now=NOW + 1)
        assert refused.value.field == field, (change, refused.value)
    with sqlite_db.read_session() as s:  # nothing changed, nothing recorded
        job = jobs.get_job(s, job_id)
        assert (jobs.job_spec(job).resources.gpus.min, job.time_limit) == (1, 3600)
        assert len(events.list_events(s, job_id)) == 1


def test_a_running_job_changes_only_what_needs_no_restart(sqlite_db: Database) -> None:
    alice, job_id = _queued(sqlite_db)
    with sqlite_db.session() as s:
        job = jobs.get_job(s, job_id)
        jobs.change_state(s, job, JobState.RUNNING, "scheduled", NOW + 10, allocation=SHARE)
        job.launched_attempt = job.attempt  # the executor took its launch
    for change in (JobChange(resources={"gpus": 2}), JobChange(time_limit="3h", max_restarts=1)):
        with sqlite_db.session() as s, pytest.raises(ConflictError) as refused:
            change_job(s, job_id, change, alice, now=NOW + 20)
        said = str(refused.value)
        assert "is RUNNING" in said and "only while it is PENDING" in said, said
        assert "max_restarts" in said or "resources" in said
        assert f"danlu hold {job_id}" in said
    with sqlite_db.session() as s:  # it has run 1h50m: a limit of 1h30m is passed
        changed = change_job(
            s, job_id, JobChange(priority=5, time_limit="90m"), alice, now=NOW + 10 + 6600
        )
    assert changed.job.time_limit == 5400 and changed.job.priority == 5
    assert len(changed.notes) == 1 and "the next pass stops it" in changed.notes[0]
    with sqlite_db.read_session() as s:
        assert [job for job, _ in jobs.over_time(s, NOW + 10 + 6600)] == [job_id]
        last = events.list_events(s, job_id)[-1]
        said = (last.old, last.new, last.reason)
    assert said == (
        "RUNNING",
        "RUNNING",
        "changed by alice: priority 0 -> 5; time_limit 1h -> 1h30m",
    )


def test_a_finished_job_changes_nothing(sqlite_db: Database) -> None:
    alice, job_id = _queued(sqlite_db)
    with sqlite_db.session() as s:
        jobs.cancel_job(s, job_id, alice, now=NOW + 1)
    with sqlite_db.session() as s, pytest.raises(ConflictError, match="already finished"):
        change_job(s, job_id, JobChange(deadline="2h"), alice, now=NOW + 2)


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[TestClient, Database]]:
    """The API app (no loops) on a home with one fake 4-GPU node, with alice's token, and
    its store."""
    settings = load_settings(home=tmp_path, fake_gpus="4x80GiB")
    app = create_app(settings, start_loops=False)
    db = Database(settings.db_url)
    with TestClient(app) as http:
        with db.session() as s:
            alice = users.create_user(s, "alice", now=NOW)
            token = users.issue_token(s, alice, now=NOW)
        http.headers["Authorization"] = f"Bearer {token}"
        try:
            yield http, db
        finally:
            db.dispose()


def test_patch_changes_a_queued_job_and_refuses_a_running_ones_resources(
    api: tuple[TestClient, Database],
) -> None:
    http, db = api
    job = http.post("/api/v1/jobs", json=BODY).json()
    changed = http.patch(
        f"/api/v1/jobs/{job['id']}",
        json={"resources": {"gpu_memory": "auto"}, "time_limit": "2h", "max_restarts": 1},
    )
    assert changed.status_code == 200, changed.text
    out = changed.json()
    assert (out["time_limit"], out["spec"]["max_restarts"]) == (7200, 1)
    assert out["spec"]["resources"]["gpu_memory"] == "auto"
    assert any("whole GPUs" in note for note in out["notes"]), out["notes"]  # not estimated
    refused = http.patch(f"/api/v1/jobs/{job['id']}", json={"time_limit": "0"})
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "time_limit"
    with db.session() as s:
        row = jobs.get_job(s, job["id"])
        jobs.change_state(s, row, JobState.RUNNING, "scheduled", allocation=SHARE)
    refused = http.patch(f"/api/v1/jobs/{job['id']}", json={"resources": {"gpus": 2}})
    assert refused.status_code == 409 and "only while it is PENDING" in refused.text
    later = http.patch(f"/api/v1/jobs/{job['id']}", json={"deadline": "1d"})
    assert later.status_code == 200 and later.json()["deadline_at"] is not None


def test_a_rerun_with_changes_is_validated_and_recorded_on_the_new_job(
    api: tuple[TestClient, Database],
) -> None:
    http, _ = api
    first = http.post("/api/v1/jobs", json={**BODY, "env": {"SEED": "1", "MODE": "a"}}).json()
    http.post(f"/api/v1/jobs/{first['id']}/cancel")
    refused = http.post(f"/api/v1/jobs/{first['id']}/rerun", json={"resources": {"gpus": 9}})
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "resources.gpus"
    refused = http.post(f"/api/v1/jobs/{first['id']}/rerun", json={"time_limit": "never"})
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "time_limit"
    changes = {"resources": {"gpus": 2}, "time_limit": "4h", "env": {"SEED": "2"}, "priority": 3}
    again = http.post(f"/api/v1/jobs/{first['id']}/rerun", json=changes)
    assert again.status_code == 201, again.text
    spec = again.json()["spec"]
    assert (spec["resources"]["gpus"], spec["time_limit"], spec["priority"]) == (
        {"min": 2, "max": 2},
        14400,
        3,
    )
    assert spec["env"] == {"SEED": "2", "MODE": "a"} and again.json()["notes"] == []
    first_event = http.get(f"/api/v1/jobs/{again.json()['id']}/events").json()[0]
    assert first_event["reason"] == (
        f"submitted by alice (rerun of {first['id']}; changed resources.gpus, time_limit, "
        "env.SEED, priority)"
    )
