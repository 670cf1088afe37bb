"""Metric ingestion, on SQLite and PostgreSQL: a batch whose derived
measurement would not be finite (two step times of 1e308: their median overflows) is stored
without it instead of failing (PostgreSQL's JSON has no infinity: the batch was a 500, sent
again forever by danlu.train's reporter), and a job the retention purged takes no more
metric records (409 naming the retention, as its logs), also when the purge and a report
race."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from helpers import live_server
from interleave import Interleave
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from danlu.core.cluster import Allocation, GpuShare
from danlu.core.spec import parse_spec
from danlu.core.units import GiB
from danlu.sched.view import Plan, Start
from danlu.server.db import Database
from danlu.server.db.models import JobMetric
from danlu.server.errors import ConflictError
from danlu.server.services import jobs, metrics, observe, retention, users
from danlu.server.services.record import apply_plan

NOW = 1_000_000.0
H100 = 80 * GiB


def _record(step: int, step_time: float, **over: Any) -> dict[str, Any]:
    """A danlu.train record of one GPU, no accumulation, batch 1."""
    base = {
        "step": step,
        "step_time_s": step_time,
        "micro_batch": 1,
        "accumulation": 1,
        "global_batch": 1,
        "world_size": 1,
    }
    return {**base, **over}


def _running(db: Database) -> str:
    """A job of alice's running on one GPU of node-0 (it is measured)."""
    with db.session() as s:
        body = {"name": "m", "command": ["true"], "resources": {"gpus": 1}}
        job_id = jobs.submit(s, body, users.get_user(s, "alice"), now=NOW).id
        share = GpuShare(0, 0, 1000, H100)
        apply_plan(s, Plan(starts=(Start(job_id, Allocation((share,))),)), NOW)
    return job_id


def _rows(db: Database, job_id: str) -> list[dict[str, Any]]:
    with db.read_session() as s:
        return [dict(m.data) for m in metrics.list_metrics(s, job_id)]


OVERFLOWING = {
    "step-times": [_record(1, 1e308), _record(2, 1e308)],
    "sync-times": [
        _record(i, 1.0, world_size=2, global_batch=2, sync_time_s=1e308) for i in (1, 2)
    ],
    "accumulated": [_record(i, 1e308, accumulation=2, global_batch=2) for i in (1, 2)],
}


@pytest.mark.parametrize("records", list(OVERFLOWING.values()), ids=list(OVERFLOWING))
def test_a_measurement_derived_from_huge_reports_is_finite(records: list[dict[str, Any]]) -> None:
    seen = observe.measurement(records)
    assert seen is None or all(math.isfinite(v) for v in seen.values()), seen
    assert seen is None or ("step_time" in seen) == ("sync_time" in seen)


def test_a_batch_whose_median_step_time_overflows_is_stored_without_a_step_time(
    seeded: Database,
) -> None:
    job_id = _running(seeded)
    with seeded.session() as s:
        assert metrics.ingest(s, jobs.get_job(s, job_id), OVERFLOWING["step-times"], NOW + 1) == 2
    with seeded.read_session() as s:
        stored = jobs.get_job(s, job_id).observed or {}  # no usable record: none at all
        assert "step_time" not in stored and "sync_time" not in stored
        assert all(math.isfinite(v) for v in stored.values())
    assert [r["step_time_s"] for r in _rows(seeded, job_id)] == [1e308, 1e308]
    # a sane report afterwards is measured as usual
    with seeded.session() as s:
        sane = [_record(3, 0.25), _record(4, 0.25)]
        assert metrics.ingest(s, jobs.get_job(s, job_id), sane, NOW + 2) == 2
    with seeded.read_session() as s:
        stored = jobs.get_job(s, job_id).observed
        assert stored is not None and (stored["step_time"], stored["sync_time"]) == (0.25, 0.0)


def test_a_stored_measurement_that_is_not_finite_is_dropped_as_a_whole() -> None:
    """A measurement SQLite once stored with ``Infinity`` (PostgreSQL could not) is neither
    kept by the next report nor shown to the policy; the step and sync times go together
    (the policy reads the sync time of every step time)."""
    shape = {"local_bsz": 1.0, "accum_steps": 0.0, "batch_size": 1.0, "num_replicas": 1.0}
    stored = {**shape, "step_time": math.inf, "sync_time": 0.0, "progress": 0.5}
    out = observe.merged(stored, {"progress": 0.5})
    assert out == {**shape, "progress": 0.5}
    spec = parse_spec(
        {
            "name": "e",
            "command": ["true"],
            "resources": {"gpus": "1..4"},
            "training": {"global_batch_size": 1},
        }
    )
    seen = observe.observed(spec, stored, [{"node": "a", "gpu": 0}])
    assert "step_time" not in seen and "sync_time" not in seen and seen["progress"] == 0.5


