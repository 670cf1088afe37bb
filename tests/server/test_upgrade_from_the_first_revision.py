"""An operator's upgrade: a database the first migration made, with users, a token, jobs and
(from revision 0014, which made them) a sweep, is migrated by a server of this version as it
starts, and every row is kept and served: each job's JSON has every field of
``docs/api.md``'s Job, its stored values as they were, and the old token still signs in.

Over real HTTP, on SQLite and on PostgreSQL (a database of its own, made for the test)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from helpers import live_server
from sqlalchemy import MetaData, Table, create_engine, insert

from danlu.server.db import current_revision, head_revision, upgrade_database

ALICE_TOKEN = "dl_0a1b2c3d_" + "k" * 40
"""A token of alice's stored at revision 0001 (only its sha256 is kept, as the server keeps
it): after the upgrade it still signs her in."""

JOB_FIELDS = {
    "id", "name", "project", "user", "priority", "state", "restarts", "preemptions",
    "submitted_at", "started_at", "finished_at", "deadline_at", "time_limit", "run_time",
    "energy_joules", "held_at", "waiting_on", "purged_at", "exit_code", "pending_reason",
    "launched", "end_reason", "allocation", "gpus", "gpu_memory", "batch_size", "micro_batch_limit",
    "checkpoint_step", "observed", "spec",
}  # fmt: skip
"""The Job object's fields as ``docs/api.md`` lists them."""

DONE_ID = "0123456789ab"
QUEUED_ID = "0123456789ac"
TRIAL_ID = "0123456789ad"
SWEEP_ID = "abcdef012345"
RESOURCES = {
    "gpus": {"min": 1, "max": 1},
    "gpu_memory": None,
    "gpu_fraction": None,
    "gpu_type": [],
    "cpus": 1.0,
    "memory": 0,
}
JOB_SPEC = {
    "name": "train",
    "shell": False,
    "command": ["python", "train.py"],
    "project": "default",
    "user": "default",
    "priority": 0,
    "env": {},
    "resources": RESOURCES,
    "training": {
        "global_batch_size": None,
        "min_batch_size": None,
        "max_batch_size": None,
        "model": None,
        "application": None,
        "expected_duration": None,
    },
    "preemptible": True,
    "max_restarts": 3,
    "checkpoint_dir": None,
    "deadline": None,
}
"""A job spec as revision 0001's danlu stored it (its ``JobSpec.model_dump``)."""
SWEEP_SPEC = {
    "name": "lr-search",
    "trial": {"command": ["python", "train.py"], "resources": {"gpus": 1}},
    "parameters": {"lr": {"values": [0.1, 0.2], "distribution": None, "low": None, "high": None}},
    "metric": {"name": "loss", "goal": "minimize"},
    "method": "grid",
    "trials": 2,
    "parallel": 1,
    "seed": 0,
    "early_stopping": None,
}
"""A sweep spec as revision 0014's danlu stored it (its ``SweepSpec.model_dump``)."""
TRIAL_SPEC = {
    **JOB_SPEC,
    "name": "lr-search-0",
    "env": {"DANLU_SWEEP_ID": SWEEP_ID, "DANLU_TRIAL": "0", "DANLU_HPARAMS": '{"lr": 0.1}'},
    "training": {**JOB_SPEC["training"], "family": None},
    "depends_on": [],
}
"""Its first trial's job spec, as revision 0014's danlu stored it."""


def _insert(url: str, table: str, rows: list[dict[str, Any]]) -> None:
    """Insert ``rows`` into ``table`` as the database's schema has it now (reflected, so that
    only the columns of that revision are named)."""
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            reflected = Table(table, MetaData(), autoload_with=conn)
            for row in rows:  # one by one: the rows need not name the same columns
                conn.execute(insert(reflected), row)
    finally:
        engine.dispose()


def _job(
    job_id: str, user: int, state: str, *, spec: dict[str, Any], **values: Any
) -> dict[str, Any]:
    """A ``jobs`` row of revision 0001's columns."""
    row: dict[str, Any] = {
        "id": job_id,
        "name": spec["name"],
        "project_id": 1,
        "user_id": user,
        "priority": 0,
        "spec": spec,
        "state": state,
        "restarts": 0,
        "preemptions": 0,
        "attempt": 0,
        "submitted_at": 1_000.0,
        "attained_service": 0.0,
        "run_time": 0.0,
        "version": 1,
    }
    row.update(values)
    return row


def _fill_first_revision(url: str) -> None:
    """Users, a project, alice's token and two jobs (one ended, one queued), each with its
    events and the ended one with a metric record, in revision 0001's schema."""
    _insert(
        url,
        "users",
        [
            {"id": 1, "name": "admin", "role": "admin", "created_at": 1.0},
            {"id": 2, "name": "alice", "role": "user", "created_at": 2.0},
        ],
    )
    _insert(
        url,
        "projects",
        [{"id": 1, "name": "default", "priority": 0, "quota_gpus": 4.0, "created_at": 1.0}],
    )
    _insert(
        url,
        "api_tokens",
        [
            {
                "user_id": 2,
                "name": "laptop",
                "prefix": "0a1b2c3d",
                "token_hash": hashlib.sha256(ALICE_TOKEN.encode()).hexdigest(),
                "created_at": 2.0,
            }
        ],
    )
    _insert(
        url,
        "jobs",
        [
            _job(
                DONE_ID,
                2,
                "SUCCEEDED",
                spec=JOB_SPEC,
                priority=7,
                started_at=1_010.0,
                finished_at=1_100.0,
                run_time=90.0,
                exit_code=0,
                checkpoint_step=40,
                batch_size=64,
            ),
            _job(QUEUED_ID, 2, "PENDING", spec={**JOB_SPEC, "name": "queued"}, priority=-3),
        ],
    )
    _insert(
        url,
        "job_events",
        [
            {"job_id": DONE_ID, "time": 1_000.0, "old": None, "new": "PENDING", "reason": "s"},
            {"job_id": DONE_ID, "time": 1_010.0, "old": "PENDING", "new": "RUNNING", "reason": ""},
            {
                "job_id": DONE_ID,
                "time": 1_100.0,
                "old": "RUNNING",
                "new": "SUCCEEDED",
                "reason": "exited 0",
            },
            {"job_id": QUEUED_ID, "time": 1_000.0, "old": None, "new": "PENDING", "reason": "s"},
        ],
    )
    _insert(
        url,
        "job_metrics",
        [{"job_id": DONE_ID, "step": 40, "time": 1_090.0, "data": {"loss": 0.5}}],
    )


