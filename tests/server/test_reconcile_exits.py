"""How the reconcile loop settles a run's exit, against the in-memory executor: a run that
exits 75 on its own resumes as a preempted one; a run that ended within its time limit or
deadline ends as it exited however late its exit is seen; a run's GPUs are charged up to
its exit, not up to when the exit was seen; and a deadline's or time limit's stop, and a
user's cancel, give the job its preemption grace to checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import user_and_nodes
from sqlalchemy import select

from danlu.config import load_settings
from danlu.core.cluster import Cluster
from danlu.executors import FakeExecutor, FakeWorld, Outcome, StopReason
from danlu.executors.fake import ManualClock
from danlu.sched.registry import make_policy
from danlu.server.db import Database, JobRun
from danlu.server.reconcile import Reconciler
from danlu.server.services import events, jobs, users

NOW = 1_000_000.0


def _loop(
    db: Database, tmp_path: Path, specs: list[dict[str, Any]], **kwargs: Any
) -> tuple[Reconciler, FakeWorld, list[str]]:
    """A fifo loop over a fake executor with one 1-GPU node per job of ``specs`` (submitted
    by a new user at NOW) whose clock reads NOW, as the loop's passes do."""
    inventory = Cluster.homogeneous(len(specs), 1, "H100")
    body = {"command": ["python", "train.py"], "resources": {"gpus": 1}}
    with db.session() as s:
        alice = user_and_nodes(s, inventory.nodes, NOW)
        ids = [jobs.submit(s, {**body, **spec}, alice, now=NOW).id for spec in specs]
    world = FakeWorld(clock=ManualClock(NOW))
    executor = FakeExecutor(inventory, world)
    policy = make_policy("fifo")
    return (
        Reconciler(db, executor, load_settings(home=tmp_path), policy=policy, **kwargs),
        world,
        ids,
    )


def _reasons(db: Database, job_id: str) -> list[str]:
    with db.read_session() as s:
        return [event.reason for event in events.list_events(s, job_id)]


@pytest.mark.parametrize("max_restarts", [0, 3])
def test_a_run_that_exits_75_on_its_own_resumes_as_a_preempted_one(
    db: Database, tmp_path: Path, max_restarts: int
) -> None:
    """SIGTERM from outside danlu (a host shutdown, ``kill``): the job checkpointed and
    exited 75, which says "re-queue me to resume". A preemption is counted, not a restart,
    and no backoff is waited (nor is a job out of restarts FAILED)."""
    loop, world, (job_id,) = _loop(db, tmp_path, [{"name": "j", "max_restarts": max_restarts}])
    world.script(job_id, duration=10, outcome=Outcome.PREEMPTED)  # exits 75, unasked
    try:
        assert loop.run_once(now=NOW).launched == [job_id]
        world.clock.advance(20)
        assert loop.run_once(now=NOW + 20).launched == [job_id]  # resumed at once
        with db.read_session() as s:
            job = jobs.get_job(s, job_id)
            assert (job.state, job.restarts, job.preemptions, job.attempt) == ("RUNNING", 0, 1, 2)
        reasons = _reasons(db, job_id)
        assert "checkpointed and exited 75 on its own" in reasons[2], reasons
        assert reasons[3] == jobs.RESUME_REASON
    finally:
        loop.stop()


def test_a_run_that_ended_within_its_limits_succeeds_however_late_its_exit_is_seen(
    db: Database, tmp_path: Path
) -> None:
    """The pass that sees the exits comes after the time limit and the deadline (a slow
    pass, a control plane that was down): the runs exited 0 well within them."""
    specs = [{"name": "limited", "time_limit": 5}, {"name": "due", "deadline": 5}]
    loop, world, ids = _loop(db, tmp_path, specs)
    for job_id in ids:
        world.script(job_id, duration=1)
    try:
        assert loop.run_once(now=NOW).launched == ids
        world.clock.advance(1)
        report = loop.run_once(now=NOW + 60)
        assert (report.expired, report.timed_out, sorted(report.settled)) == ([], [], sorted(ids))
        with db.read_session() as s:
            states = [(jobs.get_job(s, i).state, jobs.get_job(s, i).exit_code) for i in ids]
        assert states == [("SUCCEEDED", 0), ("SUCCEEDED", 0)]
    finally:
        loop.stop()


