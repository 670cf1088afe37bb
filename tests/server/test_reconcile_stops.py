"""Earlier runs of moved jobs and launches that cannot be prepared, against the in-memory
executor: a moved job cancelled or preempted before its new run launched has its old run
stopped, and settles once that run has exited (not while the executor cannot be asked); a
restarted control plane lets a moved job's old run finish its checkpoint; a job whose
checkpoint directory cannot be made costs that job alone, not the pass."""

from __future__ import annotations

import errno
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers import ScriptedPolicy, user_and_nodes
from helpers import one_gpu as _gpu

from danlu.config import load_settings
from danlu.core.cluster import Cluster
from danlu.executors import ExecutorError, FakeExecutor, FakeWorld, Handle, StopReason
from danlu.sched.registry import make_policy
from danlu.sched.view import Plan, Preempt, Resize, Start
from danlu.server.db import Database
from danlu.server.reconcile import Reconciler
from danlu.server.services import cluster, events, jobs

NOW = 1_000_000.0


class FlakyExecutor(FakeExecutor):
    """Its first ``preempt_failures`` preempt requests and first ``cancel_failures`` cancel
    requests fail, as when the executor is briefly unreachable."""

    preempt_failures = 0
    cancel_failures = 0

    def preempt(self, handle: Handle, grace_seconds: float) -> None:
        if self.preempt_failures > 0:
            self.preempt_failures -= 1
            raise ExecutorError(f"cannot reach the run of {handle.key}")
        super().preempt(handle, grace_seconds)

    def cancel(self, handle: Handle, grace_seconds: float | None = None) -> None:
        if self.cancel_failures > 0:
            self.cancel_failures -= 1
            raise ExecutorError(f"cannot reach the run of {handle.key}")
        super().cancel(handle, grace_seconds)


def _submitted(db: Database, inventory: Cluster, *names: str) -> list[str]:
    with db.session() as s:
        alice = user_and_nodes(s, inventory.nodes, NOW)
        body = {"command": ["python", "train.py"], "resources": {"gpus": 1}}
        return [jobs.submit(s, {"name": name, **body}, alice, now=NOW).id for name in names]


@dataclass
class Moved:
    """A loop whose ``mover`` was moved while its old run's stop requests failed."""

    loop: Reconciler
    executor: FlakyExecutor
    world: FakeWorld
    policy: ScriptedPolicy
    mover: str
    other: str


def _moved_unstopped(db: Database, tmp_path: Path) -> Moved:
    """``mover`` started on GPU 0 and moved to GPU 1, both requests to stop its old run
    (the move's, and the new run's launch's) failed: its old run runs on, unasked, on GPU 0
    (its checkpoint takes 30 s, within the 120 s grace). ``other`` waits; the plans of the
    next rounds are the test's to append to ``policy.plans``."""
    inventory = Cluster.homogeneous(1, 4, "H100")
    mover, other = _submitted(db, inventory, "mover", "other")
    world = FakeWorld()
    world.script(mover, duration=10_000, checkpoint_seconds=30)
    world.script(other, duration=10_000)
    policy = ScriptedPolicy(
        [Plan(starts=(Start(mover, _gpu(0)),)), Plan(resizes=(Resize(mover, _gpu(1)),))]
    )
    executor = FlakyExecutor(inventory, world)
    loop = Reconciler(
        db, executor, load_settings(home=tmp_path), policy=policy, preempt_grace=120.0
    )
    assert loop.run_once(now=NOW + 10).launched == [mover]
    executor.preempt_failures = 2
    report = loop.run_once(now=NOW + 20)
    assert report.launched == [] and len(report.errors) == 1
    old = world.runs[mover]
    assert (old.launch.run_attempt, old.stop_reason) == (1, None)  # unasked
    return Moved(loop, executor, world, policy, mover, other)


def _state(db: Database, job_id: str) -> str:
    with db.read_session() as s:
        return str(jobs.get_job(s, job_id).state)


def test_a_moved_job_cancelled_before_its_new_run_launched_stops_its_old_run(
    db: Database, tmp_path: Path
) -> None:
    moved = _moved_unstopped(db, tmp_path)
    loop, world, mover, other = moved.loop, moved.world, moved.mover, moved.other
    moved.policy.plans += [Plan(), Plan(), Plan(), Plan(starts=(Start(other, _gpu(0)),))]
    old = world.runs[mover]
    with db.session() as s:
        jobs.cancel_job(s, mover, now=NOW + 25)
    report = loop.run_once(now=NOW + 30)
    # the old run is cancelled with the job's grace (it checkpoints, 30 s); the job is
    # recorded cancelled (and its GPU free) once a pass finds that run exited
    assert report.stopped == [mover] and report.settled == []
    assert (old.stop_reason, old.stop_kills) == (StopReason.CANCEL, False)
    assert _state(db, mover) == "RUNNING"
    world.clock.advance(1)
    assert loop.run_once(now=NOW + 31).settled == []
    world.clock.advance(29)
    assert loop.run_once(now=NOW + 35).settled == [mover]
    assert _state(db, mover) == "CANCELLED"
    assert loop.run_once(now=NOW + 40).launched == [other]  # GPU 0 is free indeed
    assert [slot.gpu for slot in world.runs[other].launch.gpus] == [0]
    loop.stop()


