"""``DANLU_RETENTION_DAYS``: a job finished longer ago loses its metric records, its logs and
run records and the checkpoint directory danlu made for it; the job and its events stay."""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import live_server, spec, user_and_nodes, wait_state

from danlu.config import load_settings
from danlu.core.cluster import Cluster, Node, gpu_type
from danlu.devices import inventory_from_cluster
from danlu.executors import ExecutorError, FakeExecutor, FakeWorld
from danlu.sched.registry import make_policy
from danlu.server.db import Database
from danlu.server.metrics import ServerMetrics
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
        assert "at 1970-01-01 00:00:05 UTC" in gone.json()["error"]["message"]  # not an epoch


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


def _finished_with_its_own_directory(db: Database, tmp_path: Path) -> tuple[str, Reconciler]:
    """A job that ran and succeeded (at ``NOW + 20``) with the directory danlu made for it
    under the home holding a checkpoint; and the loop (retention: 1 day) that ran it."""
    with db.session() as s:
        user_and_nodes(s, (NODE,), NOW)
    world = FakeWorld()
    first = _submit(db, "first")
    world.script(first, duration=10)
    loop = _loop(db, tmp_path, world, days=1.0)
    assert loop.run_once(now=NOW).launched == [first]
    (tmp_path / "checkpoints" / first / "step-10").write_bytes(b"first")
    world.clock.advance(20)
    loop.run_once(now=NOW + 20)
    assert _state(db, first) == "SUCCEEDED"
    return first, loop


def _world(loop: Reconciler) -> FakeWorld:
    executor = loop.executor
    assert isinstance(executor, FakeExecutor)
    return executor.world


def test_a_directory_a_later_jobs_spec_names_is_left_to_that_job(
    db: Database, tmp_path: Path
) -> None:
    """A job continuing a finished one's training in the directory danlu gave that one: the
    retention purges the finished job but leaves the directory the running one writes to."""
    first, loop = _finished_with_its_own_directory(db, tmp_path)
    given = tmp_path / "checkpoints" / first
    world = _world(loop)
    try:
        later = _submit(db, "continued", checkpoint_dir=str(given))
        world.script(later, duration=10 * DAY)
        assert loop.run_once(now=NOW + 30).launched == [later]
        (given / "step-20").write_bytes(b"continued")
        report = loop.run_once(now=NOW + 20 + 1.1 * DAY)
        assert report.purged == [first] and report.errors == []
        assert (given / "step-10").read_bytes() == b"first"
        assert (given / "step-20").read_bytes() == b"continued"
        assert set(world.runs) == {later}  # the rest of the purge happened
        with db.read_session() as s:
            assert jobs.get_job(s, first).purged_at == NOW + 20 + 1.1 * DAY
        loop.run_once(now=NOW + 20 + 3 * DAY)
        assert (given / "step-20").read_bytes() == b"continued"  # left for good
    finally:
        loop.stop()


def _spelling(tmp_path: Path, first: str, how: str) -> str:
    """A spec's ``checkpoint_dir`` related (or not) to ``first``'s own directory."""
    given = tmp_path / "checkpoints" / first
    if how == "linked":
        (tmp_path / "link").symlink_to(given)
        return str(tmp_path / "link")
    if how == "home linked":
        (tmp_path / "alias").symlink_to(tmp_path)
        return str(tmp_path / "alias" / "checkpoints" / first)
    return {
        "the same": str(given),
        "inside": str(given / "continued"),
        "containing": str(tmp_path / "checkpoints"),
        "dotted": f"{tmp_path}/checkpoints/other/../{first}/",
        "a sibling": f"{given}-v2",
        "a url": f"s3://bucket/{first}",
        # danlu.train writes to a file:// URL's path: it names the directory as the path does
        "a file url": f"file://{given}",
        "a file url inside": f"file://{given}/continued",
        "a file url elsewhere": f"file://{given}-v2",
    }[how]


@pytest.mark.parametrize(
    ("how", "kept"),
    [
        ("the same", True),
        ("inside", True),
        ("containing", True),
        ("dotted", True),
        ("linked", True),
        ("home linked", True),
        ("a sibling", False),
        ("a url", False),
        ("a file url", True),
        ("a file url inside", True),
        ("a file url elsewhere", False),
    ],
)
def test_a_directory_named_by_a_spec_in_any_spelling_is_kept(
    sqlite_db: Database, tmp_path: Path, how: str, kept: bool
) -> None:
    first, loop = _finished_with_its_own_directory(sqlite_db, tmp_path)
    given = tmp_path / "checkpoints" / first
    try:
        later = _submit(sqlite_db, "later", checkpoint_dir=_spelling(tmp_path, first, how))
        _world(loop).script(later, duration=10 * DAY)
        report = loop.run_once(now=NOW + 20 + 1.1 * DAY)
        assert report.purged == [first] and report.errors == []
        assert (given / "step-10").exists() is kept
    finally:
        loop.stop()


