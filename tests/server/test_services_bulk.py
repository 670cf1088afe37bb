"""Bulk writes of changed job rows (``services.bulk.flush_jobs``) and the plans that use them:
the same rows and version guard as the ORM's flush, in one statement per set of columns."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event, select, update

from danlu.core.cluster import Allocation, GpuShare
from danlu.core.errors import PlacementError
from danlu.core.state import JobState
from danlu.core.units import GiB
from danlu.sched import Plan, Preempt, Rebatch, Start
from danlu.server.db import Database
from danlu.server.db.models import Job
from danlu.server.errors import ConflictError
from danlu.server.services import cluster, events, jobs, record, users, view
from danlu.server.services.bulk import WaitingReasons, flush_jobs

NOW = 1_000_000.0  # the same clock as conftest.NOW


def spec(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "command": ["python", "-c", "print('hello')"],
        "resources": {"gpus": 1, "gpu_memory": "20GiB"},
    }


@contextmanager
def job_updates(db: Database, statement: str = "UPDATE JOBS") -> Iterator[list[int]]:
    """Counts the statements starting with ``statement`` (by default the UPDATEs of the jobs
    table) sent to the database (an executemany counts once) and the rows they carried."""
    counts = [0, 0]

    def seen(_conn: Any, _cursor: Any, sql: str, params: Any, _ctx: Any, many: bool) -> None:
        if sql.lstrip().upper().startswith(statement):
            counts[0] += 1
            counts[1] += len(params) if many else 1

    event.listen(db.engine, "before_cursor_execute", seen)
    try:
        yield counts
    finally:
        event.remove(db.engine, "before_cursor_execute", seen)


def submit(db: Database, count: int) -> list[str]:
    with db.session() as s:
        alice = users.get_user(s, "alice")
        return [jobs.submit(s, spec(f"j{i}"), alice, now=NOW + i).id for i in range(count)]


def whole(gpu: int) -> Allocation:
    return Allocation((GpuShare(0, gpu, 1000, 20 * GiB),))


def test_a_plan_writes_its_rows_in_one_statement_per_set_of_columns(seeded: Database) -> None:
    ids = submit(seeded, 4)
    with seeded.session() as s, job_updates(seeded) as counts:
        starts = tuple(Start(job_id, whole(i)) for i, job_id in enumerate(ids))
        applied = record.apply_plan(s, Plan(starts=starts), NOW + 10)
        assert len(applied.started) == 4
    assert counts == [1, 4]
    with seeded.session() as s:  # the executor took their launches: they ran
        s.execute(update(Job).where(Job.id.in_(ids)).values(launched_attempt=1))
    with seeded.session() as s, job_updates(seeded) as counts:
        preempts = tuple(Preempt(job_id, "test") for job_id in ids[:3])
        rebatches = (Rebatch(ids[3], 128),)
        applied = record.apply_plan(s, Plan(preempts=preempts, rebatches=rebatches), NOW + 20)
        assert len(applied.preempted) == 3 and len(applied.rebatched) == 1
    assert counts == [2, 4]  # the preempts' columns, and the rebatch's
    with seeded.read_session() as s:
        rows = {job.id: job for job in s.scalars(select(Job))}
        assert [rows[i].state for i in ids] == ["PREEMPTING"] * 3 + ["RUNNING"]
        assert [rows[i].version for i in ids] == [3, 3, 3, 3]  # submitted at 1, +start, +change
        assert rows[ids[3]].batch_size == 128
        assert [rows[i].preemptions for i in ids] == [1, 1, 1, 0]
        assert rows[ids[3]].allocation == view.to_records(whole(3), cluster.load_cluster(s))
        assert [e.new for e in events.list_events(s, ids[0])] == [
            "PENDING",
            "RUNNING",
            "PREEMPTING",
        ]


def test_written_objects_are_clean_and_keep_their_guard(seeded: Database) -> None:
    (job_id,) = submit(seeded, 1)
    with seeded.session() as s:
        job = jobs.get_job(s, job_id)
        job.pending_reason = "bulk"
        job.batch_size = 64
        assert flush_jobs(s, [job]) == 1
        assert job.version == 2 and not s.is_modified(job) and job not in s.dirty
        assert flush_jobs(s, [job]) == 0  # nothing left to write
        jobs.change_state(s, job, JobState.CANCELLED, "after the bulk write", NOW + 1)
        assert job.version == 3
    with seeded.read_session() as s:
        stored = jobs.get_job(s, job_id)
        assert (stored.state, stored.batch_size, stored.version) == ("CANCELLED", 64, 3)
        assert stored.pending_reason is None


def test_a_row_changed_concurrently_is_a_conflict(seeded: Database) -> None:
    ids = submit(seeded, 2)
    with seeded.sessionmaker() as one, seeded.sessionmaker() as two:
        stale = [jobs.get_job(two, job_id) for job_id in ids]  # loaded before the change
        two.commit()
        jobs.change_state(one, jobs.get_job(one, ids[1]), JobState.CANCELLED, "by one", NOW)
        one.commit()
        for job in stale:
            job.pending_reason = "by two"
        with pytest.raises(ConflictError):
            flush_jobs(two, stale)
        two.rollback()
    with seeded.read_session() as s:
        stored = [jobs.get_job(s, job_id) for job_id in ids]
        assert "by two" not in [job.pending_reason for job in stored]  # nothing of two's
        assert [job.version for job in stored] == [1, 2] and stored[1].state == "CANCELLED"


def test_a_changed_relationship_is_left_to_the_orm(seeded: Database) -> None:
    (job_id,) = submit(seeded, 1)
    with seeded.session() as s:
        job = jobs.get_job(s, job_id)
        job.user = users.get_user(s, "bob")
        job.pending_reason = "moved to bob"
        assert flush_jobs(s, [job]) == 0 and s.is_modified(job)
    with seeded.read_session() as s:
        stored = jobs.get_job(s, job_id)
        assert (stored.user.name, stored.pending_reason) == ("bob", "moved to bob")


def test_a_start_with_a_reason_records_it_in_the_event_log(seeded: Database) -> None:
    ids = submit(seeded, 2)
    with seeded.session() as s:
        starts = (Start(ids[0], whole(0), reason="beside nobody"), Start(ids[1], whole(1)))
        record.apply_plan(s, Plan(starts=starts), NOW + 10)
    with seeded.read_session() as s:
        reasons = [[e.reason for e in events.list_events(s, job_id)][-1] for job_id in ids]
    assert reasons == ["scheduled: beside nobody", "scheduled"]


def test_a_plan_writes_its_events_in_one_statement_in_plan_order(seeded: Database) -> None:
    ids = submit(seeded, 4)
    with seeded.session() as s:
        record.apply_plan(s, Plan(starts=(Start(ids[0], whole(0)), Start(ids[1], whole(1)))), NOW)
    with seeded.session() as s, job_updates(seeded, "INSERT INTO JOB_EVENTS") as counts:
        plan = Plan(
            preempts=(Preempt(ids[1], "make room"), Preempt(ids[0], "make room")),
            starts=(Start(ids[3], whole(2)), Start(ids[2], whole(3), reason="fits")),
        )
        applied = record.apply_plan(s, plan, NOW + 10)
        assert len(applied.preempted) == 2 and len(applied.started) == 2
    assert counts[1] == 4 and counts[0] == 1  # one executemany, however the driver splits it
    with seeded.read_session() as s:
        latest = events.list_events(s, after_id=0, limit=100)[-4:]
        assert [(e.job_id, e.old, e.new, e.time) for e in latest] == [
            (ids[1], "RUNNING", "PREEMPTING", NOW + 10),
            (ids[0], "RUNNING", "PREEMPTING", NOW + 10),
            (ids[3], "PENDING", "RUNNING", NOW + 10),
            (ids[2], "PENDING", "RUNNING", NOW + 10),
        ]
        assert [e.reason for e in latest] == [
            "make room",
            "make room",
            "scheduled",
            "scheduled: fits",
        ]
        for job_id in ids:
            assert events.replay(events.list_events(s, job_id)) == JobState(
                jobs.get_job(s, job_id).state
            )


@pytest.mark.parametrize("with_snapshot", [True, False])
def test_a_plan_that_preempts_a_non_preemptible_job_is_refused(
    seeded: Database, with_snapshot: bool
) -> None:
    with seeded.session() as s:
        alice = users.get_user(s, "alice")
        pinned = jobs.submit(s, {**spec("pinned"), "preemptible": False}, alice, now=NOW).id
        other = jobs.submit(s, spec("other"), alice, now=NOW + 1).id
    with seeded.session() as s:
        record.apply_plan(s, Plan(starts=(Start(pinned, whole(0)), Start(other, whole(1)))), NOW)
    with seeded.session() as s:
        snap = view.build_snapshot(s, NOW + 10) if with_snapshot else None
        plan = Plan(preempts=(Preempt(other, "room"), Preempt(pinned, "room")))
        with pytest.raises(PlacementError, match=f"{pinned}, which is not preemptible"):
            record.apply_plan(s, plan, NOW + 10, None, snap)
        s.rollback()
    with seeded.read_session() as s:
        assert [jobs.get_job(s, i).state for i in (pinned, other)] == ["RUNNING", "RUNNING"]


def test_waiting_reasons_are_written_in_one_statement_without_a_new_version(
    seeded: Database,
) -> None:
    ids = submit(seeded, 3)
    with seeded.session() as s:
        record.apply_plan(s, Plan(starts=(Start(ids[0], whole(0)),)), NOW)
    with seeded.session() as s:
        snap = view.build_snapshot(s, NOW + 10)
        plan = Plan(
            preempts=(Preempt(ids[0], "make room"),),
            starts=(Start(ids[1], whole(0)),),  # on the GPU the preempted job still holds
            waiting={ids[2]: "behind a longer queue"},
        )
        with job_updates(seeded) as counts:
            applied = record.apply_plan(s, plan, NOW + 10, None, snap)
        assert applied.deferred[ids[1]].startswith("waiting for preempted job(s)")
    assert counts == [2, 3]  # the preempt's columns, and both reasons in one statement
    with seeded.read_session() as s:
        stored = [jobs.get_job(s, job_id) for job_id in ids]
        assert [job.version for job in stored] == [3, 1, 1]  # submitted at 1, +start, +preempt
        assert stored[1].pending_reason == applied.deferred[ids[1]]
        assert stored[2].pending_reason == "behind a longer queue"
    with seeded.session() as s:  # the same reasons again: nothing to write
        snap = view.build_snapshot(s, NOW + 20)
        with job_updates(seeded) as counts:
            record.apply_plan(s, Plan(waiting={ids[2]: "behind a longer queue"}), NOW + 20)
    assert counts == [0, 0]


def test_the_last_waiting_reason_added_wins(seeded: Database) -> None:
    (job_id,) = submit(seeded, 1)
    with seeded.session() as s:
        job = jobs.get_job(s, job_id)
        stored = job.pending_reason
        reasons = WaitingReasons()
        reasons.add(job, "first")
        reasons.add(job, "second")
        assert reasons.write(s) == 1 and job.pending_reason == "second"
        reasons.add(job, "third")
        reasons.add(job, "second")  # back to what is stored: nothing to write
        assert reasons.write(s) == 0
    with seeded.read_session() as s:
        again = jobs.get_job(s, job_id)
        assert (again.pending_reason, again.version) == ("second", 1) and stored != "second"


@pytest.mark.parametrize(
    "shared", ["shorter-ranked jobs hold the GPUs", "w" * 260], ids=["short", "long"]
)
def test_the_shared_waiting_reason_reaches_every_pending_job_that_says_otherwise(
    seeded: Database, shared: str
) -> None:
    """The round's shared reason is written to the pending jobs whose reason is missing,
    sorts before or after it, or only starts like it (longer than the indexed prefix), and
    to no other row: not to those saying it already, the listed, held or running ones."""
    ids = submit(seeded, 9)
    before = {
        ids[0]: None,
        ids[1]: "a reason sorting first",
        ids[2]: "~ a reason sorting last",
        ids[3]: shared + " and more",
        ids[4]: shared[:-1],
        ids[5]: shared,  # already says it
        ids[6]: "listed this round",
    }
    with seeded.session() as s:
        for job_id, reason in before.items():
            jobs.get_job(s, job_id).pending_reason = reason
        jobs.hold(s, ids[7], True, now=NOW)
        record.apply_plan(s, Plan(starts=(Start(ids[8], whole(0)),)), NOW)
    with seeded.read_session() as s:
        held_reason = jobs.get_job(s, ids[7]).pending_reason
    with seeded.session() as s:
        plan = Plan(waiting={ids[6]: "listed this round"}, waiting_default=shared)
        with job_updates(seeded) as counts:
            record.apply_plan(s, plan, NOW + 10)
    assert counts == [1, 1]  # one statement: the shared reason to the rows that differ
    with seeded.read_session() as s:
        stored = {job_id: jobs.get_job(s, job_id) for job_id in ids}
        assert [stored[i].pending_reason for i in ids[:6]] == [shared] * 6
        assert [stored[i].version for i in ids[:7]] == [2] * 7  # reasons leave the version
        assert stored[ids[6]].pending_reason == "listed this round"
        assert stored[ids[7]].pending_reason == held_reason and held_reason != shared
        assert stored[ids[8]].state == "RUNNING" and stored[ids[8]].pending_reason != shared