def test_a_runs_gpus_are_charged_up_to_its_exit_not_to_when_it_was_seen(
    db: Database, tmp_path: Path
) -> None:
    """Its first run failed after 5 s; the pass that saw it came 90 s later. The job is
    charged 5 s (run time, attained service, its run's record), so that its next run is
    not stopped at its time limit early."""
    specs = [{"name": "flaky", "max_restarts": 3, "time_limit": 100}]
    loop, world, (job_id,) = _loop(db, tmp_path, specs)
    world.script(job_id, duration=5, outcome=Outcome.FAILED)
    try:
        loop.run_once(now=NOW)
        world.clock.advance(90)
        assert loop.run_once(now=NOW + 90).settled == [job_id]
        with db.read_session() as s:
            job = jobs.get_job(s, job_id)
            assert (job.state, job.restarts) == ("PENDING", 1)
            assert job.run_time == pytest.approx(5.0)
            assert job.attained_service == pytest.approx(5.0)
            runs = s.scalars(select(JobRun).where(JobRun.job_id == job_id)).all()
            assert [(r.started_at, r.ended_at) for r in runs] == [(NOW, NOW + 5)]
        world.script(job_id, duration=1000)
        world.clock.advance(110)
        assert loop.run_once(now=NOW + 200).launched == [job_id]  # after its backoff
        world.clock.advance(90)
        assert loop.run_once(now=NOW + 290).timed_out == []  # 5 s + 90 s of its 100 s
        world.clock.advance(6)
        assert loop.run_once(now=NOW + 296).timed_out == [job_id]
    finally:
        loop.stop()


@pytest.mark.parametrize(
    ("limit", "own_grace", "reason"),
    [
        (
            {"time_limit": 10},
            60,
            "time limit reached: ran 10s of 10s; the run ended 30s later (its grace to checkpoint)",
        ),
        ({"deadline": 10}, None, "deadline passed: not finished 10s after submission"),
    ],
)
def test_a_limits_stop_gives_the_job_its_preemption_grace_to_checkpoint(
    db: Database,
    tmp_path: Path,
    limit: dict[str, float],
    own_grace: float | None,
    reason: str,
) -> None:
    """The job checkpoints in 30 s: within its spec's ``preempt_grace`` (60 s) or else the
    control plane's (45 s here), not the executor's short cancel grace (the fake one's:
    none). It ends CANCELLED with the limit's reason, its checkpoint written (exit 75)."""
    spec: dict[str, Any] = {"name": "limited", **limit}
    if own_grace is not None:
        spec["preempt_grace"] = own_grace
    loop, world, (job_id,) = _loop(db, tmp_path, [spec], preempt_grace=45.0)
    world.script(job_id, duration=1000, checkpoint_seconds=30)
    try:
        loop.run_once(now=NOW)
        world.clock.advance(10)
        report = loop.run_once(now=NOW + 10)
        assert [*report.expired, *report.timed_out] == [job_id]
        assert report.stopped == [job_id]
        run = world.runs[job_id]
        assert run.stop_reason is StopReason.PREEMPT and not run.stop_kills
        world.clock.advance(30)
        assert loop.run_once(now=NOW + 40).settled == [job_id]
        with db.read_session() as s:
            job = jobs.get_job(s, job_id)
            assert (job.state, job.exit_code) == ("CANCELLED", 75)
        assert _reasons(db, job_id)[-1] == reason
    finally:
        loop.stop()


def test_a_users_cancel_gives_the_run_its_preemption_grace(db: Database, tmp_path: Path) -> None:
    """A cancel is delivered as a cancel (the job ends CANCELLED) with the job's own
    ``preempt_grace`` (60 s) to checkpoint, not a short fixed grace: the run that takes
    30 s to checkpoint still runs 6 s later, and ends with its checkpoint's exit 75."""
    spec = {"name": "cancelled", "time_limit": 1000, "preempt_grace": 60}
    loop, world, (job_id,) = _loop(db, tmp_path, [spec])
    world.script(job_id, duration=1000, checkpoint_seconds=30)
    try:
        loop.run_once(now=NOW)
        with db.session() as s:
            jobs.cancel_job(s, job_id, now=NOW + 5)
        world.clock.advance(5)
        assert loop.run_once(now=NOW + 5).stopped == [job_id]
        run = world.runs[job_id]
        assert run.stop_reason is StopReason.CANCEL and not run.stop_kills
        world.clock.advance(6)
        assert loop.run_once(now=NOW + 11).settled == []
        with db.read_session() as s:
            assert jobs.get_job(s, job_id).state == "RUNNING"
        world.clock.advance(30)
        assert loop.run_once(now=NOW + 41).settled == [job_id]
        with db.read_session() as s:
            job = jobs.get_job(s, job_id)
            assert (job.state, job.exit_code) == ("CANCELLED", 75)
    finally:
        loop.stop()