@pytest.mark.parametrize("replaced_by", ["a link", "a file"])
def test_a_job_that_replaced_its_directory_loses_the_link_never_what_it_points_to(
    db: Database, tmp_path: Path, replaced_by: str
) -> None:
    first, loop = _finished_with_its_own_directory(db, tmp_path)
    given = tmp_path / "checkpoints" / first
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.pt").write_bytes(b"not the job's")
    shutil.rmtree(given)  # as the job did: rmdir $DANLU_CHECKPOINT_DIR && ln -s ...
    if replaced_by == "a link":
        given.symlink_to(elsewhere)
    else:
        given.write_bytes(b"a file")
    try:
        report = loop.run_once(now=NOW + 20 + 1.1 * DAY)
        assert report.purged == [first] and report.errors == []
        assert not given.exists() and not given.is_symlink()
        assert (elsewhere / "keep.pt").read_bytes() == b"not the job's"
    finally:
        loop.stop()


def test_a_directory_that_cannot_be_deleted_leaves_the_job_whole_until_it_can(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checkpoint directory goes first: when it cannot, the job keeps its log and run
    records (``danlu logs`` still reads them) and its metrics, and is tried again later."""
    first, loop = _finished_with_its_own_directory(db, tmp_path)
    given = tmp_path / "checkpoints" / first
    with db.session() as s:
        metrics.ingest(s, jobs.get_job(s, first), [{"step": 1, "loss": 2.0}], now=NOW)
    real = shutil.rmtree
    busy = {str(given)}

    def rmtree(path: Any, *args: Any, **kwargs: Any) -> None:
        if str(path) in busy:
            raise OSError(16, "Device or resource busy", str(path))
        real(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", rmtree)
    try:
        t = NOW + 20 + 1.1 * DAY
        report = loop.run_once(now=t)
        assert report.purged == [] and report.errors == [
            f"purge {first}: [Errno 16] Device or resource busy: '{given}'"
        ]
        assert first in _world(loop).runs  # its log and run records are still there
        with db.read_session() as s:
            assert jobs.get_job(s, first).purged_at is None
            assert len(metrics.list_metrics(s, first)) == 1
        busy.clear()
        assert loop.run_once(now=t + retention.EVERY).purged == [first]
        assert not given.exists() and first not in _world(loop).runs
    finally:
        loop.stop()


def test_the_errors_a_pass_goes_on_from_are_logged_once_and_counted(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    ids = _cancelled(db, 1)
    world = FakeWorld()
    executor = FakeExecutor(Cluster((NODE,)), world)
    server_metrics = ServerMetrics(db, inventory_from_cluster(Cluster((NODE,))))
    settings = load_settings(home=tmp_path, retention_days=0.5)
    loop = Reconciler(db, executor, settings, policy=make_policy("fifo"), metrics=server_metrics)

    def discard(job_id: str) -> None:
        raise ExecutorError(f"job {job_id}: its log is on a disk not mounted")

    monkeypatch.setattr(executor, "discard", discard)
    caplog.set_level(logging.WARNING)
    try:
        t = NOW + DAY
        assert loop.run_once(now=t).errors == [
            f"purge {ids[0]}: job {ids[0]}: its log is on a disk not mounted"
        ]
        assert len(loop.run_once(now=t + retention.EVERY).errors) == 1  # the same, again
        said = [r.getMessage() for r in caplog.records if "not mounted" in r.getMessage()]
        assert len(said) == 1 and said[0].startswith(f"reconcile: purge {ids[0]}: ")
        exposed = server_metrics.exposition().decode()
        assert 'danlu_reconcile_errors_total{step="purge"} 2.0' in exposed
        assert 'danlu_reconcile_errors_total{step="poll"} 0.0' in exposed
    finally:
        loop.stop()


def test_the_specs_are_all_read_before_a_directory_goes_then_the_new_ones(
    sqlite_db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The purger reads the jobs' specs a few at a time and purges nothing before it has read
    them all; later it reads those submitted since."""
    monkeypatch.setattr(retention, "SPECS_A_PASS", 2)
    monkeypatch.setattr(retention, "REREAD", 1)
    first, loop = _finished_with_its_own_directory(sqlite_db, tmp_path)
    world = _world(loop)
    try:
        fillers = [_submit(sqlite_db, f"filler{i}") for i in range(2)]
        later = _submit(sqlite_db, "later", checkpoint_dir=str(tmp_path / "checkpoints" / first))
        for job_id in (*fillers, later):
            world.script(job_id, duration=10 * DAY)
        t = NOW + 20 + 1.1 * DAY
        assert [loop.run_once(now=t + i).purged for i in range(4)] == [[], [], [], [first]]
        assert (tmp_path / "checkpoints" / first / "step-10").exists()
        second = _submit(sqlite_db, "second")
        world.script(second, duration=10)
        loop.run_once(now=t + 10)  # the specs read so far: none names the second's directory
        world.clock.advance(20)
        loop.run_once(now=t + 30)
        assert _state(sqlite_db, second) == "SUCCEEDED"
        again = _submit(sqlite_db, "again", checkpoint_dir=str(tmp_path / "checkpoints" / second))
        world.script(again, duration=10 * DAY)
        then = t + 40 + 1.1 * DAY  # two passes read the specs since, as the first did
        assert [loop.run_once(now=then + i).purged for i in range(3)] == [[], [], [second]]
        assert (tmp_path / "checkpoints" / second).is_dir()
    finally:
        loop.stop()
