"""A move recorded by the reconcile loop, against the in-memory executor: the moved job's
old run checkpoints with the preemption grace, and a job the same plan put on the GPUs it
leaves is launched only once that run has exited (its GPUs are not free before), also when
the first request to stop it failed; a pass run at a given time settles exits at that time."""

from __future__ import annotations

from pathlib import Path

from helpers import ScriptedPolicy, user_and_nodes
from helpers import one_gpu as _gpu

from danlu.config import load_settings
from danlu.core.cluster import Cluster
from danlu.executors import ExecutorError, FakeExecutor, FakeWorld, Handle, StopReason
from danlu.sched.view import Plan, Preempt, Resize, Start
from danlu.server.db import Database
from danlu.server.reconcile import Reconciler
from danlu.server.services import jobs

NOW = 1_000_000.0


def _submitted(db: Database, inventory: Cluster, *names: str) -> list[str]:
    """The ids of 1-GPU jobs ``names`` submitted by a new user on ``inventory``."""
    with db.session() as s:
        alice = user_and_nodes(s, inventory.nodes, NOW)
        body = {"command": ["python", "train.py"], "resources": {"gpus": 1}}
        return [jobs.submit(s, {"name": name, **body}, alice, now=NOW).id for name in names]


def _move_onto_gpu_1(
    db: Database, tmp_path: Path, executor: type[FakeExecutor] = FakeExecutor
) -> tuple[Reconciler, FakeWorld, str, str]:
    """A loop whose policy starts ``mover`` on GPU 0, then moves it to GPU 1 and starts
    ``newcomer`` on GPU 0 in one plan (the mover checkpoints in 30 s, a 120 s grace)."""
    inventory = Cluster.homogeneous(1, 4, "H100")
    mover, newcomer = _submitted(db, inventory, "mover", "newcomer")
    world = FakeWorld()
    world.script(mover, duration=1000, checkpoint_seconds=30)
    world.script(newcomer, duration=1000)
    policy = ScriptedPolicy(
        [
            Plan(starts=(Start(mover, _gpu(0)),)),
            Plan(resizes=(Resize(mover, _gpu(1)),), starts=(Start(newcomer, _gpu(0)),)),
        ]
    )
    loop = Reconciler(
        db,
        executor(inventory, world),
        load_settings(home=tmp_path),
        policy=policy,
        preempt_grace=120.0,
    )
    return loop, world, mover, newcomer


def test_a_job_placed_on_a_moved_job_s_gpu_launches_after_its_old_run_exits(
    db: Database, tmp_path: Path
) -> None:
    loop, world, mover, newcomer = _move_onto_gpu_1(db, tmp_path)
    assert loop.run_once(now=NOW + 10).launched == [mover]
    first = world.runs[mover]
    report = loop.run_once(now=NOW + 70)
    # the store has the move and the start; the old run checkpoints (30 s, within the
    # 120 s grace: preempted, not cancelled) and holds GPU 0 until it exits
    assert report.launched == [] and report.errors == []
    assert first.stop_reason is StopReason.PREEMPT and world.runs[mover] is first
    with db.read_session() as s:
        assert jobs.get_job(s, mover).allocation[0]["gpu"] == 1
        assert jobs.get_job(s, newcomer).state == "RUNNING"
    world.clock.advance(10)
    assert loop.run_once(now=NOW + 80).launched == []  # still checkpointing
    world.clock.advance(20)
    assert sorted(loop.run_once(now=NOW + 100).launched) == sorted([mover, newcomer])
    placed = {launch.job_id: [(g.node, g.gpu) for g in launch.gpus] for launch in world.launches}
    assert placed == {mover: [(0, 1)], newcomer: [(0, 0)]}
    launched = [launch.job_id for launch in world.launches]
    assert (launched.count(mover), launched.count(newcomer)) == (2, 1)
    loop.stop()


class _FirstStopFails(FakeExecutor):
    """Its first preempt request fails, as when the executor is briefly unreachable."""

    failed = 0

    def preempt(self, handle: Handle, grace_seconds: float) -> None:
        if not self.failed:
            self.failed += 1
            raise ExecutorError(f"cannot reach the run of {handle.key}")
        super().preempt(handle, grace_seconds)


def test_a_move_whose_stop_request_failed_asks_again_and_its_gpu_stays_busy(
    db: Database, tmp_path: Path
) -> None:
    loop, world, mover, newcomer = _move_onto_gpu_1(db, tmp_path, _FirstStopFails)
    executor = loop.executor
    assert isinstance(executor, _FirstStopFails)
    loop.run_once(now=NOW + 10)
    first = world.runs[mover]
    report = loop.run_once(now=NOW + 70)
    # the move's stop request failed; the new run's launch finds the old one running and
    # asks again, and the newcomer does not start on GPU 0 beside it
    assert executor.failed == 1 and first.stop_reason is StopReason.PREEMPT
    assert report.preempted == [mover] and report.launched == []
    world.clock.advance(100.0)  # the old run checkpoints (30 s) and exits
    report = loop.run_once(now=NOW + 170)
    assert sorted(report.launched) == sorted([mover, newcomer])
    assert [slot.gpu for slot in world.runs[newcomer].launch.gpus] == [0]
    assert [slot.gpu for slot in world.runs[mover].launch.gpus] == [1]


def test_a_pass_at_a_given_time_settles_exits_at_that_time(db: Database, tmp_path: Path) -> None:
    """A caller driving its own clock (a replay, these tests) gets run times and finish
    times on that clock, not the wall clock's: a job that ran 200 s of it ran 200 s, and a
    preempted job's wait starts when its run exited."""
    inventory = Cluster.homogeneous(1, 1, "H100")
    short, stopped = _submitted(db, inventory, "short", "stopped")
    world = FakeWorld()
    world.script(short, duration=150)
    world.script(stopped, duration=1000, checkpoint_seconds=20)
    policy = ScriptedPolicy(
        [
            Plan(starts=(Start(short, _gpu(0)),)),
            Plan(starts=(Start(stopped, _gpu(0)),)),
            Plan(preempts=(Preempt(stopped, "test"),)),
        ]
    )
    settings = load_settings(home=tmp_path)
    loop = Reconciler(db, FakeExecutor(inventory, world), settings, policy=policy)
    loop.run_once(now=NOW + 10)
    world.clock.advance(200)
    assert loop.run_once(now=NOW + 210).settled == [short]
    world.clock.advance(90)
    loop.run_once(now=NOW + 300)  # preempted: it checkpoints for 20 s
    world.clock.advance(30)
    loop.run_once(now=NOW + 330)
    with db.read_session() as s:
        done = jobs.get_job(s, short)
        assert (done.state, done.finished_at, done.run_time) == ("SUCCEEDED", NOW + 210, 200.0)
        back = jobs.get_job(s, stopped)
        assert (back.state, back.run_time) == ("PENDING", 120.0)