def _purged(db: Database) -> str:
    """A job of alice's, cancelled, with one record, purged by the retention."""
    with db.session() as s:
        body = {"name": "p", "command": ["true"], "resources": {"gpus": 1}}
        job_id = jobs.submit(s, body, users.get_user(s, "alice"), now=NOW).id
        jobs.cancel_job(s, job_id, reason="done", now=NOW + 1)
        metrics.ingest(s, jobs.get_job(s, job_id), [{"step": 1, "loss": 1.0}], now=NOW + 2)
    with db.session() as s:
        retention.purged(s, job_id, NOW + 3 * retention.DAY)
    return job_id


def _count(db: Database, job_id: str) -> int:
    with db.read_session() as s:
        query = select(func.count()).select_from(JobMetric).where(JobMetric.job_id == job_id)
        return int(s.scalar(query) or 0)


def test_a_purged_job_takes_no_more_metric_records(seeded: Database) -> None:
    job_id = _purged(seeded)
    with seeded.session() as s, pytest.raises(ConflictError) as refused:
        metrics.ingest(s, jobs.get_job(s, job_id), [{"step": 2, "loss": 0.5}], NOW + 4)
    assert str(refused.value) == (
        f"job {job_id}: its metric records were deleted by the retention "
        f"(DANLU_RETENTION_DAYS) at {NOW + 3 * retention.DAY:.0f}; it takes no new ones"
    )
    assert _count(seeded, job_id) == 0
    with seeded.read_session() as s:
        assert retention.due(s, 1, NOW + 400 * retention.DAY) == []


def test_a_report_racing_the_purge_is_deleted_with_the_rest(
    seeded: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The report's transaction holds the job's row when the purge comes: the purge waits
    for its commit (PostgreSQL) and deletes its records too."""
    with seeded.session() as s:
        body = {"name": "r", "command": ["true"], "resources": {"gpus": 1}}
        job_id = jobs.submit(s, body, users.get_user(s, "alice"), now=NOW).id
        jobs.cancel_job(s, job_id, reason="done", now=NOW + 1)
    race = Interleave(seeded)

    def report(s: Session) -> int:
        stored = metrics.ingest(s, jobs.get_job(s, job_id), [{"step": 1, "loss": 1.0}], NOW + 2)
        race.pause()  # stored, not committed
        return stored

    def purge(s: Session) -> None:
        retention.purged(s, job_id, NOW + 3 * retention.DAY)

    outcome = race.run(report, purge)
    assert (outcome.first_error, outcome.second_error) == (None, None)
    assert outcome.second_waited == (seeded.dialect == "postgresql")
    assert _count(seeded, job_id) == 0


def test_a_report_arriving_while_the_purge_commits_is_refused(seeded: Database) -> None:
    """The purge holds the job's row when the report comes: the report waits for its
    commit (PostgreSQL), then reads the job purged and stores nothing."""
    with seeded.session() as s:
        body = {"name": "r", "command": ["true"], "resources": {"gpus": 1}}
        job_id = jobs.submit(s, body, users.get_user(s, "alice"), now=NOW).id
        jobs.cancel_job(s, job_id, reason="done", now=NOW + 1)
    race = Interleave(seeded)

    def purge(s: Session) -> None:
        retention.purged(s, job_id, NOW + 3 * retention.DAY)
        race.pause()  # purged, not committed

    def report(s: Session) -> int:
        return metrics.ingest(s, jobs.get_job(s, job_id), [{"step": 1, "loss": 1.0}], NOW + 4)

    outcome = race.run(purge, report)
    assert outcome.first_error is None
    assert isinstance(outcome.second_error, ConflictError), outcome.second_error
    assert outcome.second_waited == (seeded.dialect == "postgresql")
    assert _count(seeded, job_id) == 0


def test_the_api_answers_409_for_metrics_of_a_purged_job(tmp_path: Path, db_url: str) -> None:
    with (
        live_server(tmp_path, fake_gpus="1x80GiB", db_url=db_url, start_loops=False) as live,
        live.client() as admin,
    ):
        body = {"name": "p", "command": ["true"], "resources": {"gpus": 1}}
        job = admin.post("/jobs", json=body).json()
        assert admin.post(f"/jobs/{job['id']}/cancel").status_code == 200
        record = {"metrics": [{"step": 1, "loss": 0.5}]}
        assert admin.post(f"/jobs/{job['id']}/metrics", json=record).status_code == 200
        state = live.prepared.app.state.danlu if live.prepared else None
        assert state is not None
        with state.db.session() as s:
            retention.purged(s, job["id"], now=5.0)
        gone = admin.post(f"/jobs/{job['id']}/metrics", json=record)
        assert gone.status_code == 409, gone.text
        error = gone.json()["error"]
        assert error["type"] == "ConflictError"
        assert "deleted by the retention (DANLU_RETENTION_DAYS) at 5" in error["message"]
        assert admin.get(f"/jobs/{job['id']}/metrics").json() == []
