"""Draining jobs (:attr:`ClusterView.draining`: told to stop, checkpointing before they exit)
are never preempted or moved again, and their GPUs, which they hold until they exit, are
never handed out twice."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from danlu.core.cluster import GPU_TYPES, MILLI_PER_GPU, Allocation, Cluster, GpuShare, Node
from danlu.sched.placement.drain import DrainingFree
from danlu.sched.placement.gang import FreeMap
from danlu.sched.registry import make_policy
from danlu.sched.view import ClusterView, JobRequest, JobStatus, Plan

SEQ = iter(range(10**9))


def _request(job_id: str, gpus: int, **kw: Any) -> JobRequest:
    kw.setdefault("submit_time", 0.0)
    return JobRequest(id=job_id, gpus=gpus, seq=next(SEQ), **kw)


def _running(job_id: str, cluster: Cluster, gpus: list[tuple[int, int]], **kw: Any) -> JobStatus:
    """A running job on whole ``gpus`` holding their memory, as a free map hands them out."""
    status = {k: kw.pop(k) for k in ("attained_service", "run_time") if k in kw}
    memory = cluster.nodes[gpus[0][0]].gpu_type.memory
    alloc = Allocation.whole_gpus(gpus, memory)
    return JobStatus(_request(job_id, len(gpus), **kw), alloc, last_start=0.0, **status)


def _violations(view: ClusterView, plan: Plan) -> list[str]:
    """What ``plan`` does wrong with the view's draining jobs: moves them, or puts two jobs'
    work on one GPU (a draining job's GPUs count as free once it exits, as the server and
    :class:`~danlu.sched.placement.drain.DrainingFree` count them)."""
    errors = [f"preempts draining {p.job_id}" for p in plan.preempts if p.job_id in view.draining]
    errors += [f"resizes draining {r.job_id}" for r in plan.resizes if r.job_id in view.draining]
    cluster = view.cluster
    gone = {p.job_id for p in plan.preempts} | {r.job_id for r in plan.resizes} | view.draining
    milli = [0] * cluster.total_gpus
    allocations = [j.allocation for j in view.running if j.id not in gone]
    allocations += [s.allocation for s in plan.starts] + [r.allocation for r in plan.resizes]
    for alloc in allocations:
        for share in alloc.shares:
            milli[cluster.gpu_offset(share.node) + share.gpu] += share.milli
    errors += [f"GPU {i} over-allocated" for i, m in enumerate(milli) if m > MILLI_PER_GPU]
    return errors


@pytest.mark.parametrize("name", ["tiresias", "priority", "value-density"])
def test_ranked_policies_take_no_draining_job_as_a_victim(name: str) -> None:
    """Two waiting V100 jobs outrank the running ones; the only V100 is being drained. It
    is not preempted again (its GPU released twice: two starts on it): one job waits for
    the drain to end there, the other waits."""
    v100, a100 = GPU_TYPES["V100-32GB"], GPU_TYPES["A100-80GB"]
    cluster = Cluster((Node("n0", 1, v100), Node("n1", 1, a100)))
    low = {"priority": 0, "expected_duration": 1e6, "attained_service": 1e6}
    running = (_running("r0", cluster, [(0, 0)], **low), _running("r1", cluster, [(1, 0)], **low))
    high = {"priority": 5, "expected_duration": 10.0, "gpu_types": frozenset({"V100-32GB"})}
    pending = tuple(JobStatus(_request(i, 1, **high)) for i in ("a", "b"))
    view = ClusterView(100.0, cluster, running, pending, draining=frozenset({"r0"}))
    plan = make_policy(name).schedule(view)
    assert _violations(view, plan) == []
    assert [s.job_id for s in plan.starts] == ["a"]
    assert plan.reason("b")


@pytest.mark.parametrize("name", ["danlu", "optimus", "pollux"])
def test_sizing_policies_leave_draining_jobs_as_they_are(name: str) -> None:
    """A 4-GPU job that ranks (danlu: shorter), comes (optimus: submitted first) or weighs
    (pollux: no service yet) ahead of a running 2-GPU job on a 4-GPU node: with the running
    job draining, its GPUs are neither given away nor counted free, and it is not moved."""
    cluster = Cluster.homogeneous(1, 4)
    drainer = _running("r0", cluster, [(0, 0), (0, 1)], submit_time=50.0, expected_duration=1e6)
    wide = JobStatus(_request("p", 4, expected_duration=10.0))
    view = ClusterView(5000.0, cluster, (drainer,), (wide,), draining=frozenset({"r0"}))
    plan = make_policy(name).schedule(view)
    assert _violations(view, plan) == []
    assert plan.starts == () and plan.preempts == () and plan.resizes == ()
    assert plan.reason("p")


def _elastic_view(draining: frozenset[str]) -> ClusterView:
    """Running elastic jobs that report batch limits and measurements (so the sizing
    policies would resize them) next to waiting ones."""
    limits = {"init_batch": 128.0, "max_batch": 4096.0, "min_local_bsz": 32.0}
    limits["max_local_bsz"] = 256.0

    def seen(replicas: int, step: float) -> dict[str, float]:
        return {
            **limits,
            "target_batch": 512.0,
            "progress": 0.3,
            "step_time": step,
            "sync_time": 0.01,
            "local_bsz": 64.0,
            "accum_steps": 0.0,
            "batch_size": 64.0 * replicas,
            "num_replicas": float(replicas),
            "num_nodes": 1.0,
            "grad_sqr": 1.0,
            "grad_var": 4.0,
        }

    cluster = Cluster.homogeneous(2, 4)
    running = []
    for k, gpus in enumerate(([(0, 0), (0, 1)], [(0, 2)], [(1, 0), (1, 1), (1, 2), (1, 3)])):
        job = _running(f"r{k}", cluster, gpus, submit_time=100.0 * k, run_time=600.0)
        running.append(
            JobStatus(
                job.request,
                job.allocation,
                last_start=1000.0,
                run_time=600.0,
                observed=seen(len(gpus), 0.2 + 0.1 * k),
            )
        )
    pending = [
        JobStatus(_request(f"p{k}", 2, submit_time=50.0 * k), observed=dict(limits))
        for k in range(3)
    ]
    return ClusterView(5000.0, cluster, tuple(running), tuple(pending), draining=draining)


@pytest.mark.parametrize("name", ["danlu", "optimus", "pollux"])
@pytest.mark.parametrize("drained", ["r0", "r1", "r2"])
def test_sizing_policies_never_move_a_draining_elastic_job(name: str, drained: str) -> None:
    view = _elastic_view(frozenset({drained}))
    opts = {"population": 20, "generations": 20} if name == "pollux" else {}
    plan = make_policy(name, **opts).schedule(view)
    assert _violations(view, plan) == []


@pytest.mark.parametrize(
    ("name", "opts"), [("priority", {}), ("fifo", {"backfill": True}), ("sjf", {})]
)
def test_queue_policies_hold_the_free_part_of_draining_gpus(
    name: str, opts: dict[str, Any]
) -> None:
    """A 4-GPU job that fits only once the job draining GPUs 2-3 exits starts there (it
    waits for them), and GPUs 0-1, free now, go to no job queued after it: given to one,
    that job would be preempted (priority) or keep the wide job waiting once the drain ends,
    the ping-pong :class:`~danlu.sched.placement.drain.DrainingFree` exists to prevent."""
    cluster = Cluster.homogeneous(1, 4)
    drainer = _running("d", cluster, [(0, 2), (0, 3)], submit_time=0.0)
    wide = JobStatus(_request("wide", 4, priority=5, submit_time=10.0, expected_duration=10.0))
    narrow = JobStatus(
        _request("narrow", 2, submit_time=20.0, expected_duration=1e4),
        run_time=100.0,
        last_start=0.0,
        preemptions=1,
    )
    view = ClusterView(110.0, cluster, (drainer,), (wide, narrow), draining=frozenset({"d"}))
    plan = make_policy(name, **opts).schedule(view)
    assert _violations(view, plan) == []
    assert [(s.job_id, sorted(g.gpu for g in s.allocation.shares)) for s in plan.starts] == [
        ("wide", [0, 1, 2, 3])
    ]
    assert not plan.preempts and plan.reason("narrow")
    # had the drainer been a job that stays, the free GPUs go to the narrow job
    plan = make_policy(name, **opts).schedule(dataclasses.replace(view, draining=frozenset()))
    if name == "priority":  # which preempts the drainer, of lower priority, for the wide job
        assert [p.job_id for p in plan.preempts] == ["d"] and plan.reason("narrow")
    else:
        assert [s.job_id for s in plan.starts] == ["narrow"]


def test_priority_does_not_preempt_a_job_again_while_another_drains() -> None:
    """Two rounds: two low jobs preempted for a high one; one has exited, the
    other drains. The one that exited is not started on the GPUs already free (to be
    preempted again once the drain ends): the high job is placed on all four."""
    cluster = Cluster.homogeneous(1, 4)
    high = JobStatus(_request("H", 4, priority=5, submit_time=10.0))
    low1 = _running("L1", cluster, [(0, 0), (0, 1)], priority=0)
    low2 = _running("L2", cluster, [(0, 2), (0, 3)], priority=0)
    policy = make_policy("priority")
    first = policy.schedule(ClusterView(100.0, cluster, (low1, low2), (high,)))
    assert sorted(p.job_id for p in first.preempts) == ["L1", "L2"]
    back = JobStatus(low1.request, run_time=100.0, last_start=0.0, preemptions=1)
    view = ClusterView(110.0, cluster, (low2,), (back, high), draining=frozenset({"L2"}))
    plan = policy.schedule(view)
    assert _violations(view, plan) == []
    assert [(s.job_id, s.allocation.num_gpus) for s in plan.starts] == [("H", 4)]
    assert not plan.preempts and plan.reason("L1")


def test_a_gpu_over_committed_now_has_nothing_held_on_it_for_a_waiting_job() -> None:
    """A 40 GiB GPU whose two jobs hold 30 GiB each (it was reported smaller since they
    started; the draining one gives its 30 GiB back once it exits): 20 GiB short now. A
    job placed there to wait for the drain holds nothing of it now; its part free now was
    computed as -20 GiB, and taking that gave the GPU 20 GiB back on ``now``."""
    gib = 2**30
    cluster = Cluster((Node("n0", 1, GPU_TYPES["A100-40GB"]),))

    def holding(job_id: str, milli: int) -> JobStatus:
        share = Allocation((GpuShare(0, 0, milli, 30 * gib),))
        return JobStatus(_request(job_id, 1), share, last_start=0.0)

    running = (holding("r0", 500), holding("r1", 200))
    view = ClusterView(10.0, cluster, running, (), draining=frozenset({"r0"}))
    now = FreeMap(view)
    assert (int(now.free_milli[0]), int(now.free_memory[0])) == (300, -20 * gib)
    drain = DrainingFree(now, view)
    waiting = _request("w", 1, gpu_milli=100, gpu_memory=5 * gib)
    placed = drain.place_holding(waiting)
    assert placed is not None
    alloc, held = placed
    assert alloc.shares == (GpuShare(0, 0, 100, 5 * gib),)  # after the drain: 10 GiB free
    assert held is None  # nothing of the GPU is free now
    assert (int(now.free_milli[0]), int(now.free_memory[0])) == (300, -20 * gib)
    drain.unplace(alloc, held)
    drain.hold(alloc)  # a placement of an earlier copy, taken again
    assert (int(now.free_milli[0]), int(now.free_memory[0])) == (300, -20 * gib)
    assert drain.soon is not None and int(drain.soon.free_memory[0]) == 5 * gib
