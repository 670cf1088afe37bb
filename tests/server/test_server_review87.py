"""The server: a start-up that fails closes what it opened (the database's
connections, the executor, the loops already started); two callers starting a loop at once
start one thread; a ``file://`` URL of a relative path is refused as a ``checkpoint_dir``
(and one stored before gets the job's own directory); a database error in a retention pass
keeps the delays of the deletions that failed before it."""

from __future__ import annotations

import contextlib
import logging
import threading
from pathlib import Path
from typing import Any, ClassVar

import pytest
from fastapi.testclient import TestClient
from helpers import user_and_nodes, wait_for
from sqlalchemy import event, text, update
from sqlalchemy.exc import OperationalError

from danlu.config import load_settings
from danlu.core.cluster import Cluster, Node, gpu_type
from danlu.core.errors import ConfigError, SpecError
from danlu.executors import Executor, ExecutorError, FakeExecutor, FakeWorld
from danlu.sched.registry import make_policy
from danlu.server import app as app_module
from danlu.server.db import Database, Job
from danlu.server.loops import PeriodicLoop
from danlu.server.reconcile import Reconciler
from danlu.server.services import jobs, retention, users

log = logging.getLogger(__name__)

NOW = 1_000_000.0
DAY = 86_400.0
NODE = Node("a", 4, gpu_type("H100"))


class _Recorded(Database):
    """A :class:`Database` that counts its :meth:`dispose` calls and, on PostgreSQL, notes
    the server process of each connection it opens."""

    made: ClassVar[list[_Recorded]] = []

    def __init__(self, url: str, echo: bool = False) -> None:
        super().__init__(url, echo)
        self.disposed = 0
        self.backends: list[int] = []
        _Recorded.made.append(self)
        if self.dialect == "postgresql":
            event.listen(self.engine, "connect", self._connected)

    def _connected(self, connection: Any, _record: Any) -> None:
        self.backends.append(int(connection.info.backend_pid))

    def dispose(self) -> None:
        self.disposed += 1
        super().dispose()


def _alive(url: str, backends: list[int]) -> set[int]:
    """Those of the PostgreSQL server processes ``backends`` that still serve a session."""
    observer = Database(url)
    try:
        with observer.engine.connect() as conn:
            pids = conn.execute(text("SELECT pid FROM pg_stat_activity")).scalars()
            return set(backends) & {int(pid) for pid in pids}
    finally:
        observer.dispose()


