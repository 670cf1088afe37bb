"""The scheduling rounds and a disabled owner (``danlu user disable``): the round's view
withholds the owner's queued jobs, with the reason, whatever queued them; a plan made before
the disable committed starts none of them; a disable and an enable change the rows of the
jobs they say something of, so that a round that read them before cannot write over it; and
two admins disabling each other at once leave one enabled. On SQLite and PostgreSQL."""

from __future__ import annotations

import threading

from helpers import record_round, user_and_nodes
from sqlalchemy import select, update

from danlu.core.cluster import Node, gpu_type
from danlu.core.state import JobState
from danlu.sched.registry import make_policy
from danlu.sched.view import Plan
from danlu.server.db import Database
from danlu.server.db.models import Job, User
from danlu.server.errors import ConflictError
from danlu.server.services import disabling, jobs, users
from danlu.server.services.bulk import WaitingReasons
from danlu.server.services.record import apply_plan
from danlu.server.services.view import build_snapshot

T = 1_000_000.0
NODE = Node("a", 4, gpu_type("H100"))
BODY = {"command": ["python", "train.py"], "resources": {"gpus": 1}}


def _gpu(g: int) -> dict[str, object]:
    return {"node": "a", "gpu": g, "milli": 1000, "memory": 80 * 2**30}


def test_a_disabled_owners_queued_jobs_are_withheld_whatever_queued_them(db: Database) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), T)
        bob = users.create_user(s, "bob", now=T)
        root = users.create_user(s, "root", "admin", now=T)
        ran = jobs.submit(s, {"name": "ran", **BODY}, alice, now=T)
        jobs.change_state(s, ran, JobState.RUNNING, "go", T, allocation=[_gpu(0)])
        queued = jobs.submit(s, {"name": "queued", **BODY}, alice, now=T + 1).id
        theirs = jobs.submit(s, {"name": "theirs", **BODY}, bob, now=T + 2).id
        done = disabling.disable(s, "alice", root, now=T + 3)
        assert (done.running, done.queued, done.cancelled, done.stopping) == (1, 1, 0, 0)
        # the running job is preempted afterwards: re-queued, it waits too
        jobs.change_state(s, ran, JobState.PREEMPTING, "drained", T + 4)
        jobs.change_state(s, ran, JobState.PENDING, "checkpointed", T + 5)
        ran_id = ran.id
    with db.session() as s:
        snap = build_snapshot(s, T + 10)
        reason = users.owner_disabled("alice")
        assert snap.withheld == {queued: reason, ran_id: reason}
        assert [j.id for j in snap.view.pending] == [theirs]
    applied = record_round(db, make_policy("fifo"), T + 10)
    assert {j.id for j in applied.started} == {theirs}
    with db.session() as s:
        for job_id in (queued, ran_id):
            job = jobs.get_job(s, job_id)
            assert (job.state, job.pending_reason) == ("PENDING", reason)
        enabled = disabling.enable(s, "alice", now=T + 11)
        assert enabled.queued == 2
        assert jobs.get_job(s, queued).pending_reason == disabling.enabled_again("alice")
    applied = record_round(db, make_policy("fifo"), T + 12)
    assert {j.id for j in applied.started} == {queued, ran_id}


def test_a_plan_made_before_the_disable_committed_starts_none_of_the_owners_jobs(
    db: Database,
) -> None:
    """The owner disabled between the round's view and the recording of its plan (on
    PostgreSQL a disable may commit there): the start is skipped, the job stays PENDING."""
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), T)
        bob = users.create_user(s, "bob", now=T)
        mine = jobs.submit(s, {"name": "mine", **BODY}, alice, now=T).id
        theirs = jobs.submit(s, {"name": "theirs", **BODY}, bob, now=T + 1).id
    with db.session() as s:
        snap = build_snapshot(s, T + 10)
        plan: Plan = make_policy("fifo").schedule(snap.view)
        assert {st.job_id for st in plan.starts} == {mine, theirs}
        s.execute(update(User).where(User.name == "alice").values(disabled_at=T + 5))
        applied = apply_plan(s, plan, T + 10, snap.withheld, snap)
    assert {j.id for j in applied.started} == {theirs}
    assert applied.skipped[mine] == "its owner was disabled since the view was built"
    with db.session() as s:
        assert jobs.get_job(s, mine).state == "PENDING"


def test_a_plan_made_before_the_disable_committed_keeps_the_disables_reasons(
    db: Database,
) -> None:
    """The owner disabled between the round's view and the recording of its plan: neither
    the job's own waiting reason (fifo's ``needs 4 GPUs, 3 free``) nor the plan's shared one
    (``queued behind ...``) is written over the reason the disable gave its queued jobs."""
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), T)
        users.create_user(s, "root", "admin", now=T)
        ran = jobs.submit(s, {"name": "ran", **BODY}, alice, now=T)
        jobs.change_state(s, ran, JobState.RUNNING, "go", T, allocation=[_gpu(0)])
        four = {**BODY, "resources": {"gpus": 4}}
        big = jobs.submit(s, {"name": "big", **four}, alice, now=T + 1).id
        small = jobs.submit(s, {"name": "small", **BODY}, alice, now=T + 2).id
    with db.session() as s:
        snap = build_snapshot(s, T + 10)
        plan: Plan = make_policy("fifo").schedule(snap.view)
        assert plan.waiting == {big: "needs 4 GPUs, 3 free"} and not plan.starts
        assert plan.waiting_default is not None and small not in plan.waiting
        disabling.disable(s, "alice", users.get_user(s, "root"), now=T + 5)
        apply_plan(s, plan, T + 10, snap.withheld, snap)
    with db.session() as s:
        for job_id in (big, small):
            assert jobs.get_job(s, job_id).pending_reason == users.owner_disabled("alice")


