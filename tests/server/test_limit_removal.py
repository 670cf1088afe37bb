"""Removing an unfinished job's time limit or deadline (``PATCH /jobs/{id}`` with ``"none"``
or Slurm's ``"UNLIMITED"``, :mod:`danlu.server.services.job_changes`): the job's limits are
gone (an event says so), the reconcile loop's limit check stops it no more, a stop already
requested stays requested (as a new limit is refused then), null in a change still leaves a
field as it is, and a job spec refuses the word. A rerun's changes (``POST /jobs/{id}/rerun``)
read both as a change does: null keeps the finished job's limit, the word removes it."""

from __future__ import annotations

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
from danlu.server.errors import ConflictError
from danlu.server.services import events, jobs, users
from danlu.server.services.job_changes import JobChange, change_job, spec_with
from danlu.server.upkeep import Upkeep, expire

NOW = 1_000_000.0
NODE = Node("a", 4, gpu_type("H100"))
BODY = {"name": "train", "command": ["python", "train.py"], "resources": {"gpus": 1}}
SHARE = [{"node": "a", "gpu": 0, "milli": 1000, "memory": 80 * GiB}]


def _running(db: Database) -> tuple[User, str]:
    """alice and a job of hers RUNNING (launched) since ``NOW + 10``, with a time limit of
    an hour and a deadline a day after its submission."""
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        job = jobs.submit(s, {**BODY, "time_limit": "1h", "deadline": "1d"}, alice, now=NOW)
        jobs.change_state(s, job, JobState.RUNNING, "scheduled", NOW + 10, allocation=SHARE)
        job.launched_attempt = job.attempt  # the executor took its launch
        return alice, job.id


def test_a_limit_passed_and_removed_before_the_check_does_not_stop_the_job(
    sqlite_db: Database,
) -> None:
    alice, job_id = _running(sqlite_db)
    late = NOW + 2 * 86400  # past both: it ran two days of its hour, its deadline a day ago
    with sqlite_db.read_session() as s:
        assert [job for job, _ in jobs.over_time(s, late)] == [job_id]
        assert [job for job, _ in jobs.expired(s, late)] == [job_id]
    change = JobChange(time_limit="None", deadline=" UNLIMITED ")
    with sqlite_db.session() as s:
        changed = change_job(s, job_id, change, alice, now=late)
    assert changed.notes == []
    out = Upkeep()
    expire(sqlite_db, late + 1, out)  # the reconcile loop's limit check
    assert (out.timed_out, out.expired, out.errors) == ([], [], [])
    with sqlite_db.read_session() as s:
        job = jobs.get_job(s, job_id)
        assert (job.state, job.cancel_requested_at) == ("RUNNING", None)
        assert (job.time_limit, job.deadline_at) == (None, None)
        spec = jobs.job_spec(job)
        assert (spec.time_limit, spec.deadline) == (None, None)
        last = events.list_events(s, job_id)[-1]
        said = (last.old, last.new, last.reason)
    assert said == (
        "RUNNING",
        "RUNNING",
        "changed by alice: time_limit 1h -> none; deadline 1d -> none",
    )


def test_a_stop_already_requested_stays_when_the_limit_is_removed(sqlite_db: Database) -> None:
    alice, job_id = _running(sqlite_db)
    late = NOW + 10 + 3600
    out = Upkeep()
    expire(sqlite_db, late, out)
    assert out.timed_out == [job_id]  # its stop requested: the pass stops its run
    for change in (JobChange(time_limit="4h"), JobChange(time_limit="none")):
        with sqlite_db.session() as s, pytest.raises(ConflictError) as refused:
            change_job(s, job_id, change, alice, now=late + 1)
        said = str(refused.value)
        assert "is being cancelled (time limit reached" in said, said
        assert said.endswith("its time_limit stays as it is"), said
    with sqlite_db.read_session() as s:
        job = jobs.get_job(s, job_id)
        assert job.cancel_requested_at == late and job.time_limit == 3600
        assert job.cancel_reason is not None and job.cancel_reason.startswith("time limit")


