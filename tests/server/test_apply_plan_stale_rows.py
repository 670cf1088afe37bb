"""A plan recorded over job rows that changed after the round's view read them (on
PostgreSQL other transactions commit between the view and the record): a start or move
planned for a job as it was is not made, and the next round plans the job as it is; a
disabled owner's running jobs run on as they are, offered and given no more GPUs. Each plan
is made before the change in one session (view, plan, change, record), on SQLite."""

from __future__ import annotations

from typing import Any

from helpers import record_round, user_and_nodes
from sqlalchemy import select, update

from danlu.core.cluster import Allocation, GpuShare, Node, gpu_type
from danlu.core.state import JobState
from danlu.core.units import GiB
from danlu.sched.registry import make_policy
from danlu.sched.view import Plan, Resize
from danlu.server.db import Database
from danlu.server.db.models import Job, User
from danlu.server.services import jobs, users
from danlu.server.services.job_changes import JobChange, change_job
from danlu.server.services.record import apply_plan
from danlu.server.services.view import build_snapshot

T = 1_000_000.0
NODE = Node("a", 4, gpu_type("H100"))
ONE = {"command": ["python", "train.py"], "resources": {"gpus": 1}}
ELASTIC = {"command": ["python", "train.py"], "resources": {"gpus": "1..4"}}
CHANGED = "changed since the view was built"


def _stored(*gpus: int) -> list[dict[str, Any]]:
    return [{"node": "a", "gpu": g, "milli": 1000, "memory": 80 * GiB} for g in gpus]


def _on(*gpus: int) -> Allocation:
    return Allocation(tuple(GpuShare(0, g, 1000, 80 * GiB) for g in gpus))


def test_a_start_planned_before_the_jobs_resources_changed_waits_for_the_next_round(
    sqlite_db: Database,
) -> None:
    """``PATCH /jobs/{id}`` gives a pending job 2 GPUs after the view saw it ask for 1: the
    start on 1 GPU is not made (it stays PENDING), and the next round starts it on 2."""
    with sqlite_db.session() as s:
        alice = user_and_nodes(s, (NODE,), T)
        job_id = jobs.submit(s, {"name": "grows", **ONE}, alice, now=T).id
    with sqlite_db.session() as s:
        snap = build_snapshot(s, T + 10)
        plan = make_policy("fifo").schedule(snap.view)
        assert [st.allocation.num_gpus for st in plan.starts] == [1]
        change_job(s, job_id, JobChange(resources={"gpus": 2}), now=T + 5)
        applied = apply_plan(s, plan, T + 10, snap.withheld, snap)
    assert not applied.started and applied.skipped == {job_id: CHANGED}
    with sqlite_db.session() as s:
        assert jobs.get_job(s, job_id).state == JobState.PENDING.value
    applied = record_round(sqlite_db, make_policy("fifo"), T + 20)
    assert [(j.id, len(j.allocation or [])) for j in applied.started] == [(job_id, 2)]


def test_a_row_the_session_holds_is_read_again_when_the_plan_is_recorded(
    sqlite_db: Database,
) -> None:
    """Another transaction's commit (here a Core UPDATE, which leaves the session's copy of
    the row as it was) changed the job after the view: the start is skipped, not written
    over the new row (which failed the round's commit on the row's version)."""
    with sqlite_db.session() as s:
        alice = user_and_nodes(s, (NODE,), T)
        job_id = jobs.submit(s, {"name": "grows", **ONE}, alice, now=T).id
    with sqlite_db.session() as s:
        held = s.scalar(select(Job).where(Job.id == job_id))  # the session's copy
        snap = build_snapshot(s, T + 10)
        plan = make_policy("fifo").schedule(snap.view)
        assert [st.job_id for st in plan.starts] == [job_id]
        s.execute(
            update(Job)
            .where(Job.id == job_id)
            .values(priority=5, version=Job.version + 1)
            .execution_options(synchronize_session=False)
        )
        applied = apply_plan(s, plan, T + 10, snap.withheld, snap)
        assert held is not None and held.priority == 5  # read again
    assert not applied.started and applied.skipped == {job_id: CHANGED}