def test_a_waiting_reason_is_not_written_over_a_row_changed_since_it_was_read(
    db: Database,
) -> None:
    """A job row read by the round, then changed by another writer (a disable, a hold: each
    writes its own reason and a new version) before the round writes its reasons: the
    round's reason is not written over it; an unchanged row's is."""
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), T)
        changed = jobs.submit(s, {"name": "changed", **BODY}, alice, now=T).id
        kept = jobs.submit(s, {"name": "kept", **BODY}, alice, now=T + 1).id
    with db.session() as s:
        rows = {j.id: j for j in s.scalars(select(Job).where(Job.id.in_([changed, kept])))}
        s.execute(
            update(Job)
            .where(Job.id == changed)
            .values(pending_reason="said by another writer", version=Job.version + 1)
            .execution_options(synchronize_session=False)
        )
        reasons = WaitingReasons()
        for row in rows.values():
            reasons.add(row, "the round's reason")
        reasons.write(s)
    with db.session() as s:
        assert jobs.get_job(s, changed).pending_reason == "said by another writer"
        assert jobs.get_job(s, kept).pending_reason == "the round's reason"


def test_a_disable_and_an_enable_change_the_rows_they_tell_of(db: Database) -> None:
    """Each queued job whose reason a disable writes gets a new version (a round that read
    it before cannot write over it); a held job keeps saying who held it, one waiting for a
    dependency the job it waits for."""
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), T)
        root = users.create_user(s, "root", "admin", now=T)
        plain = jobs.submit(s, {"name": "plain", **BODY}, alice, now=T).id
        held = jobs.submit(s, {"name": "held", **BODY}, alice, now=T + 1).id
        jobs.hold(s, held, True, alice, now=T + 2)
        first = jobs.get_job(s, plain).version
        disabling.disable(s, "alice", root, now=T + 3)
    with db.session() as s:
        job = jobs.get_job(s, plain)
        assert job.version == first + 1
        assert job.pending_reason == users.owner_disabled("alice")
        assert jobs.get_job(s, held).pending_reason == "held by alice"
        disabling.enable(s, "alice", now=T + 4)
    with db.session() as s:
        job = jobs.get_job(s, plain)
        assert job.version == first + 2
        assert job.pending_reason == disabling.enabled_again("alice")
        assert jobs.get_job(s, held).pending_reason == "held by alice"


def test_two_admins_disabling_each_other_at_once_leave_one_enabled(db: Database) -> None:
    with db.session() as s:
        users.create_user(s, "root1", "admin", now=T)
        users.create_user(s, "root2", "admin", now=T)
        users.create_user(s, "admin", "admin", now=T)
        users.create_user(s, "alice", now=T)
    with db.session() as s:  # one of three disabled: two left
        disabling.disable(s, "admin", users.get_user(s, "root1"), now=T)
    outcomes: list[str] = []
    barrier = threading.Barrier(2)

    def disable(name: str, by: str) -> None:
        barrier.wait()
        try:
            with db.session() as s:
                disabling.disable(s, name, users.get_user(s, by), now=T + 1)
            outcomes.append("disabled")
        except ConflictError as exc:
            outcomes.append(f"refused: {exc}")

    threads = [
        threading.Thread(target=disable, args=("root1", "root2")),
        threading.Thread(target=disable, args=("root2", "root1")),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(outcomes)[0] == "disabled"
    assert "last enabled admin" in sorted(outcomes)[1]
    with db.session() as s:
        query = select(User.name).where(User.role == "admin", User.disabled_at.is_(None))
        assert len(list(s.scalars(query))) == 1


def test_cancel_jobs_cancels_the_queued_and_stops_the_running(db: Database) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), T)
        root = users.create_user(s, "root", "admin", now=T)
        ran = jobs.submit(s, {"name": "ran", **BODY}, alice, now=T)
        jobs.change_state(s, ran, JobState.RUNNING, "go", T, allocation=[_gpu(0)])
        queued = jobs.submit(s, {"name": "queued", **BODY}, alice, now=T + 1).id
        held = jobs.submit(s, {"name": "held", **BODY}, alice, now=T + 2).id
        jobs.hold(s, held, True, alice, now=T + 3)
        done = disabling.disable(s, "alice", root, cancel_jobs=True, now=T + 4)
        assert (done.cancelled, done.stopping, done.queued, done.running) == (2, 1, 0, 0)
        ran_id = ran.id
    with db.session() as s:
        assert jobs.get_job(s, queued).state == "CANCELLED"
        assert jobs.get_job(s, held).state == "CANCELLED"
        running = jobs.get_job(s, ran_id)
        assert running.state == "RUNNING" and running.cancel_requested_at == T + 4
        assert running.cancel_reason == "cancelled: user alice was disabled by root"
        rows = s.scalars(select(Job.state).where(Job.user_id == alice.id))
        assert sorted(rows) == ["CANCELLED", "CANCELLED", "RUNNING"]
