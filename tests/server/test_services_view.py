"""The scheduler adapter: ClusterView from the DB, plans recorded as states + allocations."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import numpy as np
import pytest
from helpers import record_round, user_and_nodes
from sqlalchemy import event, update

from danlu.core.cluster import Allocation, GpuShare, Node, gpu_type
from danlu.core.errors import PlacementError
from danlu.core.state import JobState
from danlu.core.units import GiB
from danlu.sched.placement.gang import FreeMap
from danlu.sched.registry import make_policy
from danlu.sched.view import Plan, Preempt, Rebatch, Resize, Start, usage_from_allocations
from danlu.server.db import Database, Job
from danlu.server.services import cluster, jobs, nodes, projects, record, users, view

NOW = 1_000_000.0
H100 = 80 * GiB


def spec(
    name: str,
    gpus: int = 1,
    memory: str | None = None,
    gpu_type: str | list[str] | None = None,
    **over: Any,
) -> dict[str, Any]:
    res: dict[str, Any] = {"gpus": gpus}
    if memory:
        res["gpu_memory"] = memory
    if gpu_type:
        res["gpu_type"] = gpu_type
    return {"name": name, "command": ["true"], "resources": res, **over}


def _check_stored_usage(db: Database) -> None:
    """The allocation record never exceeds a GPU's compute or memory."""
    with db.read_session() as s:
        snap = view.build_snapshot(s, NOW)
        milli, memory = usage_from_allocations(
            snap.view.cluster, (j.allocation for j in snap.view.running)
        )
        assert (milli <= 1000).all()
        assert (memory <= snap.view.cluster.arrays.gpu_memory).all()


def test_view_from_db(seeded: Database) -> None:
    with seeded.session() as s:
        projects.create_project(s, "vip", priority=10, now=NOW)
        alice = users.get_user(s, "alice")
        a = jobs.submit(s, spec("a", memory="30GiB"), alice, now=NOW)
        b = jobs.submit(s, spec("b", gpus=2, project="vip", priority=1), alice, now=NOW + 1)
        c = jobs.submit(s, spec("c", gpu_type="l4"), alice, now=NOW + 2)
        c.next_attempt_at = NOW + 100  # backing off
        v = view.build_view(s, NOW + 10)
    assert v.cluster.total_gpus == 6 and v.running == ()
    assert [j.id for j in v.pending] == [a.id, b.id]
    ra, rb = (j.request for j in v.pending)
    assert (ra.gpu_memory, ra.shares_gpu, ra.seq < rb.seq) == (30 * GiB, True, True)
    assert (rb.gpus, rb.priority, rb.project) == (2, 11, "vip")


def test_policy_plan_is_recorded(seeded: Database) -> None:
    with seeded.session() as s:
        alice = users.get_user(s, "alice")
        for i in range(3):
            jobs.submit(s, spec(f"s{i}", memory="30GiB"), alice, now=NOW + i)
        jobs.submit(s, spec("big", gpus=4, gpu_type="H100"), alice, now=NOW + 5)
    policy = make_policy("priority")
    with seeded.session() as s:
        snap = view.build_snapshot(s, NOW + 10)
        applied = record.apply_plan(s, policy.schedule(snap.view), NOW + 10, snap.withheld)
        assert len(applied.started) >= 3
        for job in applied.started:
            assert job.state == "RUNNING" and job.allocation and job.attempt == 1
        shared = [j for j in applied.started if j.gpu_memory_per_gpu]
        assert all(s["memory"] == 30 * GiB for j in shared for s in j.allocation)
    _check_stored_usage(seeded)
    with seeded.session() as s:  # idempotent: a second round starts nothing new twice
        snap = view.build_snapshot(s, NOW + 11)
        again = record.apply_plan(s, policy.schedule(snap.view), NOW + 11, snap.withheld)
        assert not {j.id for j in again.started} & {j.id for j in applied.started}
    _check_stored_usage(seeded)


