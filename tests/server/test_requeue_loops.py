"""Exits that must not re-queue a job for free forever, against the in-memory executor.

A run that exits 75 with no stop asked by danlu says "I checkpointed, re-queue me": free
the first time and after progress (a host shutdown), but a job that does it again without
progress counts a restart each time, with backoff, and FAILS out of restarts. A run that
fails (exit 1: it crashed while checkpointing) while danlu preempts it counts a restart
too; a preemption danlu asked for stays free."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import one_gpu_loop

from danlu.executors import FakeWorld, Outcome
from danlu.server.db import Database
from danlu.server.reconcile import Reconciler
from danlu.server.services import events, jobs, metrics, users

NOW = 1_000_000.0
LONG_RUN = 300.0
"""Seconds of a run that count as progress for a job that reports no steps."""
BODY = {"command": ["python", "train.py"], "resources": {"gpus": 1}}


def _loop(db: Database, tmp_path: Path, policy: str = "fifo") -> tuple[Reconciler, FakeWorld]:
    """A loop of ``policy`` over a fake executor of one 1-GPU node, its clock at NOW."""
    return one_gpu_loop(db, tmp_path, NOW, policy)


def _submit(db: Database, t: float, **spec: Any) -> str:
    with db.session() as s:
        return jobs.submit(s, {**BODY, **spec}, users.get_user(s, "alice"), now=t).id


def _job(db: Database, job_id: str) -> tuple[str, int, int]:
    """(state, restarts, preemptions) of the job."""
    with db.read_session() as s:
        job = jobs.get_job(s, job_id)
        return job.state, job.restarts, job.preemptions


def _reasons(db: Database, job_id: str) -> list[str]:
    with db.read_session() as s:
        return [event.reason for event in events.list_events(s, job_id)]


def _report_step(db: Database, job_id: str, step: int, t: float) -> None:
    """The job's run reports a training step, as danlu.train does."""
    with db.session() as s:
        metrics.ingest(s, jobs.get_job(s, job_id), [{"step": step, "time": t}], now=t)


def _passes(loop: Reconciler, world: FakeWorld, count: int, every: float) -> float:
    """``count`` passes, the clock moved by ``every`` seconds before each; the clock's time."""
    for _ in range(count):
        loop.run_once(now=world.clock.advance(every))
    return world.clock.now


def test_a_job_that_exits_75_at_once_every_time_fails_out_of_restarts(
    db: Database, tmp_path: Path
) -> None:
    """Exit 75 after 5 s, every run, no stop asked, no step reported: the first is free,
    each next one counts a restart (with backoff); the third counted one is past
    ``max_restarts: 2`` and the job FAILS, the reason naming exit 75 without progress."""
    loop, world = _loop(db, tmp_path)
    job_id = _submit(db, NOW, name="loops", max_restarts=2)
    world.script(job_id, duration=5, outcome=Outcome.PREEMPTED)  # exits 75, unasked
    try:
        loop.run_once(now=NOW)
        _passes(loop, world, 60, 10.0)  # 600 s: far more runs than its restarts allow
        state, restarts, preemptions = _job(db, job_id)
        assert (state, restarts, preemptions) == ("FAILED", 2, 1)
        with db.read_session() as s:
            assert jobs.get_job(s, job_id).exit_code == 75
        last = _reasons(db, job_id)[-1]
        assert "exited 75" in last and "without progress" in last, last
        assert "out of restarts (2 of 2)" in last, last
        assert len(world.launches) == 4  # the free run and the three counted ones
    finally:
        loop.stop()


def test_a_counted_exit_75_waits_its_backoff(db: Database, tmp_path: Path) -> None:
    """The second exit 75 without progress re-queues the job as a failure does: RESTARTING
    -> PENDING, eligible again after the 10 s backoff of restart 1."""
    loop, world = _loop(db, tmp_path)
    job_id = _submit(db, NOW, name="loops", max_restarts=3)
    world.script(job_id, duration=5, outcome=Outcome.PREEMPTED)
    try:
        loop.run_once(now=NOW)
        loop.run_once(now=world.clock.advance(5))  # exit 1 (free): resumed at once
        assert _job(db, job_id) == ("RUNNING", 0, 1)
        t = world.clock.advance(5)
        report = loop.run_once(now=t)  # exit 2: counted
        assert report.launched == []
        assert _job(db, job_id) == ("PENDING", 1, 1)
        with db.read_session() as s:
            assert jobs.get_job(s, job_id).next_attempt_at == t + 10
        with db.read_session() as s:
            states = [(e.old, e.new) for e in events.list_events(s, job_id)][-2:]
        assert states == [("RUNNING", "RESTARTING"), ("RESTARTING", "PENDING")]
    finally:
        loop.stop()


