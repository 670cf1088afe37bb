"""Recording a plan (``services.record.apply_plan``) against the job rows as they are when it
is recorded: a job held, waiting for a dependency or backing off is not started, even when
it was held after the round's snapshot (a race on PostgreSQL), and the round's shared
waiting reason is not written over the reasons of the jobs the policy never saw."""

from __future__ import annotations

from typing import Any

from helpers import user_and_nodes
from interleave import Interleave
from sqlalchemy.orm import Session

from danlu.core.cluster import Allocation, GpuShare, Node, gpu_type
from danlu.core.state import JobState
from danlu.core.units import GiB
from danlu.sched.registry import make_policy
from danlu.sched.view import Plan, Preempt, Start
from danlu.server.db import Database
from danlu.server.services import jobs
from danlu.server.services.record import Applied, apply_plan
from danlu.server.services.view import StatusCache, build_snapshot

NOW = 1_000_000.0
NODE = Node("a", 4, gpu_type("H100"))
SHARED = "no free GPUs"


def _spec(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "command": ["python", "t.py"], "resources": {"gpus": 1}, **extra}


def _gpu(g: int) -> Allocation:
    return Allocation((GpuShare(0, g, 1000, 80 * GiB),))


def _waiting_jobs(db: Database) -> dict[str, str]:
    """``running`` (GPU 0), ``after`` (waits for it: ``depends_on``), ``backoff`` (its launch
    failed for the node's reasons: backing off until NOW + 12) and ``plain`` (pending)."""
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        running = jobs.submit(s, _spec("running"), alice, now=NOW)
        record = {"node": "a", "gpu": 0, "milli": 1000, "memory": 80 * GiB}
        jobs.change_state(s, running, JobState.RUNNING, "go", NOW, allocation=[record])
        backoff = jobs.submit(s, _spec("backoff"), alice, now=NOW)
        record = {**record, "gpu": 1}
        jobs.change_state(s, backoff, JobState.RUNNING, "go", NOW, allocation=[record])
        jobs.requeue_unlaunched(s, backoff, "No space left on device", NOW + 2)
        depends = [{"job": running.id, "condition": "succeeded"}]
        after = jobs.submit(s, _spec("after", depends_on=depends), alice, now=NOW + 2)
        plain = jobs.submit(s, _spec("plain"), alice, now=NOW + 2)
        ids = {"running": running.id, "backoff": backoff.id, "after": after.id}
        ids["plain"] = plain.id
    with db.read_session() as s:
        assert jobs.get_job(s, ids["after"]).waiting_on == ids["running"]
        assert (jobs.get_job(s, ids["backoff"]).next_attempt_at or 0) > NOW + 3
    return ids


def _reasons(db: Database, ids: dict[str, str]) -> dict[str, str | None]:
    with db.read_session() as s:
        return {name: jobs.get_job(s, job_id).pending_reason for name, job_id in ids.items()}


def test_the_shared_reason_leaves_the_jobs_the_policy_never_saw(db: Database) -> None:
    ids = _waiting_jobs(db)
    before = _reasons(db, ids)
    assert before["after"] is not None and before["after"].startswith("waiting for job")
    assert before["backoff"] is not None and "No space left" in before["backoff"]
    with db.session() as s:
        apply_plan(s, Plan(waiting_default=SHARED), NOW + 3)
    after = _reasons(db, ids)
    assert after["plain"] == SHARED  # the one the policy saw
    assert (after["after"], after["backoff"]) == (before["after"], before["backoff"])
    with db.session() as s:  # once its backoff is over, the shared reason is its too
        apply_plan(s, Plan(waiting_default=SHARED), NOW + 100)
    assert _reasons(db, ids)["backoff"] == SHARED


