"""Rows kept for a while only were kept for good.

A revoked API token's row: each job run is issued a token (``DANLU_TOKEN``) revoked when the
run ends, so the table grew by a row a run. The reconcile loop's retention pass now deletes
the tokens revoked more than :data:`~danlu.server.services.users.KEEP_REVOKED_SECONDS` ago,
whatever ``DANLU_RETENTION_DAYS`` (a revoked token authenticates nothing and no reply lists
it), a batch at a time; live tokens stay, however old.

A metrics request's ``Idempotency-Key``: a job's keys over a day old were deleted only when
the job reported again, so a finished job's last day of keys (one a flush) stayed. The same
pass deletes every job's keys once a day old."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from danlu.config import load_settings
from danlu.core.cluster import Cluster, Node, gpu_type
from danlu.executors import FakeExecutor, FakeWorld
from danlu.sched.registry import make_policy
from danlu.server import purge
from danlu.server.db import ApiToken, Database
from danlu.server.db.models import JobMetricKey
from danlu.server.reconcile import Reconciler
from danlu.server.services import jobs, metrics, retention, users

NOW = 1_000_000.0
KEEP = users.KEEP_REVOKED_SECONDS


def _loop(db: Database, home: Path) -> Reconciler:
    """A reconcile loop with the retention of finished jobs off (the default)."""
    executor = FakeExecutor(Cluster((Node("a", 4, gpu_type("H100")),)), FakeWorld())
    settings = load_settings(home=home, retention_days=0)
    return Reconciler(db, executor, settings, policy=make_policy("fifo"))


def _tokens_purged(loop: Reconciler, t: float) -> int:
    """How many tokens the retention pass at ``t`` deleted (0: none was due)."""
    deleted = loop.purger.purge_stale(t)
    return sum(n for what, n in deleted.items() if what.startswith("API tokens"))


def _names(db: Database) -> list[str]:
    with db.read_session() as s:
        return sorted(s.scalars(select(ApiToken.name)))


def test_tokens_revoked_long_ago_are_deleted_and_live_ones_stay(
    seeded: Database, tmp_path: Path
) -> None:
    with seeded.session() as s:
        alice, bob = users.get_user(s, "alice"), users.get_user(s, "bob")
        users.issue_token(s, alice, "laptop", now=NOW - 400 * retention.DAY)
        users.issue_token(s, bob, "ci", now=NOW)
        users.issue_token(s, alice, "run-1", now=NOW, job_id="job-1")
        run_2 = users.issue_token(s, alice, "run-2", now=NOW + 1, job_id="job-1")  # revokes 1
        users.revoke_job_tokens(s, "job-1", now=NOW + 2)  # the run ended: run-2 too
        users.revoke_tokens(s, bob, now=NOW + 2 * retention.EVERY)
    loop = _loop(seeded, tmp_path)
    try:
        loop.run_once(now=NOW + KEEP)  # a month has not passed for any
        assert _names(seeded) == ["ci", "laptop", "run-1", "run-2"]
        loop.run_once(now=NOW + KEEP + retention.EVERY)  # run-1's and run-2's month
        assert _names(seeded) == ["ci", "laptop"]
        loop.run_once(now=NOW + KEEP + 2 * retention.EVERY + 1)
        assert _names(seeded) == ["laptop"]  # never revoked: it stays however old
        with seeded.read_session() as s:
            assert users.find_token(s, run_2) is None  # refused as before: unknown now
    finally:
        loop.stop()


def test_a_backlog_goes_a_batch_a_pass_then_one_pass_every_while(
    seeded: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(purge, "STALE_BATCH", 2)
    with seeded.session() as s:
        alice = users.get_user(s, "alice")
        for run in range(5):
            users.issue_token(s, alice, f"run-{run}", now=NOW, job_id=f"job-{run}")
            users.revoke_job_tokens(s, f"job-{run}", now=NOW + run)
    loop = _loop(seeded, tmp_path)
    try:
        t = NOW + 10 + KEEP
        assert [_tokens_purged(loop, t + i) for i in range(4)] == [2, 2, 1, 0]
        assert _names(seeded) == []
        with seeded.session() as s:  # another ends: deleted at the next pass due, not before
            users.issue_token(s, alice, "late", now=t, job_id="job-late")
            users.revoke_job_tokens(s, "job-late", now=t - KEEP - 1)
        assert _tokens_purged(loop, t + 4) == 0
        assert _tokens_purged(loop, t + 2 + retention.EVERY) == 1
    finally:
        loop.stop()


def test_a_finished_jobs_request_keys_go_a_day_after_they_came(
    seeded: Database, tmp_path: Path
) -> None:
    body = {"name": "m", "command": ["python", "train.py"], "resources": {"gpus": 1}}
    with seeded.session() as s:
        job = jobs.submit(s, body, users.get_user(s, "alice"), now=NOW)
        metrics.ingest(s, job, [{"step": 1}], now=NOW, key="flush-1")
        metrics.ingest(s, job, [{"step": 2}], now=NOW + retention.DAY / 2, key="flush-2")
        jobs.cancel_job(s, job.id, now=NOW + retention.DAY / 2)  # it reports no more
    loop = _loop(seeded, tmp_path)
    try:
        loop.run_once(now=NOW + retention.DAY + 1)
        with seeded.read_session() as s:
            assert list(s.scalars(select(JobMetricKey.key))) == ["flush-2"]
            assert [m.step for m in metrics.list_metrics(s, job.id)] == [1, 2]  # records stay
        loop.run_once(now=NOW + 2 * retention.DAY)
        with seeded.read_session() as s:
            assert list(s.scalars(select(JobMetricKey.key))) == []
    finally:
        loop.stop()
