"""``DANLU_RETENTION_DAYS``: a job finished longer ago loses its metric records, its logs and
run records and the checkpoint directory danlu made for it; the job and its events stay."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from helpers import live_server, spec, user_and_nodes, wait_state

from danlu.config import load_settings
from danlu.core.cluster import Cluster, Node, gpu_type
from danlu.executors import ExecutorError, FakeExecutor, FakeWorld
from danlu.sched.registry import make_policy
from danlu.server.db import Database
from danlu.server.reconcile import Reconciler
from danlu.server.services import events, jobs, metrics, retention, users

NOW = 1_000_000.0
DAY = 86_400.0
NODE = Node("a", 4, gpu_type("H100"))


def _loop(db: Database, home: Path, world: FakeWorld, days: float) -> Reconciler:
    executor = FakeExecutor(Cluster((NODE,)), world)
    settings = load_settings(home=home, retention_days=days)
    return Reconciler(db, executor, settings, policy=make_policy("fifo"))


def _submit(db: Database, name: str, **extra: Any) -> str:
    body = {"name": name, "command": ["python", "train.py"], "resources": {"gpus": 1}}
    with db.session() as s:
        alice = users.get_user(s, "alice")
        return jobs.submit(s, {**body, **extra}, alice, now=NOW).id


def test_finished_jobs_lose_their_metrics_logs_and_checkpoints_after_the_retention(
    db: Database, tmp_path: Path
) -> None:
    with db.session() as s:
        user_and_nodes(s, (NODE,), NOW)
    world = FakeWorld()
    own = _submit(db, "own")
    theirs = _submit(db, "theirs", checkpoint_dir=str(tmp_path / "mine"))
    long = _submit(db, "long")
    for job_id in (own, theirs):
        world.script(job_id, duration=10)
    world.script(long, duration=10 * DAY)
    loop = _loop(db, tmp_path, world, days=1.0)
    try:
        assert sorted(loop.run_once(now=NOW).launched) == sorted([own, theirs, long])
        (tmp_path / "mine").mkdir()
        (tmp_path / "mine" / "model.pt").write_bytes(b"weights")
        (tmp_path / "checkpoints" / own / "step-10").write_bytes(b"state")
        with db.session() as s:
            metrics.ingest(s, jobs.get_job(s, own), [{"step": 1, "loss": 2.0}], now=NOW)
        world.clock.advance(20)
        loop.run_once(now=NOW + 20)
        assert {_state(db, j) for j in (own, theirs)} == {"SUCCEEDED"}
        assert loop.run_once(now=NOW + 20 + 0.9 * DAY).purged == []  # not old enough
        report = loop.run_once(now=NOW + 20 + 1.1 * DAY)
        assert sorted(report.purged) == sorted([own, theirs]) and report.errors == []
        assert not (tmp_path / "checkpoints" / own).exists()
        assert (tmp_path / "mine" / "model.pt").read_bytes() == b"weights"  # the user's
        assert set(world.runs) == {long}  # the executor forgot their runs and logs
        with db.read_session() as s:
            job = jobs.get_job(s, own)
            assert job.purged_at == NOW + 20 + 1.1 * DAY and job.state == "SUCCEEDED"
            assert metrics.list_metrics(s, own) == []
            assert [e.new for e in events.list_events(s, own)][-1] == "SUCCEEDED"
            assert jobs.get_job(s, long).purged_at is None
        assert loop.run_once(now=NOW + 30 + 1.1 * DAY).purged == []
    finally:
        loop.stop()


def _cancelled(db: Database, count: int) -> list[str]:
    """``count`` jobs cancelled while queued, at ``NOW + 1``, on the one-node inventory."""
    with db.session() as s:
        user_and_nodes(s, (NODE,), NOW)
    ids = [_submit(db, f"j{i}") for i in range(count)]
    with db.session() as s:
        for job_id in ids:
            jobs.cancel_job(s, job_id, now=NOW + 1)
    return ids


def _state(db: Database, job_id: str) -> str:
    with db.read_session() as s:
        return jobs.get_job(s, job_id).state


def test_a_backlog_is_purged_a_batch_a_pass_and_a_failure_is_tried_again(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(retention, "BATCH", 2)
    ids = _cancelled(db, 5)
    loop = _loop(db, tmp_path, FakeWorld(), days=0.5)
    stuck = {ids[0]}
    real = loop.executor.discard

    def discard(job_id: str) -> None:
        if job_id in stuck:
            raise ExecutorError(f"job {job_id}: its log is on a disk not mounted")
        real(job_id)

    monkeypatch.setattr(loop.executor, "discard", discard)
    try:
        t = NOW + DAY
        first = loop.run_once(now=t)
        assert first.purged == [ids[1]] and first.errors == [
            f"purge {ids[0]}: job {ids[0]}: its log is on a disk not mounted"
        ]
        assert loop.run_once(now=t + 1).purged == [ids[2], ids[3]]  # a full batch: again
        assert loop.run_once(now=t + 2).purged == [ids[4]]
        assert loop.run_once(now=t + 3).purged == []  # now every EVERY seconds
        stuck.clear()
        assert loop.run_once(now=t + 3 + retention.EVERY).purged == [ids[0]]
    finally:
        loop.stop()


def test_without_a_retention_nothing_is_deleted(db: Database, tmp_path: Path) -> None:
    (job_id,) = _cancelled(db, 1)
    loop = _loop(db, tmp_path, FakeWorld(), days=0.0)
    try:
        assert loop.run_once(now=NOW + 1000 * DAY).purged == []
        with db.read_session() as s:
            assert jobs.get_job(s, job_id).purged_at is None
    finally:
        loop.stop()


def test_a_purged_jobs_log_is_a_conflict_naming_the_retention(tmp_path: Path) -> None:
    with live_server(tmp_path, fake_gpus="1x80GiB") as live, live.client() as c:
        job = c.post("/jobs", json=spec("short", "print('hello')")).json()
        wait_state(c, job["id"], "SUCCEEDED")
        assert c.get(f"/jobs/{job['id']}/logs").text == "hello\n"
        state = live.prepared.app.state.danlu if live.prepared else None
        assert state is not None
        with state.db.session() as s:
            retention.purged(s, job["id"], now=5.0)
        assert c.get(f"/jobs/{job['id']}").json()["purged_at"] == 5.0
        gone = c.get(f"/jobs/{job['id']}/logs")
        assert gone.status_code == 409
        assert "deleted by the retention (DANLU_RETENTION_DAYS)" in gone.json()["error"]["message"]


def test_a_pass_stops_deleting_after_its_time_and_the_next_goes_on(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(retention, "PASS_SECONDS", 0.05)
    ids = _cancelled(db, 3)
    loop = _loop(db, tmp_path, FakeWorld(), days=0.5)
    real = loop.executor.discard

    def slow(job_id: str) -> None:  # a large checkpoint on a slow file system
        time.sleep(0.1)
        real(job_id)

    monkeypatch.setattr(loop.executor, "discard", slow)
    try:
        assert loop.run_once(now=NOW + DAY).purged == [ids[0]]
        assert loop.run_once(now=NOW + DAY + 1).purged == [ids[1]]
        assert loop.run_once(now=NOW + DAY + 2).purged == [ids[2]]
    finally:
        loop.stop()