def test_over_allocation_is_a_placement_error(seeded: Database) -> None:
    with seeded.session() as s:
        alice = users.get_user(s, "alice")
        a = jobs.submit(s, spec("a", memory="50GiB"), alice, now=NOW).id
        b = jobs.submit(s, spec("b", memory="50GiB"), alice, now=NOW).id
    share = Allocation((GpuShare(0, 0, 500, 50 * GiB),))
    plan = Plan(starts=(Start(a, share), Start(b, share)))
    with pytest.raises(PlacementError, match="over-allocates"), seeded.session() as s:
        record.apply_plan(s, plan, NOW)
    with seeded.read_session() as s:  # rolled back: nothing started
        assert {j.state for j in jobs.list_jobs(s)} == {"PENDING"}
    bad = Plan(starts=(Start(a, Allocation((GpuShare(5, 0),))),))
    with pytest.raises(PlacementError, match="absent"), seeded.session() as s:
        record.apply_plan(s, bad, NOW)


def test_a_job_being_cancelled_is_not_offered_as_preemptible(seeded: Database) -> None:
    """A running job whose cancellation was asked is ending: the scheduler preempted it for
    another (a preemption counted, a "preempted" event, a requeue) before it was stopped."""
    whole = Allocation((GpuShare(0, 0, 1000, H100),))
    with seeded.session() as s:
        alice = users.get_user(s, "alice")
        ending = jobs.submit(s, spec("ending"), alice, now=NOW).id
        other = jobs.submit(s, spec("other"), alice, now=NOW).id
        record.apply_plan(
            s,
            Plan(
                starts=(
                    Start(ending, whole),
                    Start(other, Allocation((GpuShare(0, 1, 1000, H100),))),
                )
            ),
            NOW,
        )
        jobs.cancel_job(s, ending, now=NOW + 1)
    with seeded.session() as s:
        snap = view.build_snapshot(s, NOW + 2)
        by_id = {status.id: status for status in snap.view.running}
        assert not by_id[ending].request.preemptible
        assert by_id[other].request.preemptible


def test_start_on_a_checkpointing_gpu_is_deferred(seeded: Database) -> None:
    whole = Allocation((GpuShare(0, 0, 1000, H100),))
    with seeded.session() as s:
        alice = users.get_user(s, "alice")
        low = jobs.submit(s, spec("low"), alice, now=NOW).id
        high = jobs.submit(s, spec("high", priority=9), alice, now=NOW + 1).id
        record.apply_plan(s, Plan(starts=(Start(low, whole),)), NOW)
    plan = Plan(preempts=(Preempt(low, "priority"),), starts=(Start(high, whole),))
    with seeded.session() as s:
        applied = record.apply_plan(s, plan, NOW + 5)
        assert [j.id for j in applied.preempted] == [low] and applied.started == []
        assert low in applied.deferred[high]
        assert jobs.get_job(s, high).pending_reason == applied.deferred[high]
        snap = view.build_snapshot(s, NOW + 6)
        (preempting,) = snap.view.running
        assert preempting.id == low and not preempting.request.preemptible
        assert snap.preempting == {low}
        # recorded with the snapshot's usage instead of a fresh read: deferred the same way
        again = record.apply_plan(s, Plan(starts=(Start(high, whole),)), NOW + 6, snapshot=snap)
        assert again.started == [] and low in again.deferred[high]
    _check_stored_usage(seeded)
    with seeded.session() as s:
        job = jobs.get_job(s, low)
        jobs.settle_exit(s, job, succeeded=True, exit_code=0, reason="checkpointed", now=NOW + 7)
        applied = record.apply_plan(s, Plan(starts=(Start(high, whole),)), NOW + 8)
        assert [j.id for j in applied.started] == [high]


def _whole(gpu: int) -> Allocation:
    return Allocation((GpuShare(0, gpu, 1000, H100),))


def _gpus(s: Any, job_id: str) -> list[int]:
    return [int(share["gpu"]) for share in jobs.get_job(s, job_id).allocation or []]


