"""A job the scheduler started whose run the executor has not launched yet (it waits for
GPUs another run still holds) runs nothing: a round that moves it (a resize or a migration)
charges its wait as no GPU-hours and writes no stretch of it, and one that preempts it
counts no preemption; a launched run is charged and counted as before. A moved job's new
run that waits for the run the move left to stop counts that wait (it is that run's time)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import user_and_nodes
from test_unlaunchable import _ControllerDown, busy_launches

from danlu.core.cluster import Allocation, Cluster
from danlu.core.state import JobState
from danlu.core.units import GiB
from danlu.sched.view import Plan, Preempt, Resize
from danlu.server.db import Database, JobRun
from danlu.server.reconcile import Reconciler
from danlu.server.services import jobs, usage
from danlu.server.services.record import apply_plan
from danlu.server.services.view import build_snapshot

NOW = 1_000_000.0
INVENTORY = Cluster.homogeneous(1, 2, "H100")
NODE = INVENTORY.nodes[0].name
BODY = {"command": ["python", "train.py"], "resources": {"gpus": 1}}


def _started(db: Database, names: tuple[str, ...], launched: tuple[str, ...]) -> list[str]:
    """Jobs ``names`` started at ``NOW``, one a GPU; those in ``launched`` taken by the
    executor, the others waiting for their launch."""
    ids = []
    with db.session() as s:
        alice = user_and_nodes(s, INVENTORY.nodes, NOW)
        for gpu, name in enumerate(names):
            job = jobs.submit(s, {"name": name, **BODY}, alice, now=NOW)
            share = {"node": NODE, "gpu": gpu, "milli": 1000, "memory": 80 * GiB}
            jobs.change_state(s, job, JobState.RUNNING, "go", NOW, allocation=[share])
            if name in launched:
                job.launched_attempt = job.attempt
            ids.append(job.id)
    return ids


def _apply(db: Database, plan: Plan, t: float) -> None:
    with db.session() as s:
        snap = build_snapshot(s, t)
        apply_plan(s, plan, t, snap.withheld, snap)


def _runs(db: Database, job_id: str) -> list[tuple[float, float]]:
    with db.read_session() as s:
        rows = s.query(JobRun).filter_by(job_id=job_id).all()
        return [(r.started_at, r.ended_at) for r in rows]


def test_moving_a_run_never_launched_charges_no_wait(db: Database) -> None:
    [waiting] = _started(db, ("waits",), launched=())
    other_gpu = Allocation.whole_gpus([(0, 1)], memory=80 * GiB)
    _apply(db, Plan(resizes=(Resize(waiting, other_gpu),)), NOW + 100)
    assert _runs(db, waiting) == []
    with db.read_session() as s:
        job = jobs.get_job(s, waiting)
        assert (job.attempt, job.run_time, job.attained_service) == (2, 0.0, 0.0)
        assert job.moved_from is None  # no run left whose exit is to judge
        assert job.last_start == NOW + 100
        assert usage.usage(s, NOW - 1, now=NOW + 100) == []


def test_moving_a_launched_run_still_ends_its_stretch(db: Database) -> None:
    [ran] = _started(db, ("ran",), launched=("ran",))
    other_gpu = Allocation.whole_gpus([(0, 1)], memory=80 * GiB)
    _apply(db, Plan(resizes=(Resize(ran, other_gpu),)), NOW + 100)
    assert _runs(db, ran) == [(NOW, NOW + 100)]
    with db.read_session() as s:
        job = jobs.get_job(s, ran)
        assert (job.run_time, job.moved_from) == (100.0, 1)


def test_preempting_a_run_never_launched_counts_no_preemption(db: Database) -> None:
    waiting, ran = _started(db, ("waits", "ran"), launched=("ran",))
    plan = Plan(preempts=(Preempt(waiting, "make room"), Preempt(ran, "make room")))
    _apply(db, plan, NOW + 100)
    with db.session() as s:
        for job_id in (waiting, ran):
            job = jobs.get_job(s, job_id)
            assert job.state == JobState.PREEMPTING.value
            # as the reconcile loop settles them: the waiting one charged up to its start
            until = job.last_start if jobs.not_launched(job) else NOW + 150
            jobs.change_state(s, job, JobState.PENDING, "stopped", NOW + 150, ran_until=until)
    with db.read_session() as s:
        assert jobs.get_job(s, waiting).preemptions == 0
        assert jobs.get_job(s, ran).preemptions == 1
    assert _runs(db, waiting) == []
    assert _runs(db, ran) == [(NOW, NOW + 150)]


@pytest.fixture
def loop_and_job(db: Database, tmp_path: Path) -> Iterator[tuple[Reconciler, _ControllerDown, str]]:
    """A job started at ``NOW`` on GPU 0 whose launch the executor refuses (the GPU busy
    with another run) until told otherwise (``executor.down``), and the loop that runs it."""
    with db.session() as s:
        alice = user_and_nodes(s, INVENTORY.nodes, NOW)
        job_id = jobs.submit(s, {"name": "waits", **BODY}, alice, now=NOW).id
    with busy_launches(db, tmp_path, INVENTORY, job_id, 1000, NOW) as (loop, executor):
        yield loop, executor, job_id


def test_a_run_moved_while_waiting_is_charged_from_its_launch(
    db: Database, loop_and_job: tuple[Reconciler, _ControllerDown, str]
) -> None:
    """Moved before its launch, the job's new run is a first launch: its clock starts when
    its process does, not at the move (nor at its first start)."""
    loop, executor, job_id = loop_and_job
    with db.read_session() as s:
        [share] = jobs.get_job(s, job_id).allocation or []
    elsewhere = Allocation.whole_gpus([(0, 1 - int(share["gpu"]))], memory=80 * GiB)
    _apply(db, Plan(resizes=(Resize(job_id, elsewhere),)), NOW + 30)
    executor.down = 0
    assert loop.run_once(now=NOW + 100).launched == [job_id]
    with db.read_session() as s:
        job = jobs.get_job(s, job_id)
        assert (job.attempt, job.launched_attempt, job.last_start) == (2, 2, NOW + 100)
        [row] = usage.usage(s, NOW - 1, now=NOW + 200)
        assert row.gpu_seconds == pytest.approx(100.0)  # from its launch only
    assert _runs(db, job_id) == []


def test_a_run_preempted_while_waiting_counts_no_preemption(
    db: Database, loop_and_job: tuple[Reconciler, _ControllerDown, str]
) -> None:
    loop, _, job_id = loop_and_job
    _apply(db, Plan(preempts=(Preempt(job_id, "make room"),)), NOW + 30)
    loop.run_once(now=NOW + 40)
    with db.read_session() as s:
        job = jobs.get_job(s, job_id)
        assert job.state != JobState.PREEMPTING.value  # settled: re-queued or started again
        assert (job.preemptions, job.run_time) == (0, 0.0)
    assert _runs(db, job_id) == []


def test_a_moved_runs_wait_for_the_run_it_left_counts_as_it_will_be_charged(
    db: Database,
) -> None:
    """Moved while launched, the job's old run stops within its grace while the new one
    waits for it: that wait is charged to the new run once launched (its stretch begins at
    the move), so ``danlu usage``, the projects' recent usage and the time limit count it
    meanwhile too: a period's usage does not grow after the fact."""
    [moved] = _started(db, ("moved",), launched=("moved",))
    other_gpu = Allocation.whole_gpus([(0, 1)], memory=80 * GiB)
    _apply(db, Plan(resizes=(Resize(moved, other_gpu),)), NOW + 100)
    half_life = 3600.0
    with db.read_session() as s:
        job = jobs.get_job(s, moved)
        assert (job.moved_from, jobs.not_launched(job)) == (1, True)  # the old run stops
        [row] = usage.usage(s, NOW - 1, now=NOW + 150)
        assert row.gpu_seconds == pytest.approx(150.0)
        assert usage.unlaunched_jobs(s) == frozenset()
        waiting = usage.standing(s, NOW + 150, half_life)["default"].recent_gpus
        assert jobs.run_time_at(job, NOW + 150) == pytest.approx(150.0)
    with db.session() as s:  # the old run exited; the new one launched (its clock kept)
        job = jobs.get_job(s, moved)
        job.moved_from, job.launched_attempt = None, job.attempt
    with db.read_session() as s:
        [row] = usage.usage(s, NOW - 1, NOW + 150, now=NOW + 200)
        assert row.gpu_seconds == pytest.approx(150.0)
        launched = usage.standing(s, NOW + 150, half_life)["default"].recent_gpus
        assert waiting == pytest.approx(launched)


def test_moving_again_while_the_run_it_left_stops_keeps_that_wait(db: Database) -> None:
    """Moved twice before its new run launched, while the run the first move left still
    stops: the time between the moves is that run's, a stretch of its own (no gap in the
    job's usage), and that run is still the one whose exit is to judge."""
    [moved] = _started(db, ("moved",), launched=("moved",))
    gpu = [Allocation.whole_gpus([(0, g)], memory=80 * GiB) for g in (1, 0)]
    _apply(db, Plan(resizes=(Resize(moved, gpu[0]),)), NOW + 100)
    _apply(db, Plan(resizes=(Resize(moved, gpu[1]),)), NOW + 130)
    assert sorted(_runs(db, moved)) == [(NOW, NOW + 100), (NOW + 100, NOW + 130)]
    with db.read_session() as s:
        job = jobs.get_job(s, moved)
        assert (job.moved_from, job.attempt, job.run_time) == (1, 3, 130.0)
        [row] = usage.usage(s, NOW - 1, now=NOW + 150)
        assert row.gpu_seconds == pytest.approx(150.0)
