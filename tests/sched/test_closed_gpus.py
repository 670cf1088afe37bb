"""GPUs closed to new work on their own (an admin's per-GPU cordon, a failed health check):
no policy starts, grows or moves a job onto them, none touches a job already there, and the
node's other GPUs take work as before."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from danlu.core.cluster import Allocation, Cluster, GpuShare
from danlu.sched.placement.gang import STRATEGIES, FreeMap
from danlu.sched.policies.danlu_share import gpus_unavailable
from danlu.sched.registry import default_registry
from danlu.sched.view import ClusterView, JobRequest, JobStatus, Plan

POLICIES = default_registry().names()


def _request(job_id: str, gpus: int = 1, seq: int = 0, **kw: Any) -> JobRequest:
    return JobRequest(id=job_id, submit_time=float(seq), gpus=gpus, seq=seq, **kw)


def _gpus_touched(plan: Plan, cluster: Cluster) -> set[int]:
    """GPUs (flat numbering) that the plan's starts and moves put work on."""
    allocations = [s.allocation for s in plan.starts] + [r.allocation for r in plan.resizes]
    return {cluster.gpu_offset(s.node) + s.gpu for a in allocations for s in a.shares}


def test_the_view_closes_the_gpus_alone_and_pins_the_jobs_on_them() -> None:
    cluster = Cluster.homogeneous(2, 4)
    there = JobStatus(_request("there", 2), Allocation.whole_gpus([(1, 1), (1, 2)]))
    beside = JobStatus(_request("beside", 1, 1), Allocation.whole_gpus([(1, 0)]))
    view = ClusterView(0.0, cluster, running=(there, beside), closed_gpus=frozenset({5}))
    assert [j.request.preemptible for j in view.running] == [False, True]
    opened = view.open_gpus()
    assert opened is not None
    assert opened.tolist() == [True] * 5 + [False] + [True] * 2
    # with a closed node as well: both close
    both = ClusterView(0.0, cluster, closed_nodes=frozenset({0}), closed_gpus=frozenset({7}))
    assert both.open_gpus().tolist() == [False] * 4 + [True] * 3 + [False]  # type: ignore[union-attr]
    # a closed GPU that a job holds counts once among the GPUs no one else can have
    assert gpus_unavailable(view.running, view) == 3
    assert gpus_unavailable((), view) == 1
    assert gpus_unavailable((), both) == 5


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_free_map_places_nothing_on_a_closed_gpu(strategy: str) -> None:
    cluster = Cluster.homogeneous(2, 4)
    view = ClusterView(0.0, cluster, closed_gpus=frozenset({1, 6}))
    free = FreeMap(view, strategy)
    assert free.node_free.tolist() == [3, 3]
    assert free.total_free == 6
    assert free.closed_free_milli() == 2000
    got = [free.place(_request("wide", 4)), *(free.place(_request(f"j{i}", 1)) for i in range(3))]
    placed = [a for a in got if a is not None]
    assert [a.num_gpus for a in placed] == [4, 1, 1]  # 6 open GPUs: the last one waits
    assert not {cluster.gpu_offset(s.node) + s.gpu for a in placed for s in a.shares} & {1, 6}
    shared = FreeMap(view, strategy).place(_request("part", 1, gpu_milli=300))
    assert shared is not None
    assert cluster.gpu_offset(shared.shares[0].node) + shared.shares[0].gpu not in {1, 6}


@pytest.mark.parametrize("name", POLICIES)
def test_policies_start_jobs_on_open_gpus_only(name: str) -> None:
    cluster = Cluster.homogeneous(2, 4)
    waiting = tuple(JobStatus(_request(f"p{i}", 2, i)) for i in range(4))
    view = ClusterView(100.0, cluster, pending=waiting, closed_gpus=frozenset({0, 1, 2}))
    plan = default_registry().create(name).schedule(view)
    assert not _gpus_touched(plan, cluster) & {0, 1, 2}
    assert sum(a.allocation.num_gpus for a in plan.starts) == 4


@st.composite
def _views(draw: st.DrawFn) -> ClusterView:
    nodes = draw(st.integers(1, 3))
    per_node = draw(st.integers(1, 4))
    cluster = Cluster.homogeneous(nodes, per_node)
    total = nodes * per_node
    closed = frozenset(draw(st.sets(st.integers(0, total - 1), max_size=total)))
    used = [0] * total
    running: list[JobStatus] = []
    pending: list[JobStatus] = []
    for seq in range(draw(st.integers(0, 7))):
        shape = draw(st.sampled_from(["rigid", "elastic", "shared"]))
        gpus = 1 if shape == "shared" else draw(st.integers(1, total))
        kw: dict[str, Any] = {"priority": draw(st.integers(-2, 2))}
        if shape == "elastic":
            kw["max_gpus"] = gpus + draw(st.integers(1, 4))
        if shape == "shared":
            kw["gpu_milli"] = draw(st.sampled_from([250, 500]))
        request = _request(f"j{seq}", gpus, seq, **kw)
        free = [i for i in range(total) if not used[i]]
        if draw(st.booleans()) and len(free) >= gpus:
            start = draw(st.integers(0, len(free) - gpus))
            at = free[start : start + gpus]
            for i in at:
                used[i] = 1
            milli = kw.get("gpu_milli", 1000)
            shares = tuple(GpuShare(i // per_node, i % per_node, milli, 0) for i in at)
            running.append(JobStatus(request, Allocation(shares), last_start=0.0))
        else:
            pending.append(JobStatus(request))
    return ClusterView(
        50.0, cluster, running=tuple(running), pending=tuple(pending), closed_gpus=closed
    )


@pytest.mark.parametrize("name", POLICIES)
@settings(max_examples=40, deadline=None)
@given(view=_views())
def test_no_policy_puts_work_on_or_moves_work_off_a_closed_gpu(
    name: str, view: ClusterView
) -> None:
    cluster = view.cluster
    plan = default_registry().create(name).schedule(view)
    assert not _gpus_touched(plan, cluster) & view.closed_gpus
    on_closed = {
        j.id
        for j in view.running
        if any(cluster.gpu_offset(s.node) + s.gpu in view.closed_gpus for s in j.allocation.shares)
    }
    assert not on_closed & {p.job_id for p in plan.preempts}
    assert not on_closed & {r.job_id for r in plan.resizes}