def test_a_move_onto_a_checkpointing_gpu_holds_up_what_was_placed_on_its_gpus(
    seeded: Database,
) -> None:
    # The plan preempts `leaving` (GPU 0), moves `mover` from GPU 1 onto GPU 0 and starts
    # `newcomer` on GPU 1, as a policy does that reuses freed GPUs in the same round. In the
    # server `leaving` checkpoints first: the move waits, so `mover` keeps GPU 1 and the
    # start waits for it (not a placement error, which rolled the whole round back).
    with seeded.session() as s:
        alice = users.get_user(s, "alice")
        leaving = jobs.submit(s, spec("leaving"), alice, now=NOW).id
        mover = jobs.submit(s, spec("mover"), alice, now=NOW).id
        newcomer = jobs.submit(s, spec("newcomer"), alice, now=NOW + 1).id
        record.apply_plan(s, Plan(starts=(Start(leaving, _whole(0)), Start(mover, _whole(1)))), NOW)
    chain = Plan(
        preempts=(Preempt(leaving, "priority"),),
        resizes=(Resize(mover, _whole(0)),),
        starts=(Start(newcomer, _whole(1)),),
        marks={mover: {"danlu.moves": 1.0}, leaving: {"danlu.stopped": NOW + 5}},
    )
    with seeded.session() as s:
        applied = record.apply_plan(s, chain, NOW + 5)
        assert [j.id for j in applied.preempted] == [leaving]
        assert applied.resized == [] and applied.started == []
        assert leaving in applied.deferred[mover] and "checkpoint" in applied.deferred[mover]
        assert mover in applied.deferred[newcomer] and "move" in applied.deferred[newcomer]
        assert _gpus(s, mover) == [1] and jobs.get_job(s, newcomer).state == "PENDING"
        # the waiting move's marks are not kept (it is planned again); the preempt's are
        assert not jobs.get_job(s, mover).marks
        assert jobs.get_job(s, leaving).marks == {"danlu.stopped": NOW + 5}
    _check_stored_usage(seeded)
    with seeded.session() as s:  # once the preempted job has exited, the same moves go ahead
        job = jobs.get_job(s, leaving)
        jobs.settle_exit(s, job, succeeded=True, exit_code=0, reason="checkpointed", now=NOW + 7)
        snap = view.build_snapshot(s, NOW + 8)
        again = Plan(resizes=chain.resizes, starts=chain.starts, marks={mover: chain.marks[mover]})
        applied = record.apply_plan(s, again, NOW + 8, snapshot=snap)
        assert [j.id for j in applied.resized] == [mover]
        assert jobs.get_job(s, mover).marks == {"danlu.moves": 1.0}
        assert [j.id for j in applied.started] == [newcomer]
        assert (_gpus(s, mover), _gpus(s, newcomer)) == ([0], [1])
    _check_stored_usage(seeded)


def test_moves_onto_each_others_gpus_apply_in_any_order(seeded: Database) -> None:
    with seeded.session() as s:
        alice = users.get_user(s, "alice")
        a = jobs.submit(s, spec("a"), alice, now=NOW).id
        b = jobs.submit(s, spec("b"), alice, now=NOW).id
        record.apply_plan(s, Plan(starts=(Start(a, _whole(0)), Start(b, _whole(1)))), NOW)
    # b takes a's GPU, listed before a leaves it; then the two swap back, in one plan
    shift = Plan(resizes=(Resize(b, _whole(0)), Resize(a, _whole(2))))
    swap = Plan(resizes=(Resize(a, _whole(0)), Resize(b, _whole(2))))
    with seeded.session() as s:
        applied = record.apply_plan(s, shift, NOW + 5)
        assert sorted(j.id for j in applied.resized) == sorted([a, b]) and not applied.deferred
        assert (_gpus(s, a), _gpus(s, b)) == ([2], [0])
        applied = record.apply_plan(s, swap, NOW + 6)
        assert (_gpus(s, a), _gpus(s, b)) == ([0], [2])
    _check_stored_usage(seeded)
    clash = Plan(resizes=(Resize(a, _whole(3)), Resize(b, _whole(3))))
    with pytest.raises(PlacementError, match="over-allocates"), seeded.session() as s:
        record.apply_plan(s, clash, NOW + 7)
    with seeded.read_session() as s:  # rolled back
        assert (_gpus(s, a), _gpus(s, b)) == ([0], [2])


def test_quota_withholds_and_defers(seeded: Database) -> None:
    with seeded.session() as s:
        projects.create_project(s, "q", quota_gpus=1, now=NOW)
        alice = users.get_user(s, "alice")
        first = jobs.submit(s, spec("a", project="q"), alice, now=NOW).id
        second = jobs.submit(s, spec("b", project="q"), alice, now=NOW + 1).id
        one, two = (Allocation((GpuShare(0, g, 1000, H100),)) for g in (0, 1))
        applied = record.apply_plan(s, Plan(starts=(Start(first, one), Start(second, two))), NOW)
        assert [j.id for j in applied.started] == [first]
        assert "quota" in applied.deferred[second]
        snap = view.build_snapshot(s, NOW + 1)
        assert [j.id for j in snap.view.pending] == [] and "quota" in snap.withheld[second]
        assert snap.project_usage[jobs.get_job(s, first).project_id].gpus == 1.0
        forced = record.apply_plan(s, Plan(starts=(Start(second, two),)), NOW + 1, snapshot=snap)
        assert forced.started == [] and "quota" in forced.deferred[second]
        assert "quota" in jobs.why(s, jobs.get_job(s, second), NOW + 1)


