"""A move recorded by the reconcile loop, against the in-memory executor: the moved job's
old run checkpoints with the preemption grace, and a job the same plan put on the GPUs it
leaves is launched only once that run has exited (its GPUs are not free before), also when
the first request to stop it failed; an old run that ends on its own within the grace
counts (a success ends the job, a failure is counted); a pass run at a given time settles
exits at that time."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import ScriptedPolicy, user_and_nodes
from helpers import one_gpu as _gpu

from danlu.config import load_settings
from danlu.core.cluster import Cluster
from danlu.executors import ExecutorError, FakeExecutor, FakeWorld, Handle, Outcome, StopReason
from danlu.sched.view import Plan, Preempt, Resize, Start
from danlu.server.db import Database
from danlu.server.reconcile import Reconciler
from danlu.server.services import events, jobs

NOW = 1_000_000.0


def _submitted(db: Database, inventory: Cluster, *names: str, max_restarts: int = 0) -> list[str]:
    """The ids of 1-GPU jobs ``names`` submitted by a new user on ``inventory``."""
    with db.session() as s:
        alice = user_and_nodes(s, inventory.nodes, NOW)
        body = {"command": ["python", "train.py"], "resources": {"gpus": 1}}
        body["max_restarts"] = max_restarts
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


def _moved_while_it_ends(
    db: Database, tmp_path: Path, outcome: Outcome, max_restarts: int = 0
) -> tuple[Reconciler, FakeWorld, str]:
    """A job moved from GPU 0 to GPU 1 at NOW + 41 whose old run ignores the SIGTERM (no
    checkpoint handler) and ends by itself with ``outcome`` at NOW + 61, within the
    move's 120 s grace, before a pass at NOW + 66 launches the new run."""
    inventory = Cluster.homogeneous(1, 2, "H100")
    (mover,) = _submitted(db, inventory, "mover", max_restarts=max_restarts)
    world = FakeWorld()
    world.script(mover, duration=60, checkpoint_seconds=None, outcome=outcome)
    policy = ScriptedPolicy(
        [Plan(starts=(Start(mover, _gpu(0)),)), Plan(resizes=(Resize(mover, _gpu(1)),))]
    )
    settings = load_settings(home=tmp_path)
    loop = Reconciler(
        db, FakeExecutor(inventory, world), settings, policy=policy, preempt_grace=120.0
    )
    assert loop.run_once(now=NOW + 1).launched == [mover]
    world.clock.advance(40)
    assert loop.run_once(now=NOW + 41).launched == []  # the old run still runs
    world.clock.advance(25)
    return loop, world, mover


def test_a_moved_jobs_old_run_that_finished_its_work_within_the_grace_ends_the_job(
    db: Database, tmp_path: Path
) -> None:
    """Its work is done: the job SUCCEEDED, not launched again to do it twice."""
    loop, world, mover = _moved_while_it_ends(db, tmp_path, Outcome.SUCCEEDED)
    report = loop.run_once(now=NOW + 66)
    assert report.launched == [] and report.settled == [mover]
    assert [launch.run_attempt for launch in world.launches] == [1]
    with db.read_session() as s:
        job = jobs.get_job(s, mover)
        assert (job.state, job.exit_code, job.allocation, job.moved_from) == (
            "SUCCEEDED",
            0,
            None,
            None,
        )
    loop.stop()


@pytest.mark.parametrize(("max_restarts", "state"), [(0, "FAILED"), (2, "PENDING")])
def test_a_moved_jobs_old_run_that_failed_within_the_grace_counts_as_a_failure(
    db: Database, tmp_path: Path, max_restarts: int, state: str
) -> None:
    """As a failure the poll sees: a restart counted (with its backoff), or the job FAILED
    once out of restarts; the new run is not launched meanwhile."""
    loop, world, mover = _moved_while_it_ends(db, tmp_path, Outcome.FAILED, max_restarts)
    report = loop.run_once(now=NOW + 66)
    assert report.launched == [] and report.settled == [mover]
    with db.read_session() as s:
        job = jobs.get_job(s, mover)
        assert (job.state, job.restarts, job.exit_code) == (state, min(1, max_restarts), 1)
        reasons = [e.reason for e in events.list_events(s, mover)]
        assert any("the run it was moved from" in reason for reason in reasons), reasons
    assert [launch.run_attempt for launch in world.launches] == [1]
    loop.stop()