def test_a_moved_job_is_not_settled_while_its_old_run_cannot_be_stopped(
    db: Database, tmp_path: Path
) -> None:
    moved = _moved_unstopped(db, tmp_path)
    loop, mover = moved.loop, moved.mover
    old = moved.world.runs[mover]
    with db.session() as s:
        jobs.cancel_job(s, mover, now=NOW + 25)
    moved.executor.cancel_failures = 1
    report = loop.run_once(now=NOW + 30)
    assert report.settled == [] and report.errors == [
        f"stop {mover}#1: cannot reach the run of {mover}#1"
    ]
    assert _state(db, mover) == "RUNNING" and old.stop_reason is None
    report = loop.run_once(now=NOW + 40)  # the executor answers again
    assert report.stopped == [mover] and old.stop_reason is StopReason.CANCEL
    assert loop.run_once(now=NOW + 50).settled == []  # checkpointing, within its grace
    moved.world.clock.advance(30)
    assert loop.run_once(now=NOW + 80).settled == [mover]  # the old run has exited
    assert _state(db, mover) == "CANCELLED"
    loop.stop()


def test_a_moved_job_preempted_before_its_new_run_launched_checkpoints_its_old_run(
    db: Database, tmp_path: Path
) -> None:
    moved = _moved_unstopped(db, tmp_path)
    loop, mover = moved.loop, moved.mover
    moved.policy.plans.append(Plan(preempts=(Preempt(mover, "a test"),)))
    old = moved.world.runs[mover]
    loop.run_once(now=NOW + 30)  # recorded PREEMPTING; its new run is unknown
    report = loop.run_once(now=NOW + 40)
    # preempted with the grace, not cancelled: it checkpoints (30 s), holding GPU 0 (the
    # job is not settled meanwhile), and exits
    assert report.preempted == [mover] and report.settled == []
    assert (old.stop_reason, old.stop_kills) == (StopReason.PREEMPT, False)
    assert _state(db, mover) == "PREEMPTING"
    moved.world.clock.advance(30)
    assert loop.run_once(now=NOW + 70).settled == [mover]
    assert _state(db, mover) == "PENDING"
    loop.stop()


def _moved_then_restarted(
    db: Database, tmp_path: Path, *, asked: bool
) -> tuple[Reconciler, FakeWorld, str]:
    """``mover`` moved from GPU 0 to GPU 1 (its old run asked to stop when ``asked``, else
    both requests failed), then the control plane restarts 5 s later."""
    moved = _moved_unstopped(db, tmp_path)
    world, mover = moved.world, moved.mover
    if asked:
        moved.loop.run_once(now=NOW + 21)  # the new run's launch asks the old run again
        assert world.runs[mover].stop_reason is StopReason.PREEMPT
    moved.loop.stop()
    world.clock.advance(5)
    again = FakeExecutor(moved.executor.inventory(), world)
    settings = load_settings(home=tmp_path)
    restarted = Reconciler(db, again, settings, policy=ScriptedPolicy([]), preempt_grace=120.0)
    return restarted, world, mover


def test_a_restart_lets_a_moved_job_s_old_run_finish_its_checkpoint(
    db: Database, tmp_path: Path
) -> None:
    loop, world, mover = _moved_then_restarted(db, tmp_path, asked=True)
    old = world.runs[mover]
    stop_at = old.stop_at
    assert loop.run_once(now=NOW + 30).launched == []  # it still checkpoints
    assert (old.stop_reason, old.stop_kills, old.stop_at) == (StopReason.PREEMPT, False, stop_at)
    world.clock.advance(30)
    assert loop.run_once(now=NOW + 60).launched == [mover]  # then the new run, on GPU 1
    assert [slot.gpu for slot in world.runs[mover].launch.gpus] == [1]
    loop.stop()


def test_a_restart_preempts_a_moved_job_s_old_run_not_asked_to_stop(
    db: Database, tmp_path: Path
) -> None:
    loop, world, mover = _moved_then_restarted(db, tmp_path, asked=False)
    old = world.runs[mover]
    assert loop.adopt() == []
    assert (old.stop_reason, old.stop_kills) == (StopReason.PREEMPT, False)  # not killed
    loop.stop()