def test_elastic_jobs_grow_within_their_project_s_quota(seeded: Database) -> None:
    """The view cuts an elastic job's most GPUs to what its project's quota leaves (the
    policies do not see quotas: a size past it would be refused every round), and the
    store refuses a move that grows past the quota: the job keeps its GPUs."""

    def on(*gpus: int) -> Allocation:
        return Allocation(tuple(GpuShare(0, g, 1000, H100) for g in gpus))

    with seeded.session() as s:
        projects.create_project(s, "q", quota_gpus=3.5, now=NOW)
        alice = users.get_user(s, "alice")
        ranged = spec("e", project="q", training={"global_batch_size": 64})
        ranged["resources"]["gpus"] = "1..8"
        first = jobs.submit(s, ranged, alice, now=NOW).id
        second = jobs.submit(s, {**ranged, "name": "f"}, alice, now=NOW + 1).id
        snap = view.build_snapshot(s, NOW)
        assert [j.request.max_gpus for j in snap.view.pending] == [3, 3]
        record.apply_plan(s, Plan(starts=(Start(first, on(0, 1)),)), NOW, snapshot=snap)
        snap = view.build_snapshot(s, NOW + 1)
        assert [j.request.max_gpus for j in snap.view.running] == [3]  # its 2 and 1 more
        assert [j.request.max_gpus for j in snap.view.pending] == [1]
        grow = Plan(resizes=(Resize(first, on(0, 1, 2, 3)),))
        applied = record.apply_plan(s, grow, NOW + 1, snapshot=snap)
        assert applied.resized == [] and "quota" in applied.deferred[first]
        assert len(jobs.get_job(s, first).allocation) == 2
        shrink = Plan(resizes=(Resize(first, on(3)),), starts=(Start(second, on(0)),))
        applied = record.apply_plan(s, shrink, NOW + 2)
        assert [j.id for j in applied.resized] == [first]
        assert [j.id for j in applied.started] == [second]


def test_random_rounds_keep_allocations_within_gpus(seeded: Database) -> None:
    rng = random.Random(7)
    policy = make_policy("priority")
    with seeded.session() as s:
        alice = users.get_user(s, "alice")
        for i in range(20):
            kind = rng.choice(["mem", "whole", "gang"])
            if kind == "mem":
                body = spec(f"m{i}", memory=f"{rng.choice([10, 20, 30, 50])}GiB")
            elif kind == "whole":
                body = spec(f"w{i}", gpu_type=rng.choice(["h100", "l4"]))
            else:
                body = spec(f"g{i}", gpus=rng.choice([2, 3]))
            jobs.submit(s, {**body, "priority": rng.randint(0, 3)}, alice, now=NOW + i)
    t = NOW + 100
    for _ in range(25):
        t += 10
        with seeded.session() as s:
            snap = view.build_snapshot(s, t)
            # what the snapshot says the holding jobs hold is what the store says
            fresh, taken = record._read_held(s, snap.view.cluster), record._snapshot_held(snap)
            assert np.array_equal(fresh.committed.milli, taken.committed.milli)
            assert np.array_equal(fresh.committed.memory, taken.committed.memory)
            assert np.array_equal(fresh.draining.milli, taken.draining.milli)
            assert np.array_equal(fresh.draining.memory, taken.draining.memory)
            assert fresh.owners == taken.owners
            assert {k: fresh.used[k] for k in taken.used} == taken.used
            record.apply_plan(s, policy.schedule(snap.view), t, snap.withheld, snap)
        _check_stored_usage(seeded)
        with seeded.session() as s:
            for job in jobs.list_jobs(s, states=["RUNNING", "PREEMPTING"]):
                if rng.random() < 0.4 or job.state == "PREEMPTING":
                    ok = rng.random() < 0.8
                    jobs.settle_exit(
                        s, job, succeeded=ok, exit_code=0 if ok else 1, reason="exit", now=t
                    )
    with seeded.read_session() as s:
        states = {j.state for j in jobs.list_jobs(s, limit=100)}
    assert JobState.SUCCEEDED.value in states
    assert cluster.list_shares is not None