def test_a_start_up_failing_after_the_store_opened_closes_its_connections_and_executor(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """create_app opened the store, migrated it, wrote the inventory and built the
    executor, then an unknown policy (built with the reconcile loop) raised: the engine's
    pool (PostgreSQL sessions) and the executor stayed open for the life of the process."""
    monkeypatch.setattr(_Recorded, "made", [])
    monkeypatch.setattr(app_module, "Database", _Recorded)
    closed: list[Executor] = []
    real_build = app_module.build_executor

    def build(*args: Any, **kwargs: Any) -> Executor:
        executor = real_build(*args, **kwargs)
        monkeypatch.setattr(executor, "close", lambda: closed.append(executor))
        return executor

    monkeypatch.setattr(app_module, "build_executor", build)
    settings = load_settings(
        home=tmp_path / "home", database_url=db_url, fake_gpus="1x80GiB", policy="no-such-policy"
    )
    with pytest.raises(ConfigError, match="DANLU_POLICY"):
        app_module.create_app(settings, start_loops=False)
    [db] = _Recorded.made
    assert db.disposed == 1
    assert len(closed) == 1
    if db.dialect == "postgresql":
        assert db.backends  # the migration, the inventory: sessions were opened
        wait_for(lambda: not _alive(db_url, db.backends), 10)


def test_a_start_up_failing_with_a_caller_s_executor_leaves_it_to_the_caller(
    sqlite_db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An executor handed in stays the caller's until the app is made (prepare closes
    the one it built); the store is closed all the same."""
    monkeypatch.setattr(_Recorded, "made", [])
    monkeypatch.setattr(app_module, "Database", _Recorded)
    executor = FakeExecutor(Cluster((NODE,)), FakeWorld())
    closed: list[bool] = []
    monkeypatch.setattr(executor, "close", lambda: closed.append(True))
    settings = load_settings(
        home=tmp_path / "home", database_url=sqlite_db.url, policy="no-such-policy"
    )
    with pytest.raises(ConfigError):
        app_module.create_app(settings, executor=executor, start_loops=False)
    assert [db.disposed for db in _Recorded.made] == [1]
    assert closed == []


def _reconcile_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "danlu-reconcile" and t.is_alive()}


def test_a_loop_failing_to_start_stops_those_started_and_closes_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lifespan started the loops outside its ``try``: the webhook sender failing to
    start left the reconcile loop's thread running and the store open."""
    monkeypatch.setattr(_Recorded, "made", [])
    monkeypatch.setattr(app_module, "Database", _Recorded)
    settings = load_settings(home=tmp_path / "home", fake_gpus="1x80GiB", interval=0.05)
    app = app_module.create_app(settings)
    sender = app.state.danlu.webhooks
    assert sender is not None

    def fail() -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(sender, "start", fail)
    before = _reconcile_threads()
    with pytest.raises(RuntimeError, match="new thread"), TestClient(app):
        pass
    assert _reconcile_threads() == before
    assert [db.disposed for db in _Recorded.made] == [1]


class _Meeting(threading.Event):
    """An event whose :meth:`clear` waits (up to a second) for a second caller of it:
    where two callers of ``start`` both reach the loop's ``_stop.clear()``, they meet."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.barrier = threading.Barrier(2, timeout=1.0)

    def clear(self) -> None:
        if self.armed:
            with contextlib.suppress(threading.BrokenBarrierError):  # met no one: on
                self.barrier.wait()
        super().clear()


def test_two_callers_starting_a_loop_at_once_start_one_thread() -> None:
    """start() took no lock: two callers both found no thread and started one each, two
    passes at once (each on the same store, the same executor) until the loop stopped."""
    release = threading.Event()
    passes: list[threading.Thread] = []

    def work() -> None:
        passes.append(threading.current_thread())
        release.wait(30)

    name = "danlu-test-two-starts"
    loop = PeriodicLoop(name, 3600.0, work, log, "test pass", "test passes work")
    meeting = _Meeting()
    loop._stop = meeting  # the window between the check for a thread and its start
    meeting.armed = True
    starters = [threading.Thread(target=loop.start, daemon=True) for _ in range(2)]
    try:
        for starter in starters:
            starter.start()
        for starter in starters:
            starter.join(10)
        meeting.armed = False
        wait_for(lambda: passes, 10)
        running = [t for t in threading.enumerate() if t.name == name]
        assert len(running) == 1
    finally:
        meeting.armed = False
        loop.stop(timeout=0.01)
        release.set()
        assert loop.stop(timeout=30) is True
    assert not [t for t in threading.enumerate() if t.name == name]


def test_a_stop_and_a_start_in_turn_from_many_threads_leave_at_most_one_thread() -> None:
    """stop() and start() took turns with no lock: a stop joined a thread a start had made
    but not started yet (a RuntimeError in the stopping caller), or forgot one a start made
    while it waited, so that the next start made a second."""
    name = "danlu-test-churn"
    loop = PeriodicLoop(name, 0.001, lambda: None, log, "test pass", "test passes work")
    raised: list[BaseException] = []

    def churn() -> None:
        try:
            for _ in range(200):
                loop.start()
                loop.stop()
                loop.start()
        except Exception as exc:
            raised.append(exc)

    workers = [threading.Thread(target=churn, daemon=True) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    try:
        assert raised == []
        assert len([t for t in threading.enumerate() if t.name == name]) <= 1
    finally:
        assert loop.stop(timeout=30) is True
    wait_for(lambda: not [t for t in threading.enumerate() if t.name == name], 10)


def _submit(db: Database, name: str, **extra: Any) -> str:
    body = {"name": name, "command": ["python", "train.py"], "resources": {"gpus": 1}}
    with db.session() as s:
        alice = users.get_user(s, "alice")
        return jobs.submit(s, {**body, **extra}, alice, now=NOW).id


@pytest.mark.parametrize("given", ["file://ckpt/run1", "file://~/ckpt", "file:ckpt", "file://"])
def test_a_file_url_of_a_relative_path_is_refused_as_a_checkpoint_dir(
    db: Database, given: str
) -> None:
    """The job resolves it against whatever directory it starts in, which the retention
    cannot know: a directory under the home it named was deleted with the job whose it was."""
    with db.session() as s:
        user_and_nodes(s, (NODE,), NOW)
    with pytest.raises(SpecError) as refused:
        _submit(db, "rel", checkpoint_dir=given)
    assert refused.value.field == "checkpoint_dir"
    assert "file:///shared/ckpt/run1" in str(refused.value)
    assert _submit(db, "abs", checkpoint_dir="file:///shared/ckpt/run1")  # still taken


def test_a_stored_file_url_of_a_relative_path_gets_the_jobs_own_directory(
    db: Database, tmp_path: Path
) -> None:
    """A job stored with ``file://ckpt`` before it was refused was launched with it: the
    job wrote under its working directory, which may be the home's ``checkpoints`` (a
    plane started there), where the retention deleted what it wrote with another job."""
    with db.session() as s:
        user_and_nodes(s, (NODE,), NOW)
    job_id = _submit(db, "legacy")
    with db.session() as s:
        stored = dict(jobs.get_job(s, job_id).spec)
        s.execute(
            update(Job)
            .where(Job.id == job_id)
            .values(spec={**stored, "checkpoint_dir": "file://checkpoints/other"})
        )
    world = FakeWorld()
    executor = FakeExecutor(Cluster((NODE,)), world)
    settings = load_settings(home=tmp_path, retention_days=1.0)
    loop = Reconciler(db, executor, settings, policy=make_policy("fifo"))
    try:
        assert loop.run_once(now=NOW).launched == [job_id]
        [launch] = world.launches
        own = tmp_path / "checkpoints" / job_id
        assert launch.checkpoint_dir == str(own) and own.is_dir()
    finally:
        loop.stop()


def test_a_database_error_in_a_retention_pass_keeps_the_delays_met_before_it(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deletion that failed waits retention.EVERY before it is tried again; a database
    error later in the same pass lost that delay, and the next pass (at once, with a
    backlog) tried the failed one again first."""
    monkeypatch.setattr(retention, "BATCH", 2)
    with db.session() as s:
        user_and_nodes(s, (NODE,), NOW)
    ids = [_submit(db, f"j{i}") for i in range(3)]
    with db.session() as s:
        for job_id in ids:
            jobs.cancel_job(s, job_id, now=NOW + 1)
    executor = FakeExecutor(Cluster((NODE,)), FakeWorld())
    settings = load_settings(home=tmp_path, retention_days=0.5)
    loop = Reconciler(db, executor, settings, policy=make_policy("fifo"))
    real_discard, real_purged = executor.discard, retention.purged
    tried: list[str] = []
    down = {ids[1]}

    def discard(job_id: str) -> None:
        tried.append(job_id)
        if job_id == ids[0]:
            raise ExecutorError(f"job {job_id}: its log is on a disk not mounted")
        real_discard(job_id)

    def purged(session: Any, job_id: str, now: float | None = None) -> retention.Removed:
        if job_id in down:
            down.clear()
            raise OperationalError("UPDATE jobs", {}, Exception("server closed the connection"))
        return real_purged(session, job_id, now)

    monkeypatch.setattr(executor, "discard", discard)
    monkeypatch.setattr(retention, "purged", purged)
    try:
        t = NOW + DAY
        with pytest.raises(OperationalError):
            loop.run_once(now=t)
        assert tried == [ids[0], ids[1]]
        tried.clear()
        report = loop.run_once(now=t + 1)  # a full batch was due: the next pass goes on
        assert tried == [ids[1], ids[2]]  # not ids[0], whose delay still runs
        assert sorted(report.purged) == sorted([ids[1], ids[2]]) and report.errors == []
    finally:
        loop.stop()


def test_a_loop_that_gave_its_lease_back_does_not_say_it_lost_it(
    db: Database, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A loop stopped (its lease given back) and started again while another plane held the
    lease logged that it had lost the lease to a plane that took it over, and that two
    control planes on one database run jobs twice."""
    with db.session() as s:
        user_and_nodes(s, (NODE,), NOW)
    settings = load_settings(home=tmp_path / "home")
    first = Reconciler(db, FakeExecutor(Cluster((NODE,)), FakeWorld()), settings)
    second = Reconciler(db, FakeExecutor(Cluster((NODE,)), FakeWorld()), settings)
    try:
        assert first.run_once(now=NOW).leader
        first.stop()  # gives the lease back
        assert second.run_once(now=NOW + 1).leader
        with caplog.at_level(logging.ERROR, logger="danlu.server.reconcile"):
            assert not first.run_once(now=NOW + 2).leader
        assert "lost the scheduler lease" not in caplog.text
        second.stop()
        assert first.run_once(now=NOW + 3).leader  # free again: taken
    finally:
        first.stop()
        second.stop()