def _fill_sweep(url: str) -> None:
    """A finished sweep of alice's and its one trial job, in revision 0014's schema."""
    _insert(
        url,
        "sweeps",
        [
            {
                "id": SWEEP_ID,
                "name": "lr-search",
                "user_id": 2,
                "spec": SWEEP_SPEC,
                "state": "DONE",
                "submitted": 1,
                "reason": "every trial ended",
                "created_at": 1_200.0,
                "finished_at": 1_300.0,
            }
        ],
    )
    _insert(
        url,
        "jobs",
        [
            _job(
                TRIAL_ID,
                2,
                "SUCCEEDED",
                spec=TRIAL_SPEC,
                submitted_at=1_200.0,
                started_at=1_210.0,
                finished_at=1_290.0,
                exit_code=0,
                sweep_id=SWEEP_ID,
                trial=0,
            )
        ],
    )
    _insert(
        url,
        "job_metrics",
        [{"job_id": TRIAL_ID, "step": 5, "time": 1_280.0, "data": {"loss": 0.25}}],
    )


def test_a_database_of_the_first_revision_is_upgraded_and_served_whole(
    fresh_url: str, tmp_path: Path
) -> None:
    upgrade_database(fresh_url, "0001")
    _fill_first_revision(fresh_url)
    upgrade_database(fresh_url, "0014")
    _fill_sweep(fresh_url)

    with live_server(tmp_path, db_url=fresh_url, start_loops=False) as live:
        engine = create_engine(fresh_url)
        try:
            assert current_revision(engine) == head_revision()
        finally:
            engine.dispose()
        with live.client() as admin, live.client(ALICE_TOKEN) as alice:
            me = alice.get("/users/me")
            assert me.status_code == 200, me.text
            assert me.json()["name"] == "alice"
            names = [user["name"] for user in admin.get("/users").json()]
            assert names == ["admin", "alice"]
            tokens = alice.get("/users/alice/tokens").json()
            assert [(t["prefix"], t["name"]) for t in tokens] == [("0a1b2c3d", "laptop")]
            projects = {p["name"]: p for p in admin.get("/projects").json()}
            assert projects["default"]["quota_gpus"] == 4.0

            listed = alice.get("/jobs")
            assert listed.status_code == 200, listed.text
            assert [job["id"] for job in listed.json()] == [TRIAL_ID, QUEUED_ID, DONE_ID]
            for job in listed.json():
                assert set(job) == JOB_FIELDS, job["id"]

            done = alice.get(f"/jobs/{DONE_ID}")
            assert done.status_code == 200, done.text
            body = done.json()
            assert set(body) == JOB_FIELDS
            assert {k: body[k] for k in ("name", "user", "project", "state", "priority")} == {
                "name": "train",
                "user": "alice",
                "project": "default",
                "state": "SUCCEEDED",
                "priority": 7,
            }
            assert (body["started_at"], body["finished_at"], body["run_time"]) == (
                1_010.0,
                1_100.0,
                90.0,
            )
            assert (body["exit_code"], body["checkpoint_step"], body["batch_size"]) == (0, 40, 64)
            assert body["end_reason"] == "exited 0"
            assert body["spec"]["command"] == ["python", "train.py"]
            assert body["gpus"] == 1
            events = alice.get(f"/jobs/{DONE_ID}/events").json()
            assert [e["new"] for e in events] == ["PENDING", "RUNNING", "SUCCEEDED"]
            metrics = alice.get(f"/jobs/{DONE_ID}/metrics").json()
            assert [(m["step"], m["loss"]) for m in metrics] == [(40, 0.5)]

            queued = alice.get(f"/jobs/{QUEUED_ID}").json()
            assert (queued["state"], queued["priority"], queued["end_reason"]) == (
                "PENDING",
                -3,
                None,
            )

            sweep = alice.get(f"/sweeps/{SWEEP_ID}")
            assert sweep.status_code == 200, sweep.text
            swept = sweep.json()
            assert (swept["name"], swept["user"], swept["state"], swept["total"]) == (
                "lr-search",
                "alice",
                "DONE",
                2,
            )
            assert [(t["job_id"], t["trial"], t["state"]) for t in swept["trials"]] == [
                (TRIAL_ID, 0, "SUCCEEDED")
            ]
            assert swept["trials"][0]["best"] == 0.25
            assert swept["best"] is not None and swept["best"]["job_id"] == TRIAL_ID
            assert swept["spec"]["metric"] == {"name": "loss", "goal": "minimize"}
            assert (swept["metric"], swept["goal"]) == ("loss", "minimize")