def test_rebatch_records_the_batch_only(seeded: Database) -> None:
    whole = Allocation((GpuShare(0, 0, 1000, H100),))
    with seeded.session() as s:
        alice = users.get_user(s, "alice")
        run = jobs.submit(s, spec("run"), alice, now=NOW).id
        wait = jobs.submit(s, spec("wait"), alice, now=NOW + 1).id
        record.apply_plan(s, Plan(starts=(Start(run, whole, 256),)), NOW)
    with seeded.session() as s:
        before = jobs.get_job(s, run)
        attempt, allocation = before.attempt, list(before.allocation)
        plan = Plan(rebatches=(Rebatch(run, 1024, adaptive=True), Rebatch(wait, 64)))
        applied = record.apply_plan(s, plan, NOW + 60)
        assert [j.id for j in applied.rebatched] == [run]
        assert applied.resized == [] and applied.started == [] and applied.preempted == []
        assert applied.skipped == {wait: "not running any more"}
        job = jobs.get_job(s, run)
        # same attempt (nothing for the reconcile loop to stop or relaunch), same GPUs
        assert (job.state, job.attempt, job.allocation, job.batch_size) == (
            "RUNNING",
            attempt,
            allocation,
            1024,
        )
        assert jobs.get_job(s, wait).batch_size is None
    both = Plan(resizes=(Resize(run, whole, 512),), rebatches=(Rebatch(run, 512),))
    with pytest.raises(PlacementError, match="at once"), seeded.session() as s:
        record.apply_plan(s, both, NOW + 120)


def _views_equal(a: view.Snapshot, b: view.Snapshot) -> None:
    assert a.view.running == b.view.running and a.view.pending == b.view.pending
    assert a.withheld == b.withheld


def test_status_cache_reuses_unchanged_jobs_and_never_goes_stale(seeded: Database) -> None:
    """Statuses of jobs nothing happened to are the same objects next snapshot (a policy's
    per-status memo hits); every snapshot equals one built without the cache."""
    cache = view.StatusCache()
    with seeded.session() as s:
        projects.create_project(s, "vip", priority=1, now=NOW)
        alice = users.get_user(s, "alice")
        a = jobs.submit(s, spec("a"), alice, now=NOW).id
        b = jobs.submit(s, spec("b", project="vip"), alice, now=NOW + 1).id
        c = jobs.submit(s, spec("c", gpus=2), alice, now=NOW + 2).id

    def snapshot(t: float) -> dict[str, Any]:
        with seeded.session() as s:
            cached = view.build_snapshot(s, t, cache)
            _views_equal(cached, view.build_snapshot(s, t))
        return {j.id: j for j in (*cached.view.running, *cached.view.pending)}

    first = snapshot(NOW + 10)
    again = snapshot(NOW + 11)
    assert all(again[j] is first[j] for j in (a, b, c))
    with seeded.session() as s:  # a start: a new status for the started job only
        whole = Allocation((GpuShare(0, 0, 1000, H100),))
        record.apply_plan(s, Plan(starts=(Start(a, whole),)), NOW + 12)
        # launched, as the launch loop records it (a Core UPDATE: the version stays); a run
        # waiting for its launch has run 0 s at each snapshot, a status of its time
        s.execute(update(Job).where(Job.id == a).values(launched_attempt=Job.attempt))
    started = snapshot(NOW + 13)
    assert started[a] is not again[a] and started[a].running
    assert started[b] is again[b] and started[c] is again[c]
    with seeded.session() as s:  # progress reports do not change a status
        from danlu.server.services import metrics

        metrics.ingest(s, jobs.get_job(s, a), [{"step": 5, "loss": 1.0}], now=NOW + 14)
    assert snapshot(NOW + 15)[a] is started[a]
    with seeded.session() as s:  # a policy's marks: same state, new status
        record.apply_plan(s, Plan(marks={c: {"policy.note": 1.0}}), NOW + 15)
    marked = snapshot(NOW + 15)
    assert marked[c] is not started[c] and marked[c].marks == {"policy.note": 1.0}
    started = marked
    with seeded.session() as s:  # the project's priority is part of every request
        projects.update_project(s, "vip", priority=5)
    bumped = snapshot(NOW + 16)
    assert bumped[b] is not started[b] and bumped[b].request.priority == 5
    assert bumped[c] is started[c]
    with seeded.session() as s:  # another inventory: every status is rebuilt
        from danlu.core.cluster import Node, gpu_type

        cluster.replace_inventory(
            s,
            [Node("node-0", 4, gpu_type("H100")), Node("node-2", 2, gpu_type("L4"))],
            fake=True,
            now=NOW + 17,
        )
    moved = snapshot(NOW + 18)
    assert all(moved[j] is not bumped[j] for j in moved)
    with seeded.session() as s:  # a finished job leaves the cache
        jobs.settle_exit(
            s, jobs.get_job(s, a), succeeded=True, exit_code=0, reason="exit", now=NOW + 19
        )
    assert a not in snapshot(NOW + 20)
    assert cache.hits > 0 and cache.misses > 0


