"""The GPU health loop: faulty GPUs are closed to new work (a per-GPU cordon whose reason
is the fault), the jobs there run on, an admin opens a mended GPU again, and faults read
while the store cannot be written are written by the next pass."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import user_and_nodes
from sqlalchemy.exc import OperationalError

from danlu.config import load_settings
from danlu.core.cluster import Cluster, Node, gpu_type
from danlu.core.errors import ConfigError
from danlu.devices.health import GpuFault
from danlu.devices.inventory import inventory_from_cluster
from danlu.executors import FakeExecutor, FakeWorld, Outcome
from danlu.sched.registry import make_policy
from danlu.server import health as server_health
from danlu.server.db import Database
from danlu.server.health import HealthLoop
from danlu.server.metrics import ServerMetrics
from danlu.server.reconcile import Reconciler
from danlu.server.services import cluster, events, jobs, nodes

NOW = 1_000_000.0
A = Node("a", 2, gpu_type("H100"))


class _Scripted:
    """A health check that finds the faults it is given (each list once, then none)."""

    def __init__(self) -> None:
        self.next: list[GpuFault] = []
        self.closed = False

    def check(self) -> list[GpuFault]:
        found, self.next = self.next, []
        return found

    def close(self) -> None:
        self.closed = True


def _spec(name: str) -> dict[str, Any]:
    return {"name": name, "command": ["python", "t.py"], "resources": {"gpus": 1}}


def _gpu_states(db: Database) -> list[tuple[str, str]]:
    with db.read_session() as s:
        (node,) = cluster.list_nodes(s)
        return [(nodes.state(g), g.cordon_reason) for g in node.gpus]


def _long_runs(db: Database, tmp_path: Path) -> Reconciler:
    """A reconcile loop (fifo) whose runs last 10,000 s on the fake node ``a``."""
    world = FakeWorld()
    world.default = world.default.__class__(duration=10_000)
    executor = FakeExecutor(Cluster((A,)), world)
    return Reconciler(db, executor, load_settings(home=tmp_path), policy=make_policy("fifo"))


def test_a_faulty_gpu_is_closed_and_takes_no_new_work(db: Database, tmp_path: Path) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (A,), NOW)
        first = jobs.submit(s, _spec("f"), alice, now=NOW).id
    loop = _long_runs(db, tmp_path)
    check = _Scripted()
    health = HealthLoop(db, check, interval=1.0)
    try:
        loop.run_once(now=NOW)
        with db.read_session() as s:
            (held,) = {int(x["gpu"]) for x in jobs.get_job(s, first).allocation or ()}
        assert health.run_once(now=NOW + 1) == []
        check.next = [
            GpuFault(("a", held), "Xid 79 (GPU fell off the bus)"),
            GpuFault(("a", held), "3 uncorrectable ECC errors since the driver loaded"),
            GpuFault(("a", held), "Xid 79 (GPU fell off the bus)"),
            GpuFault(("gone", 0), "a node no longer in the inventory"),
        ]
        reason = (
            "health check: Xid 79 (GPU fell off the bus); "
            "3 uncorrectable ECC errors since the driver loaded"
        )
        assert health.run_once(now=NOW + 2) == [f"a GPU {held}: {reason}"]
        states = _gpu_states(db)
        assert states[held] == ("cordoned", reason) and states[1 - held] == ("ready", "")
        # a GPU closed already keeps its reason (an admin's too)
        with db.session() as s:
            nodes.cordon(s, "a", "fan", gpu=1 - held, now=NOW + 3)
        check.next = [GpuFault(("a", held), "Xid 48"), GpuFault(("a", 1 - held), "Xid 48")]
        assert health.run_once(now=NOW + 4) == []
        assert [r for _, r in _gpu_states(db)] == [reason if i == held else "fan" for i in range(2)]
        with db.session() as s:
            nodes.uncordon(s, "a", gpu=1 - held)
        with db.session() as s:
            second = jobs.submit(s, _spec("s"), alice, now=NOW + 5).id
        loop.run_once(now=NOW + 5)
        with db.read_session() as s:
            assert jobs.get_job(s, first).state == "RUNNING"  # runs on
            placed = {int(x["gpu"]) for x in jobs.get_job(s, second).allocation or ()}
        assert placed == {1 - held}
    finally:
        loop.stop()
        health.stop()
    assert check.closed


def test_faults_read_while_the_store_fails_are_written_next_time(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    with db.session() as s:
        user_and_nodes(s, (A,), NOW)
    check = _Scripted()
    health = HealthLoop(db, check)
    check.next = [GpuFault(("a", 0), "Xid 79 (GPU fell off the bus)")]
    real = nodes.close_faulty

    def busy(*args: object, **kw: object) -> list[str]:
        raise OperationalError("UPDATE gpus", {}, Exception("database is locked"))

    monkeypatch.setattr(nodes, "close_faulty", busy)
    with pytest.raises(OperationalError):
        health.run_once(now=NOW)
    monkeypatch.setattr(nodes, "close_faulty", real)
    assert health.run_once(now=NOW + 1) == ["a GPU 0: health check: Xid 79 (GPU fell off the bus)"]
    assert health.run_once(now=NOW + 2) == []


def _failing_job(db: Database, tmp_path: Path) -> tuple[str, FakeWorld, Reconciler, _Scripted]:
    """A job that fails 100 s into every run, with no restarts allowed, launched on a
    two-GPU node whose health check is scripted."""
    with db.session() as s:
        alice = user_and_nodes(s, (A,), NOW)
        job_id = jobs.submit(s, _spec("f") | {"max_restarts": 0}, alice, now=NOW).id
    world = FakeWorld()
    world.script(job_id, duration=100, outcome=Outcome.FAILED, exit_code=1)
    check = _Scripted()
    health = HealthLoop(db, check, interval=1.0)
    executor = FakeExecutor(Cluster((A,)), world)
    settings = load_settings(home=tmp_path)
    metrics = ServerMetrics(db, inventory_from_cluster(Cluster((A,))))
    loop = Reconciler(
        db, executor, settings, metrics=metrics, policy=make_policy("fifo"), health=health
    )
    loop.run_once(now=NOW)
    return job_id, world, loop, check


def _held(db: Database, job_id: str) -> int:
    with db.read_session() as s:
        (held,) = {int(x["gpu"]) for x in jobs.get_job(s, job_id).allocation or ()}
    return held


def test_a_run_failing_on_a_gpu_found_faulty_resumes_with_no_restart_counted(
    db: Database, tmp_path: Path
) -> None:
    job_id, world, loop, check = _failing_job(db, tmp_path)
    try:
        held = _held(db, job_id)
        world.clock.advance(100)
        check.next = [GpuFault(("a", held), "GPU lost (fell off the bus)")]
        report = loop.run_once(now=NOW + 100)
        assert job_id in report.settled
        with db.read_session() as s:
            job = jobs.get_job(s, job_id)
            assert (job.state, job.restarts) == ("RUNNING", 0)  # at once, elsewhere
            edges = [(e.new, e.reason) for e in events.list_events(s, job_id)][-3:-1]
        assert edges == [
            (
                "PREEMPTING",
                "failed (exit code 1); on a GPU the health check finds faulty: "
                f"GPU {held} on a (GPU lost (fell off the bus))",
            ),
            ("PENDING", jobs.RESUME_REASON),
        ]
        assert _gpu_states(db)[held] == ("cordoned", "health check: GPU lost (fell off the bus)")
        assert loop.metrics is not None
        lost = 'danlu_runs_lost_total{cause="gpu"} 1.0'
        assert lost in loop.metrics.exposition().decode()
        assert _held(db, job_id) == 1 - held
        # a failure of its own on a healthy GPU counts: no restarts left
        world.clock.advance(100)
        loop.run_once(now=NOW + 200)
        with db.read_session() as s:
            assert jobs.get_job(s, job_id).state == "FAILED"
            last = events.list_events(s, job_id)[-1].reason
        assert last == "failed (exit code 1); out of restarts (0 of 0)"
        assert 'danlu_runs_lost_total{cause="gpu"} 1.0' in loop.metrics.exposition().decode()
    finally:
        loop.stop()


def test_a_gpu_closed_by_the_loop_during_the_run_is_blamed_without_a_new_pass(
    db: Database, tmp_path: Path
) -> None:
    job_id, world, loop, check = _failing_job(db, tmp_path)
    assert loop.health is not None
    try:
        held = _held(db, job_id)
        world.clock.advance(100)
        # the loop's own pass read the Xid (an event is read once) just before the exit
        check.next = [GpuFault(("a", held), "Xid 48 (double-bit ECC error)")]
        assert loop.health.run_once(now=NOW + 99) != []
        loop.run_once(now=NOW + 100)
        with db.read_session() as s:
            job = jobs.get_job(s, job_id)
            assert (job.state, job.restarts) == ("RUNNING", 0)
            reason = events.list_events(s, job_id)[-3].reason
        assert reason.endswith(f"GPU {held} on a (Xid 48 (double-bit ECC error))")
    finally:
        loop.stop()


def test_a_gpu_closed_before_the_run_started_is_not_blamed(db: Database) -> None:
    with db.session() as s:
        user_and_nodes(s, (A,), NOW)
    check = _Scripted()
    health = HealthLoop(db, check)
    check.next = [GpuFault(("a", 0), "Xid 79 (GPU fell off the bus)")]
    health.run_once(now=NOW)
    places = {("a", 0), ("a", 1)}
    assert health.blame(places, NOW + 1, now=NOW + 5) is None
    assert health.blame(places, NOW, now=NOW + 5) == "GPU 0 on a (Xid 79 (GPU fell off the bus))"
    assert health.blame(set(), NOW, now=NOW + 5) is None
    assert HealthLoop(db, None).blame(places, NOW) is None


def test_with_drain_the_jobs_on_a_faulty_gpu_are_preempted_by_checkpoint(
    db: Database, tmp_path: Path
) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (A,), NOW)
        first = jobs.submit(s, _spec("f"), alice, now=NOW).id
        other = jobs.submit(s, _spec("o"), alice, now=NOW).id
    loop = _long_runs(db, tmp_path)
    check = _Scripted()
    health = HealthLoop(db, check, drain=True)
    try:
        loop.run_once(now=NOW)
        with db.read_session() as s:
            (held,) = {int(x["gpu"]) for x in jobs.get_job(s, first).allocation or ()}
        check.next = [GpuFault(("a", held), "3 uncorrectable ECC errors since the driver loaded")]
        closed = health.run_once(now=NOW + 1)
        assert closed == [
            f"a GPU {held}: health check: 3 uncorrectable ECC errors since the driver loaded"
        ]
        assert _gpu_states(db)[held][0] == "draining" and _gpu_states(db)[1 - held][0] == "ready"
        loop.run_once(now=NOW + 2)
        with db.read_session() as s:
            assert jobs.get_job(s, first).state in ("PREEMPTING", "PENDING")  # drained
            assert jobs.get_job(s, other).state == "RUNNING"  # its GPU is sound
    finally:
        loop.stop()
        health.stop()


def test_the_drain_setting_is_read_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert load_settings(home=tmp_path).health_drain is False
    monkeypatch.setenv("DANLU_HEALTH_DRAIN", "true")
    assert load_settings(home=tmp_path).health_drain is True
    monkeypatch.setenv("DANLU_HEALTH_DRAIN", "maybe")
    with pytest.raises(ConfigError, match="DANLU_HEALTH_DRAIN=true"):
        load_settings(home=tmp_path)


class _ClosedRefuses(_Scripted):
    """A health check that refuses to check once closed, as NVML's does."""

    def check(self) -> list[GpuFault]:
        if self.closed:
            raise AssertionError("checked after close")
        return super().check()


def test_a_stopped_loop_blames_without_checking_its_closed_check(
    db: Database, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run failing while the server shuts down: the loop's check is closed, and a pass
    would start NVML again (now refused by the check: a logged traceback). The closures
    written before still count."""
    with db.session() as s:
        user_and_nodes(s, (A,), NOW)
    monkeypatch.setattr(server_health, "BLAME_PASS_SECONDS", 0.0)  # a pass due at each blame
    check = _ClosedRefuses()
    health = HealthLoop(db, check)
    check.next = [GpuFault(("a", 0), "Xid 79 (GPU fell off the bus)")]
    health.run_once(now=NOW)
    health.stop()
    assert check.closed
    with caplog.at_level("WARNING"):
        blamed = health.blame({("a", 0)}, NOW, now=NOW + 5)
    assert blamed == "GPU 0 on a (Xid 79 (GPU fell off the bus))"
    assert "checked after close" not in caplog.text