def test_a_job_spec_refuses_the_word(sqlite_db: Database) -> None:
    alice, job_id = _running(sqlite_db)
    for word in ("none", "UNLIMITED"):
        with sqlite_db.session() as s, pytest.raises(SpecError) as refused:
            jobs.submit(s, {**BODY, "time_limit": word}, alice, now=NOW)
        assert refused.value.field == "time_limit"
        with sqlite_db.read_session() as s, pytest.raises(SpecError) as refused:
            spec_with(jobs.job_spec(jobs.get_job(s, job_id)), {"deadline": word})  # as a spec
        assert refused.value.field == "deadline"
    with sqlite_db.session() as s, pytest.raises(SpecError) as refused:
        change_job(s, job_id, JobChange(deadline="nonee"), alice, now=NOW + 20)
    assert refused.value.field == "deadline" and "write none" in refused.value.message


def test_patch_removes_a_limit_with_the_word_and_keeps_it_for_null(tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path, fake_gpus="4x80GiB")
    db = Database(settings.db_url)
    with TestClient(create_app(settings, start_loops=False)) as http:
        with db.session() as s:
            token = users.issue_token(s, users.create_user(s, "alice", now=NOW), now=NOW)
        db.dispose()
        http.headers["Authorization"] = f"Bearer {token}"
        job = http.post("/api/v1/jobs", json={**BODY, "time_limit": "1h", "deadline": "1d"})
        path = f"/api/v1/jobs/{job.json()['id']}"
        kept = http.patch(path, json={"time_limit": None, "deadline": None, "priority": 1})
        assert kept.status_code == 200, kept.text
        assert kept.json()["time_limit"] == 3600 and kept.json()["deadline_at"] is not None
        refused = http.patch(path, json={"time_limit": "unlimitd"})
        assert refused.status_code == 422, refused.text
        error = refused.json()["error"]
        assert error["field"] == "time_limit" and "write none (or UNLIMITED)" in error["message"]
        removed = http.patch(path, json={"time_limit": "none", "deadline": "Unlimited"})
        assert removed.status_code == 200, removed.text
        out = removed.json()
        assert (out["time_limit"], out["deadline_at"], out["notes"]) == (None, None, [])
        assert (out["spec"]["time_limit"], out["spec"]["deadline"]) == (None, None)


def test_a_rerun_keeps_a_limit_for_null_and_removes_it_for_the_word(tmp_path: Path) -> None:
    """A rerun's null dropped the finished job's time limit and deadline, where a PATCH's
    leaves them, and its ``"none"`` was refused as no duration."""
    settings = load_settings(home=tmp_path, fake_gpus="4x80GiB")
    db = Database(settings.db_url)
    with TestClient(create_app(settings, start_loops=False)) as http:
        with db.session() as s:
            token = users.issue_token(s, users.create_user(s, "alice", now=NOW), now=NOW)
        db.dispose()
        http.headers["Authorization"] = f"Bearer {token}"
        job = http.post("/api/v1/jobs", json={**BODY, "time_limit": "1h", "deadline": "1d"})
        first = job.json()["id"]
        assert http.post(f"/api/v1/jobs/{first}/cancel").status_code == 200
        rerun = f"/api/v1/jobs/{first}/rerun"

        def limits(body: dict[str, object]) -> tuple[object, object, str]:
            """The new job's spec's time limit and deadline, and its first event."""
            again = http.post(rerun, json=body)
            assert again.status_code == 201, again.text
            new = again.json()["id"]
            told = http.get(f"/api/v1/jobs/{new}/events").json()[0]["reason"]
            return again.json()["spec"]["time_limit"], again.json()["spec"]["deadline"], told

        kept = limits({"time_limit": None, "deadline": None})
        assert kept == (3600, 86400, f"submitted by alice (rerun of {first})")
        removed = limits({"time_limit": "none", "deadline": " UNLIMITED"})
        assert removed == (
            None,
            None,
            f"submitted by alice (rerun of {first}; changed time_limit, deadline)",
        )
        assert limits({"deadline": None, "time_limit": "2h"})[:2] == (7200, 86400)
        refused = http.post(rerun, json={"deadline": "nevr"})
        assert refused.status_code == 422, refused.text
        error = refused.json()["error"]
        assert error["field"] == "deadline" and "write none (or UNLIMITED)" in error["message"]