def test_status_cache_builds_a_moved_jobs_request_once(seeded: Database) -> None:
    """A job whose status changes (it starts) keeps its request object: its spec is not
    parsed again. A change of what the request is built from gives a new one."""
    cache = view.StatusCache()
    with seeded.session() as s:
        alice = users.get_user(s, "alice")
        a = jobs.submit(s, spec("a", memory="20GiB"), alice, now=NOW).id

    def status(t: float) -> Any:
        with seeded.session() as s:
            snap = view.build_snapshot(s, t, cache)
            _views_equal(snap, view.build_snapshot(s, t))
        (job,) = (*snap.view.running, *snap.view.pending)
        return job

    pending = status(NOW + 10)
    with seeded.session() as s:
        share = Allocation((GpuShare(0, 0, 250, 20 * GiB),))
        record.apply_plan(s, Plan(starts=(Start(a, share),)), NOW + 11)
    statements: list[str] = []

    def seen(_conn: Any, _cursor: Any, sql: str, *_: Any) -> None:
        statements.append(sql)

    with seeded.session() as s:  # the rebuilt status's row is read without its spec
        event.listen(seeded.engine, "before_cursor_execute", seen)
        try:
            view.build_snapshot(s, NOW + 12, cache)
        finally:
            event.remove(seeded.engine, "before_cursor_execute", seen)
    reads = [sql for sql in statements if "jobs.micro_batch_limit" in sql]  # whole rows
    assert reads and not any("jobs.spec" in sql for sql in reads)
    running = status(NOW + 12)
    assert running is not pending and running.running
    assert running.request is pending.request
    with seeded.session() as s:  # e.g. raised after an out-of-memory exit
        jobs.get_job(s, a).gpu_memory_per_gpu = 30 * GiB
    raised = status(NOW + 13)
    assert raised.request is not running.request and raised.request.gpu_memory == 30 * GiB


def test_cached_snapshots_equal_fresh_ones_over_random_danlu_rounds(seeded: Database) -> None:
    rng = random.Random(3)
    policy = make_policy("danlu")
    cache = view.StatusCache()
    with seeded.session() as s:
        alice = users.get_user(s, "alice")
        for i in range(16):
            body = spec(f"j{i}", gpus=rng.choice([1, 2]), memory=rng.choice([None, "20GiB"]))
            jobs.submit(s, {**body, "priority": rng.randint(0, 2)}, alice, now=NOW + i)
    t = NOW + 100
    for _ in range(12):
        t += 60
        with seeded.session() as s:
            snap = view.build_snapshot(s, t, cache)
            _views_equal(snap, view.build_snapshot(s, t))
            record.apply_plan(s, policy.schedule(snap.view), t, snap.withheld)
        with seeded.session() as s:
            for job in jobs.list_jobs(s, states=["RUNNING", "PREEMPTING"]):
                if rng.random() < 0.3 or job.state == "PREEMPTING":
                    jobs.settle_exit(s, job, succeeded=True, exit_code=0, reason="exit", now=t)
    assert cache.hits > 0