def test_a_move_planned_before_the_running_job_changed_is_not_made(sqlite_db: Database) -> None:
    """A running job's row changed after the view (``danlu update --priority``): the move
    planned for it is not made, and it keeps its GPU."""
    with sqlite_db.session() as s:
        alice = user_and_nodes(s, (NODE,), T)
        job = jobs.submit(s, {"name": "runs", **ELASTIC}, alice, now=T)
        jobs.change_state(s, job, JobState.RUNNING, "go", T, allocation=_stored(0))
        job_id = job.id
    with sqlite_db.session() as s:
        snap = build_snapshot(s, T + 10)
        change_job(s, job_id, JobChange(priority=3), now=T + 5)
        plan = Plan(resizes=(Resize(job_id, _on(0, 1)),))
        applied = apply_plan(s, plan, T + 10, snap.withheld, snap)
    assert not applied.resized and applied.skipped == {job_id: CHANGED}
    with sqlite_db.session() as s:
        assert jobs.get_job(s, job_id).allocation == _stored(0)


def test_a_disabled_owners_running_elastic_job_is_offered_no_more_gpus(
    sqlite_db: Database,
) -> None:
    """The view hands a policy a disabled owner's running elastic job with its most GPUs
    cut to those it holds (another owner's keeps its range)."""
    with sqlite_db.session() as s:
        alice = user_and_nodes(s, (NODE,), T)
        bob = users.create_user(s, "bob", now=T)
        mine = jobs.submit(s, {"name": "mine", **ELASTIC}, alice, now=T)
        jobs.change_state(s, mine, JobState.RUNNING, "go", T, allocation=_stored(0))
        theirs = jobs.submit(s, {"name": "theirs", **ELASTIC}, bob, now=T)
        jobs.change_state(s, theirs, JobState.RUNNING, "go", T, allocation=_stored(1))
        s.execute(update(User).where(User.name == "alice").values(disabled_at=T + 1))
    with sqlite_db.session() as s:
        snap = build_snapshot(s, T + 10)
        most = {j.request.user: (j.request.gpus, j.request.max_gpus) for j in snap.view.running}
    assert most == {"alice": (1, 1), "bob": (1, 4)}


def test_a_disabled_owners_job_is_not_grown_but_may_shrink(sqlite_db: Database) -> None:
    """A plan made before the owner was disabled grows one of their running jobs and shrinks
    another: the growth is not made (the job runs on, on its GPU), the shrink is."""
    with sqlite_db.session() as s:
        alice = user_and_nodes(s, (NODE,), T)
        small = jobs.submit(s, {"name": "small", **ELASTIC}, alice, now=T)
        jobs.change_state(s, small, JobState.RUNNING, "go", T, allocation=_stored(0))
        big = jobs.submit(s, {"name": "big", **ELASTIC}, alice, now=T)
        jobs.change_state(s, big, JobState.RUNNING, "go", T, allocation=_stored(2, 3))
        small_id, big_id = small.id, big.id
    with sqlite_db.session() as s:
        snap = build_snapshot(s, T + 10)
        plan = Plan(resizes=(Resize(small_id, _on(0, 1)), Resize(big_id, _on(2))))
        s.execute(update(User).where(User.name == "alice").values(disabled_at=T + 5))
        applied = apply_plan(s, plan, T + 10, snap.withheld, snap)
    assert [j.id for j in applied.resized] == [big_id]
    assert applied.deferred == {small_id: "not grown: its owner is disabled (it runs on as it is)"}
    with sqlite_db.session() as s:
        assert jobs.get_job(s, small_id).allocation == _stored(0)
        assert jobs.get_job(s, big_id).allocation == _stored(2)