def test_a_moved_jobs_old_run_that_checkpointed_lets_the_new_one_launch(
    db: Database, tmp_path: Path
) -> None:
    """The move's own ending (exit 75 on its SIGTERM): nothing to judge, the new run goes."""
    loop, world, mover, _ = _move_onto_gpu_1(db, tmp_path)
    loop.run_once(now=NOW + 10)
    loop.run_once(now=NOW + 70)
    with db.read_session() as s:
        assert jobs.get_job(s, mover).moved_from == 1
    world.clock.advance(30)  # checkpointed (30 s) and exited
    assert mover in loop.run_once(now=NOW + 100).launched
    with db.read_session() as s:
        job = jobs.get_job(s, mover)
        assert (job.state, job.restarts, job.moved_from) == ("RUNNING", 0, None)
    loop.stop()


def _moved_then_stopped(
    db: Database, tmp_path: Path, *, time_limit: float | None = None
) -> tuple[Reconciler, FakeWorld, str]:
    """A job on GPU 0 whose work ends at 25 s of the world's clock and whose checkpoint
    takes 100 s (40 s with a ``time_limit``), moved to GPU 1 at 10 s: its old run goes on
    within the move's 120 s grace while the new run waits for it."""
    inventory = Cluster.homogeneous(1, 2, "H100")
    with db.session() as s:
        alice = user_and_nodes(s, inventory.nodes, NOW)
        body = {"name": "mover", "command": ["python", "train.py"], "resources": {"gpus": 1}}
        if time_limit is not None:
            body["time_limit"] = time_limit
        mover = jobs.submit(s, body, alice, now=NOW).id
    world = FakeWorld()
    if time_limit is None:
        world.script(mover, duration=25, checkpoint_seconds=100)
    else:
        world.script(mover, duration=1000, checkpoint_seconds=40)
    plans = [Plan(starts=(Start(mover, _gpu(0)),)), Plan(resizes=(Resize(mover, _gpu(1)),))]
    if time_limit is None:
        plans.append(Plan(preempts=(Preempt(mover, "test"),)))
    settings = load_settings(home=tmp_path)
    executor = FakeExecutor(inventory, world)
    loop = Reconciler(db, executor, settings, policy=ScriptedPolicy(plans), preempt_grace=120.0)
    assert loop.run_once(now=NOW).launched == [mover]
    world.clock.advance(10)
    assert loop.run_once(now=NOW + 10).launched == []  # moved: the old run still runs
    return loop, world, mover


def test_a_moved_job_preempted_before_its_new_run_waits_for_the_old_run(
    db: Database, tmp_path: Path
) -> None:
    """Preempted while the run it was moved from still runs (the new one never launched):
    the job is settled by how that run ends, not as a run that never launched while the
    old one still holds a GPU; here it finishes its work within the grace, so the job
    SUCCEEDED and is not run again."""
    loop, world, mover = _moved_then_stopped(db, tmp_path)
    world.clock.advance(2)
    loop.run_once(now=NOW + 12)  # the preemption is recorded
    world.clock.advance(1)
    report = loop.run_once(now=NOW + 13)
    assert report.settled == [] and world.runs[mover].launch.run_attempt == 1
    with db.read_session() as s:
        job = jobs.get_job(s, mover)
        assert (job.state, job.attempt, job.allocation[0]["gpu"]) == ("PREEMPTING", 2, 1)
    world.clock.advance(17)  # the old run's work ended at 25 s, within its grace
    assert loop.run_once(now=NOW + 30).settled == [mover]
    with db.read_session() as s:
        job = jobs.get_job(s, mover)
        assert (job.state, job.exit_code, job.allocation) == ("SUCCEEDED", 0, None)
    assert [launch.run_attempt for launch in world.launches] == [1]
    loop.stop()


def test_a_moved_job_past_its_time_limit_ends_once_the_old_run_has_exited(
    db: Database, tmp_path: Path
) -> None:
    """Its time limit is reached while the run it was moved from checkpoints: the job keeps
    its GPU until that run has exited, then ends CANCELLED."""
    loop, world, mover = _moved_then_stopped(db, tmp_path, time_limit=12)
    world.clock.advance(3)
    report = loop.run_once(now=NOW + 13)
    assert report.timed_out == [mover] and report.settled == []
    with db.read_session() as s:
        job = jobs.get_job(s, mover)
        assert (job.state, job.allocation[0]["gpu"]) == ("RUNNING", 1)
        assert job.cancel_requested_at is not None
    assert loop.executor.poll(Handle(mover, 1)).running
    world.clock.advance(40)  # it checkpointed (40 s after the move's SIGTERM) and exited
    assert loop.run_once(now=NOW + 53).settled == [mover]
    with db.read_session() as s:
        job = jobs.get_job(s, mover)
        assert (job.state, job.allocation) == ("CANCELLED", None)
    assert [launch.run_attempt for launch in world.launches] == [1]
    loop.stop()