def test_a_start_of_a_job_that_must_wait_is_skipped_and_its_gpus_stay_free(
    db: Database,
) -> None:
    ids = _waiting_jobs(db)
    before = _reasons(db, ids)
    plan = Plan(
        starts=(Start(ids["after"], _gpu(1)), Start(ids["backoff"], _gpu(2))),
        waiting_default=SHARED,
    )
    with db.session() as s:
        applied = apply_plan(s, plan, NOW + 3)
    assert applied.started == [] and applied.deferred == {}
    assert applied.skipped == {
        ids["after"]: f"waiting for job {ids['running']}",
        ids["backoff"]: "backing off until its next attempt",
    }
    with db.read_session() as s:
        for name in ("after", "backoff"):
            job = jobs.get_job(s, ids[name])
            assert (job.state, job.allocation or []) == ("PENDING", [])
    assert _reasons(db, ids)["after"] == before["after"]
    with db.session() as s:  # GPUs 1 and 2 were left free: another job takes them
        applied = apply_plan(s, Plan(starts=(Start(ids["plain"], _gpu(1)),)), NOW + 4)
    assert [j.id for j in applied.started] == [ids["plain"]]


def test_a_job_held_after_the_round_s_snapshot_is_not_started(db: Database) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        held = jobs.submit(s, _spec("held"), alice, now=NOW).id
        other = jobs.submit(s, _spec("other"), alice, now=NOW + 1).id
    cache, policy = StatusCache(), make_policy("fifo")
    with db.read_session() as s:  # an earlier round saw both (their statuses are cached)
        build_snapshot(s, NOW, cache)

    def hold(s: Session) -> None:  # PATCH /jobs/{id} {"held": true}
        jobs.hold(s, held, True, alice, now=NOW + 1)

    if db.dialect == "postgresql":  # the hold commits between the snapshot and the record
        race = Interleave(db)

        def round_(s: Session) -> Applied:
            snap = build_snapshot(s, NOW + 1, cache)
            race.pause()
            return apply_plan(s, policy.schedule(snap.view), NOW + 1, snap.withheld, snap)

        outcome = race.run(round_, hold)
        assert outcome.first_error is None and outcome.second_error is None
        assert not outcome.second_waited
        applied = outcome.first
    else:  # a round holds SQLite's write lock from its first read: an earlier snapshot
        with db.read_session() as s:
            snap = build_snapshot(s, NOW + 1, cache)
        with db.session() as s:
            hold(s)
        with db.session() as s:
            applied = apply_plan(s, policy.schedule(snap.view), NOW + 1, snap.withheld, snap)
    assert [j.id for j in applied.started] == [other]
    assert applied.skipped == {held: "held since the view was built"}
    with db.read_session() as s:
        job = jobs.get_job(s, held)
        assert (job.state, job.held_at, job.allocation or []) == ("PENDING", NOW + 1, [])
        assert job.pending_reason == "held by alice"


def test_no_job_is_preempted_for_a_start_that_will_not_happen(db: Database) -> None:
    """A preemption that only frees GPUs for the start of a job held since the view was
    built is not made (the victim would checkpoint and wait for nothing); one for a start
    that goes ahead, and one whose GPUs no start takes, are."""
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        ids = {}
        for g, name in enumerate(("spared", "freed", "shrunk")):
            job = jobs.submit(s, _spec(name, preemptible=True), alice, now=NOW)
            record = {"node": "a", "gpu": g, "milli": 1000, "memory": 80 * GiB}
            jobs.change_state(s, job, JobState.RUNNING, "go", NOW, allocation=[record])
            ids[name] = job.id
        for name in ("held", "urgent"):
            ids[name] = jobs.submit(s, _spec(name), alice, now=NOW + 1).id
        jobs.hold(s, ids["held"], True, alice, now=NOW + 2)  # after the policy's view
    plan = Plan(
        preempts=tuple(Preempt(ids[n], "room") for n in ("spared", "freed", "shrunk")),
        starts=(Start(ids["held"], _gpu(0)), Start(ids["urgent"], _gpu(1))),
    )
    with db.session() as s:
        applied = apply_plan(s, plan, NOW + 3)
    assert ids["urgent"] in applied.deferred  # it waits for the GPU "freed" still holds
    assert sorted(j.id for j in applied.preempted) == sorted([ids["freed"], ids["shrunk"]])
    assert applied.skipped[ids["spared"]] == (
        f"not preempted: its GPUs were for {ids['held']}, not to start any more"
    )
    with db.read_session() as s:
        assert jobs.get_job(s, ids["spared"]).state == "RUNNING"
        assert jobs.get_job(s, ids["freed"]).state == "PREEMPTING"