def test_a_restart_still_cancels_the_run_of_a_finished_job(db: Database, tmp_path: Path) -> None:
    loop, world, mover = _moved_then_restarted(db, tmp_path, asked=True)
    old = world.runs[mover]
    with db.session() as s:
        jobs.cancel_job(s, mover, now=NOW + 26)
        jobs.settle_exit(
            s, jobs.get_job(s, mover), succeeded=False, exit_code=None, reason="t", now=NOW + 26
        )
    assert _state(db, mover) == "CANCELLED"
    assert loop.adopt() == []
    assert old.stop_reason is StopReason.CANCEL  # an orphan: killed
    loop.stop()


def _two_queued(db: Database, tmp_path: Path) -> tuple[Reconciler, FakeWorld, str, str]:
    inventory = Cluster.homogeneous(1, 2, "H100")
    with db.session() as s:
        alice = user_and_nodes(s, inventory.nodes, NOW)
        body = {"command": ["python", "train.py"], "resources": {"gpus": 1}}
        first = jobs.submit(s, {"name": "first", **body}, alice, now=NOW).id
        second = jobs.submit(s, {"name": "second", **body}, alice, now=NOW + 1).id
    world = FakeWorld()
    world.default = world.default.__class__(duration=1000)
    settings = load_settings(home=tmp_path)
    loop = Reconciler(db, FakeExecutor(inventory, world), settings, policy=make_policy("fifo"))
    return loop, world, first, second


def _failing_mkdir(monkeypatch: pytest.MonkeyPatch, job_id: str, code: int) -> None:
    """Making ``job_id``'s checkpoint directory fails with ``code``."""
    real = Path.mkdir

    def mkdir(self: Path, *args: Any, **kwargs: Any) -> None:
        if self.name == job_id:
            raise OSError(code, "made to fail", str(self))
        real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", mkdir)


def test_a_full_checkpoint_disk_requeues_that_job_and_the_pass_goes_on(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop, world, first, second = _two_queued(db, tmp_path)
    purges: list[float] = []
    purge = loop.purger.run

    def counted(t: float, *lists: list[str]) -> tuple[list[str], list[str]]:
        purges.append(t)
        return purge(t, *lists)

    monkeypatch.setattr(loop.purger, "run", counted)
    _failing_mkdir(monkeypatch, first, errno.ENOSPC)
    report = loop.run_once(now=NOW + 10)
    assert report.launched == [second] and report.settled == [first] and report.errors == []
    assert purges  # the retention's step ran
    with db.read_session() as s:
        job = jobs.get_job(s, first)
        assert (job.state, job.restarts, job.allocation) == ("PENDING", 0, None)
        # the control plane's failure, said so: not "the node could not launch it"
        reason = str(job.pending_reason)
        assert reason.startswith("the control plane could not make its checkpoint directory: ")
        assert "No space left" in reason or "made to fail" in reason, reason
        # the directory is the control plane's: no node is blamed for it
        assert [n.launch_failures for n in cluster.list_nodes(s)] == [0]
    assert [launch.job_id for launch in world.launches] == [second]
    loop.stop()


def test_a_checkpoint_directory_that_cannot_be_made_requeues_the_job_and_is_reported(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No permission to make the directory (not a fault of the machine's): the error is
    reported (an administrator's to fix), and the job gives its GPU back, re-queued with
    no restart counted, ``danlu explain`` saying why; it launches once the directory can
    be made, after its backoff. It stayed RUNNING, holding its GPU and said to be running,
    tried every pass."""
    loop, _, first, second = _two_queued(db, tmp_path)
    _failing_mkdir(monkeypatch, first, errno.EACCES)
    report = loop.run_once(now=NOW + 10)
    assert report.launched == [second] and report.settled == [first]
    assert len(report.errors) == 1 and report.errors[0].startswith(f"launch {first}: ")
    assert "cannot make its checkpoint directory" in report.errors[0]
    with db.read_session() as s:
        job = jobs.get_job(s, first)
        assert (job.state, job.restarts, job.allocation) == ("PENDING", 0, None)
        explained = jobs.why(s, job, now=NOW + 11)
        said = "the control plane could not make its checkpoint directory: "
        assert explained.startswith(said) and "eligible again in" in explained, explained
        assert "the node could not launch it" not in explained
        reasons = [e.reason for e in events.list_events(s, first)]
        assert any(r.startswith(said) and "no restart counted" in r for r in reasons), reasons
        assert [n.launch_failures for n in cluster.list_nodes(s)] == [0]
    monkeypatch.undo()
    assert loop.run_once(now=NOW + 15).launched == []  # its backoff
    assert loop.run_once(now=NOW + 30).launched == [first]
    assert (tmp_path / "checkpoints" / first).is_dir()
    loop.stop()