def test_unasked_exits_75_after_new_steps_stay_free(db: Database, tmp_path: Path) -> None:
    """A job that reports steps and advances between its exits 75 (host shutdowns)
    resumes each time with no restart counted, even with ``max_restarts: 0``."""
    loop, world = _loop(db, tmp_path)
    job_id = _submit(db, NOW, name="progress", max_restarts=0)
    world.script(job_id, duration=5, outcome=Outcome.PREEMPTED)
    try:
        loop.run_once(now=NOW)
        for step in (100, 200, 300):
            _report_step(db, job_id, step, world.clock.advance(2))
            loop.run_once(now=world.clock.advance(3))  # exited 75 after 5 s
        assert _job(db, job_id) == ("RUNNING", 0, 3)
        assert any("last step reported: 300" in r for r in _reasons(db, job_id))
        world.clock.advance(5)  # its next run reports nothing new: counted, out of restarts
        loop.run_once(now=world.clock.now)
        state, restarts, _ = _job(db, job_id)
        assert (state, restarts) == ("FAILED", 0)
        assert "without progress" in _reasons(db, job_id)[-1]
    finally:
        loop.stop()


def test_unasked_exits_75_of_long_runs_of_a_job_without_steps_stay_free(
    db: Database, tmp_path: Path
) -> None:
    """A job that reports no steps: a run that lasted ``MIN_PROGRESS_SECONDS`` is progress."""
    from danlu.server.failures import MIN_PROGRESS_SECONDS

    assert MIN_PROGRESS_SECONDS <= LONG_RUN
    loop, world = _loop(db, tmp_path)
    job_id = _submit(db, NOW, name="long", max_restarts=0)
    world.script(job_id, duration=LONG_RUN, outcome=Outcome.PREEMPTED)
    try:
        loop.run_once(now=NOW)
        _passes(loop, world, 3, LONG_RUN)
        assert _job(db, job_id) == ("RUNNING", 0, 3)
    finally:
        loop.stop()


def test_requested_preemptions_stay_free_however_often(db: Database, tmp_path: Path) -> None:
    """danlu's own SIGTERM, again and again, no step in between: never a restart."""
    loop, world = _loop(db, tmp_path, "priority")
    low = _submit(db, NOW, name="low", max_restarts=0)
    world.script(low, duration=10_000)
    try:
        loop.run_once(now=NOW)
        for _ in range(3):
            high = _submit(db, world.clock.now, name="high", priority=10)
            world.script(high, duration=1)
            _passes(loop, world, 4, 1.0)  # preempted, checkpointed, high ran, low resumed
            assert _job(db, high)[0] == "SUCCEEDED"
        assert _job(db, low) == ("RUNNING", 0, 3)
    finally:
        loop.stop()


@pytest.mark.parametrize("max_restarts", [0, 2])
def test_a_run_that_fails_while_being_preempted_counts_a_restart(
    db: Database, tmp_path: Path, max_restarts: int
) -> None:
    """danlu preempted the job (SIGTERM, a 30 s grace); it crashed 5 s later with exit 1,
    before checkpointing. It failed: a restart counted (re-queued with backoff within its
    budget, FAILED out of it), the reason saying so."""
    loop, world = _loop(db, tmp_path, "priority")
    low = _submit(db, NOW, name="low", max_restarts=max_restarts)
    world.script(low, duration=10, outcome=Outcome.FAILED, checkpoint_seconds=None)
    try:
        loop.run_once(now=NOW)
        high = _submit(db, NOW + 5, name="high", priority=10)
        world.script(high, duration=1000)
        report = loop.run_once(now=world.clock.advance(5))
        assert report.preempted == [low]
        assert _job(db, low)[0] == "PREEMPTING"
        t = world.clock.advance(5)  # exit 1 at 10 s, within the grace
        loop.run_once(now=t)
        state, restarts, _ = _job(db, low)
        expected = ("PENDING", 1) if max_restarts else ("FAILED", 0)
        assert (state, restarts) == expected
        last = _reasons(db, low)[-1]
        assert "failed (exit code 1)" in last and "during its preemption" in last, last
        if max_restarts:
            with db.read_session() as s:
                job = jobs.get_job(s, low)
                assert (job.next_attempt_at, job.exit_code) == (t + 10, 1)
                assert "backing off after restart 1" in jobs.why(s, job, t + 1)
        else:
            assert "out of restarts (0 of 0)" in last
    finally:
        loop.stop()


def _report(db: Database, job_id: str, t: float, **record: int) -> None:
    """The job's run reports one record (``step``, ``checkpoint_step``), as danlu.train does."""
    with db.session() as s:
        metrics.ingest(s, jobs.get_job(s, job_id), [{**record, "time": t}], now=t)