def test_cached_snapshots_equal_fresh_ones_under_random_operations(seeded: Database) -> None:
    """Holds and releases, priority changes, cancellations, preemptions and new jobs between
    danlu rounds: the cached snapshot equals a fresh one each time, though the cache keeps
    the entries of earlier states (a job held and released, or preempted and queued again,
    comes back under a new key, never an old one)."""
    rng = random.Random(11)
    policy = make_policy("danlu")
    cache = view.StatusCache()
    with seeded.session() as s:
        projects.create_project(s, "vip", priority=1, now=NOW)
        alice = users.get_user(s, "alice")
        for i in range(12):
            body = spec(f"j{i}", gpus=rng.choice([1, 2]), project=rng.choice(["default", "vip"]))
            jobs.submit(s, body, alice, now=NOW + i)
    t, serial = NOW + 100, 12
    done: Counter[str] = Counter()
    for _ in range(16):
        t += 60
        with seeded.session() as s:
            snap = view.build_snapshot(s, t, cache)
            _views_equal(snap, view.build_snapshot(s, t))
            plan = nodes.with_drains(policy.schedule(snap.view), snap.drains)  # held: preempted
            record.apply_plan(s, plan, t, snap.withheld, snap)
        with seeded.session() as s:
            alice = users.get_user(s, "alice")
            live = jobs.list_jobs(s, states=["PENDING", "RUNNING", "PREEMPTING"])
            for job in live:
                roll = rng.random()
                if job.state == "PREEMPTING":  # its checkpoint is written: back in the queue
                    jobs.settle_exit(s, job, succeeded=False, exit_code=0, reason="stop", now=t)
                    done["preempted"] += 1
                elif roll < 0.1 and (job.held_at is not None or job.cancel_requested_at is None):
                    # a job being cancelled cannot be held (409); a held one can be released
                    jobs.hold(s, job.id, job.held_at is None, now=t)
                    done["hold"] += 1
                elif roll < 0.15 and job.held_at is None:
                    jobs.set_priority(s, job.id, rng.randint(0, 3))
                    done["priority"] += 1
                elif roll < 0.2:
                    jobs.cancel_job(s, job.id, now=t)
                    done["cancel"] += 1
                elif roll < 0.25 and job.state == "RUNNING" and job.cancel_requested_at is None:
                    # a failure: re-queued after a backoff, due again by the clock alone
                    jobs.settle_exit(s, job, succeeded=False, exit_code=1, reason="exit 1", now=t)
                    done["failed"] += 1
            if rng.random() < 0.5:
                projects.update_project(s, "vip", priority=rng.randint(0, 2))
            for _ in range(rng.randint(0, 2)):
                jobs.submit(s, spec(f"j{serial}", gpus=rng.choice([1, 2])), alice, now=t)
                serial += 1
    assert cache.hits > 0 and cache.misses > 0
    assert set(done) == {"preempted", "hold", "priority", "cancel", "failed"}, done


def test_status_cache_drops_the_entries_of_jobs_that_left(seeded: Database) -> None:
    """Entries of jobs that left (or changed) stay until they outnumber the live ones; then
    only the last snapshot's are kept, and the jobs that remain are still served from it."""
    cache = view.StatusCache()
    with seeded.session() as s:
        alice = users.get_user(s, "alice")
        ids = [jobs.submit(s, spec(f"j{i}"), alice, now=NOW + i).id for i in range(100)]
    with seeded.session() as s:
        first = {j.id: j for j in view.build_snapshot(s, NOW + 200, cache).view.pending}
    assert len(cache) == 100
    with seeded.session() as s:
        for job_id in ids[:30]:
            jobs.cancel_job(s, job_id, now=NOW + 201)
    with seeded.session() as s:  # 100 entries, 70 live: within 2 x 70 + 64, all kept
        view.build_snapshot(s, NOW + 202, cache)
    assert len(cache) == 100
    with seeded.session() as s:
        for job_id in ids[30:90]:
            jobs.cancel_job(s, job_id, now=NOW + 203)
    with seeded.session() as s:  # 10 live: over 2 x 10 + 64, only theirs are kept
        left = view.build_snapshot(s, NOW + 204, cache).view.pending
    assert len(cache) == 10
    assert [j.id for j in left] == ids[90:]
    assert all(j is first[j.id] for j in left)