def test_a_cancelled_run_that_ignores_sigterm_is_killed_after_the_control_planes_grace(
    db: Database, tmp_path: Path
) -> None:
    """A job whose spec names no ``preempt_grace`` gets the control plane's
    (``DANLU_PREEMPT_GRACE``, here 20 s) before its SIGKILL."""
    loop, world, (job_id,) = _loop(db, tmp_path, [{"name": "stubborn"}], preempt_grace=20)
    world.script(job_id, duration=1000, checkpoint_seconds=None)  # ignores SIGTERM
    try:
        loop.run_once(now=NOW)
        with db.session() as s:
            jobs.cancel_job(s, job_id, now=NOW)
        assert loop.run_once(now=NOW).stopped == [job_id]
        world.clock.advance(19)
        assert loop.run_once(now=NOW + 19).settled == []
        world.clock.advance(1)
        assert loop.run_once(now=NOW + 20).settled == [job_id]
        with db.read_session() as s:
            job = jobs.get_job(s, job_id)
            assert (job.state, job.exit_code) == ("CANCELLED", 137)
    finally:
        loop.stop()


@pytest.mark.parametrize(("cancelled_at", "state"), [(8, "SUCCEEDED"), (3, "CANCELLED")])
def test_a_run_that_exited_0_before_a_cancel_request_succeeds(
    db: Database, tmp_path: Path, cancelled_at: float, state: str
) -> None:
    """The run exited 0 at NOW + 5 and the pass that sees it comes after a cancel request:
    a request made after the exit was too late (the job SUCCEEDED, and the job waiting for
    its success starts); one made before it ended the job CANCELLED."""
    loop, world, (first,) = _loop(db, tmp_path, [{"name": "first"}])
    body = {"name": "then", "command": ["true"], "resources": {"gpus": 1}, "depends_on": [first]}
    with db.session() as s:
        then = jobs.submit(s, body, users.get_user(s, "alice"), now=NOW).id
    world.script(first, duration=5)
    try:
        assert loop.run_once(now=NOW).launched == [first]
        world.clock.advance(10)
        with db.session() as s:
            jobs.cancel_job(s, first, now=NOW + cancelled_at)
        report = loop.run_once(now=NOW + 10)
        assert report.settled == [first]
        with db.read_session() as s:
            job = jobs.get_job(s, first)
            assert (job.state, job.exit_code, job.finished_at) == (state, 0, NOW + 10)
            after = jobs.get_job(s, then).state
        assert after == ("RUNNING" if state == "SUCCEEDED" else "CANCELLED")
    finally:
        loop.stop()


def test_a_job_cancelled_while_queued_after_a_failed_run_has_no_exit_code(
    db: Database, tmp_path: Path
) -> None:
    """Its run failed with exit 1 (kept while it waits to restart: why it waits); cancelled
    before its next run, it ended without a run's exit: no exit code, not the old run's."""
    loop, world, (job_id,) = _loop(db, tmp_path, [{"name": "j", "max_restarts": 3}])
    world.script(job_id, duration=5, outcome=Outcome.FAILED)
    try:
        loop.run_once(now=NOW)
        world.clock.advance(6)
        loop.run_once(now=NOW + 6)
        with db.session() as s:
            job = jobs.get_job(s, job_id)
            assert (job.state, job.exit_code) == ("PENDING", 1)
            jobs.cancel_job(s, job_id, now=NOW + 7)
        with db.read_session() as s:
            job = jobs.get_job(s, job_id)
            assert (job.state, job.exit_code) == ("CANCELLED", None)
    finally:
        loop.stop()


def test_a_new_run_clears_the_exit_code_of_the_one_before(db: Database, tmp_path: Path) -> None:
    """Restarted after a failure (exit 1), the job runs again: no exit code while it runs,
    and one cancelled then ends with its own run's (its checkpoint's 75)."""
    loop, world, (job_id,) = _loop(db, tmp_path, [{"name": "j", "max_restarts": 3}])
    world.script(job_id, duration=5, outcome=Outcome.FAILED)
    try:
        loop.run_once(now=NOW)
        world.clock.advance(6)
        loop.run_once(now=NOW + 6)
        world.script(job_id, duration=1000)
        world.clock.advance(100)  # past the restart's backoff
        assert loop.run_once(now=NOW + 106).launched == [job_id]
        with db.session() as s:
            job = jobs.get_job(s, job_id)
            assert (job.state, job.attempt, job.exit_code) == ("RUNNING", 2, None)
            jobs.cancel_job(s, job_id, now=NOW + 106)
        loop.run_once(now=NOW + 106)
        loop.run_once(now=NOW + 107)
        with db.read_session() as s:
            job = jobs.get_job(s, job_id)
            assert (job.state, job.exit_code) == ("CANCELLED", 75)
    finally:
        loop.stop()