def test_an_unasked_exit_75_after_a_rollback_that_saved_a_later_checkpoint_is_free(
    db: Database, tmp_path: Path
) -> None:
    """Its first run saved step 500, reached step 1000 and exited 75 (free); the next
    resumed from step 500's checkpoint, saved step 800, reached 900 and exited 75 again. It
    made progress (a later checkpoint): free, even with ``max_restarts: 0`` (the job's
    all-time highest step, 1000, said it made none). A third run that reports no step and
    exits at once counts."""
    loop, world = _loop(db, tmp_path)
    job_id = _submit(db, NOW, name="rollback", max_restarts=0)
    world.script(job_id, duration=5, outcome=Outcome.PREEMPTED)
    try:
        loop.run_once(now=NOW)
        _report(db, job_id, world.clock.advance(1), step=500, checkpoint_step=500)
        _report(db, job_id, world.clock.advance(1), step=1000)
        loop.run_once(now=world.clock.advance(3))  # exit 1 (free): resumed at once
        assert _job(db, job_id) == ("RUNNING", 0, 1)
        _report(db, job_id, world.clock.advance(1), step=800, checkpoint_step=800)
        _report(db, job_id, world.clock.advance(1), step=900)
        loop.run_once(now=world.clock.advance(3))  # exit 2
        assert _job(db, job_id) == ("RUNNING", 0, 2)
        assert any(
            "last step reported: 900; checkpoint step: 800" in r for r in _reasons(db, job_id)
        )
        loop.run_once(now=world.clock.advance(5))  # exit 3: nothing reported, 5 s
        assert _job(db, job_id)[:2] == ("FAILED", 0)
        assert "without progress" in _reasons(db, job_id)[-1]
    finally:
        loop.stop()


def test_an_unasked_exit_75_after_redoing_the_same_steps_unsaved_counts(
    db: Database, tmp_path: Path
) -> None:
    """Each run resumes from step 100's checkpoint, reaches step 110 and exits 75 without
    saving: the second time is no progress (the steps rose within the run, but nothing of
    them was kept), so the job does not go round for free for ever."""
    loop, world = _loop(db, tmp_path)
    job_id = _submit(db, NOW, name="redo", max_restarts=0)
    world.script(job_id, duration=5, outcome=Outcome.PREEMPTED)
    try:
        loop.run_once(now=NOW)
        _report(db, job_id, world.clock.advance(1), step=100, checkpoint_step=100)
        _report(db, job_id, world.clock.advance(1), step=110)
        loop.run_once(now=world.clock.advance(3))  # exit 1 (free)
        assert _job(db, job_id) == ("RUNNING", 0, 1)
        _report(db, job_id, world.clock.advance(1), step=101)
        _report(db, job_id, world.clock.advance(1), step=110)
        loop.run_once(now=world.clock.advance(3))  # exit 2: the same steps again
        assert _job(db, job_id)[:2] == ("FAILED", 0)
        assert "without progress" in _reasons(db, job_id)[-1]
    finally:
        loop.stop()


def test_a_run_whose_record_keeps_vanishing_counts_restarts_and_fails(
    db: Database, tmp_path: Path
) -> None:
    """The executor took the launch, then lost its record of the run (a deleted run
    directory, a backend that forgot it) while the job is RUNNING: a failure, a restart
    counted with backoff, FAILED out of restarts. It was launched again for free every
    pass, for ever, as one the control plane never launched."""
    loop, world = _loop(db, tmp_path)
    job_id = _submit(db, NOW, name="vanishing", max_restarts=1)
    world.script(job_id, duration=10_000)
    try:
        assert loop.run_once(now=NOW).launched == [job_id]
        world.runs.pop(job_id)  # the executor no longer knows the run
        t = world.clock.advance(5)
        report = loop.run_once(now=t)
        assert report.settled == [job_id] and report.launched == []
        assert _job(db, job_id) == ("PENDING", 1, 0)
        assert "the executor no longer knows the run" in _reasons(db, job_id)[-2]
        with db.read_session() as s:
            assert jobs.get_job(s, job_id).next_attempt_at == t + 10  # restart 1's backoff
        assert loop.run_once(now=world.clock.advance(10)).launched == [job_id]
        world.runs.pop(job_id)
        loop.run_once(now=world.clock.advance(5))
        assert _job(db, job_id)[:2] == ("FAILED", 1)
        assert "out of restarts (1 of 1)" in _reasons(db, job_id)[-1]
        assert len(world.launches) == 2
    finally:
        loop.stop()


def test_a_run_that_never_launched_is_launched_with_no_restart_counted(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Recorded started, but the control plane stopped before the launch (the executor took
    none): the next pass launches it, no restart counted, even with ``max_restarts: 0``."""
    loop, world = _loop(db, tmp_path)
    job_id = _submit(db, NOW, name="unlaunched", max_restarts=0)
    world.script(job_id, duration=10_000)
    try:
        with monkeypatch.context() as patched:  # the plane stopped before the launch
            patched.setattr(loop, "_launch", lambda *args: None)
            assert loop.run_once(now=NOW).started == [job_id]
        assert world.launches == []
        assert loop.run_once(now=world.clock.advance(5)).launched == [job_id]
        assert _job(db, job_id) == ("RUNNING", 0, 0)
    finally:
        loop.stop()