def test_pollux_rounds_recorded_in_the_store_never_over_allocate(db: Database) -> None:
    # pollux re-places every running job each round and reuses at once the GPUs of the jobs
    # it preempts or moves; in the store a preempted job holds them until it exits
    rng = random.Random(0)
    with db.session() as s:
        inventory = [Node(f"node-{i}", 8, gpu_type("H100")) for i in range(6)]
        alice = user_and_nodes(s, inventory, NOW)
        first = [
            jobs.submit(s, spec(f"r{i}", gpus=rng.choice([1, 2, 4])), alice, now=NOW).id
            for i in range(16)
        ]
        for i in range(40):
            body = spec(f"j{i}", gpus=rng.choice([1, 1, 2, 4, 8]))
            jobs.submit(s, {**body, "priority": rng.randint(0, 3)}, alice, now=NOW + i)
        snap = view.build_snapshot(s, NOW + 50)
        free = FreeMap(snap.view, "first-fit")
        starts = []
        for status in snap.view.pending:
            if status.id in first:
                alloc = free.place(status.request)
                if alloc is not None:
                    starts.append(Start(status.id, alloc))
        record.apply_plan(s, Plan(starts=tuple(starts)), NOW + 50)
    policy = make_policy("pollux", population=16, generations=8)
    t = NOW + 100
    moved = deferred = 0
    for _ in range(12):
        t += 60
        applied = record_round(db, policy, t)
        moved += len(applied.resized)
        deferred += len(applied.deferred)
        _check_stored_usage(db)
        with db.session() as s:
            for job in jobs.list_jobs(s, states=["PREEMPTING"]):  # checkpointed by now
                jobs.settle_exit(s, job, succeeded=True, exit_code=0, reason="exit", now=t)
    assert moved > 0 and deferred > 0


def test_a_plan_s_marks_add_to_the_job_s_marks_as_in_the_simulator(seeded: Database) -> None:
    # a policy hands back only what changed (the danlu policy: a new measurement, its move
    # count); the store keeps the rest, as the simulator's engine does
    with seeded.session() as s:
        job = jobs.submit(s, spec("noted"), users.get_user(s, "alice"), now=NOW).id
        record.apply_plan(s, Plan(marks={job: {"danlu.c:64": 0.5, "danlu.moves": 1.0}}), NOW)
        record.apply_plan(s, Plan(marks={job: {"danlu.c:32": 0.25}}), NOW + 1)
        record.apply_plan(s, Plan(marks={job: {"danlu.moves": 2.0}}), NOW + 2)
    with seeded.read_session() as s:
        (status,) = view.build_snapshot(s, NOW + 3).view.pending
    assert status.marks == {"danlu.c:64": 0.5, "danlu.c:32": 0.25, "danlu.moves": 2.0}


def test_a_gpu_type_only_the_inventory_knew_that_left_breaks_no_round(db: Database) -> None:
    """Jobs naming a GPU model danlu does not know, admitted while a node of it was in the
    inventory, after that node left: the round goes on. The running job keeps its GPU (its
    other type matches it), a pending one naming another type too can start on it, and one
    naming only the model that left waits, saying why."""
    from danlu.core.cluster import GpuType

    custom = GpuType("Acme-X1", 64 * GiB)
    with db.session() as s:
        alice = user_and_nodes(s, [Node("a", 1, gpu_type("H100")), Node("b", 1, custom)], NOW)
        anyof = jobs.submit(s, spec("anyof", gpu_type=["H100", "Acme-X1"]), alice, now=NOW).id
        record.apply_plan(s, Plan(starts=(Start(anyof, _whole(0)),)), NOW)
        either = jobs.submit(s, spec("either", gpu_type=["Acme-X1", "H100"]), alice, now=NOW).id
        only = jobs.submit(s, spec("only", gpu_type="Acme-X1"), alice, now=NOW).id
        nodes_after = [Node("a", 1, gpu_type("H100")), Node("c", 1, gpu_type("H100"))]
        cluster.replace_inventory(s, nodes_after, fake=True, now=NOW + 20)
    applied = record_round(db, make_policy("fifo"), NOW + 30)
    assert [j.id for j in applied.started] == [either]
    with db.read_session() as s:
        snap = view.build_snapshot(s, NOW + 31)
        (running,) = [j for j in snap.view.running if j.id == anyof]
        assert running.request.gpu_types == {"H100", "Acme-X1"}
        assert "Acme-X1" in snap.withheld[only] and only not in {j.id for j in snap.view.pending}
        assert jobs.get_job(s, anyof).state == "RUNNING"
        assert [g["node"] for g in jobs.get_job(s, either).allocation] == ["c"]
