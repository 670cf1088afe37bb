"""Nodes closed to new work (cordoned): no policy starts, grows or moves a job onto them,
and none touches a job already there."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from danlu.core.cluster import Allocation, Cluster, GpuShare
from danlu.sched.placement.gang import STRATEGIES, FreeMap
from danlu.sched.registry import default_registry
from danlu.sched.view import ClusterView, JobRequest, JobStatus, Plan

POLICIES = default_registry().names()


def _request(job_id: str, gpus: int = 1, seq: int = 0, **kw: Any) -> JobRequest:
    return JobRequest(id=job_id, submit_time=float(seq), gpus=gpus, seq=seq, **kw)


def _touched(plan: Plan) -> set[int]:
    """Nodes that the plan's starts and moves put work on."""
    allocations = [s.allocation for s in plan.starts] + [r.allocation for r in plan.resizes]
    return {share.node for alloc in allocations for share in alloc.shares}


def test_the_view_hands_jobs_on_closed_nodes_in_as_not_preemptible() -> None:
    cluster = Cluster.homogeneous(2, 4)
    there = JobStatus(_request("there", 2), Allocation.whole_gpus([(1, 0), (1, 1)]))
    here = JobStatus(_request("here", 2, 1), Allocation.whole_gpus([(0, 0), (0, 1)]))
    view = ClusterView(0.0, cluster, running=(there, here), closed_nodes=frozenset({1}))
    assert [j.request.preemptible for j in view.running] == [False, True]
    assert view.open_gpus() is not None
    assert view.open_gpus().tolist() == [True] * 4 + [False] * 4  # type: ignore[union-attr]
    assert ClusterView(0.0, cluster).open_gpus() is None


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_free_map_places_nothing_on_a_closed_node(strategy: str) -> None:
    cluster = Cluster.homogeneous(3, 4)
    held = JobStatus(_request("held", 1), Allocation.whole_gpus([(1, 0)]))
    view = ClusterView(0.0, cluster, running=(held,), closed_nodes=frozenset({1}))
    free = FreeMap(view, strategy)
    assert free.node_free.tolist() == [4, 0, 4]
    assert free.total_free == 8
    assert free.closed_free_milli() == 3000
    placed = [free.place(_request(f"j{i}", 2)) for i in range(5)]
    got = [a for a in placed if a is not None]
    assert len(got) == 4
    assert all(s.node != 1 for a in got for s in a.shares)
    shared = FreeMap(view, strategy).place(_request("part", 1, gpu_milli=300))
    assert shared is not None and shared.shares[0].node != 1
    # the job already there keeps its GPU: it can be released and taken back
    free.release(held.allocation)
    assert free.node_free.tolist()[1] == 0
    assert free.can_take(held.allocation)
    free.take(held.allocation)


def test_a_full_open_part_leaves_shared_requests_waiting() -> None:
    cluster = Cluster.homogeneous(2, 1)
    busy = JobStatus(_request("busy", 1), Allocation.whole_gpus([(0, 0)]))
    view = ClusterView(0.0, cluster, running=(busy,), closed_nodes=frozenset({1}))
    free = FreeMap(view, "best-fit")
    assert not free.any_capacity()
    assert free.place(_request("part", 1, gpu_milli=500)) is None


@pytest.mark.parametrize("name", POLICIES)
def test_policies_start_jobs_on_open_nodes_only(name: str) -> None:
    cluster = Cluster.homogeneous(2, 4)
    waiting = tuple(JobStatus(_request(f"p{i}", 2, i)) for i in range(4))
    view = ClusterView(100.0, cluster, pending=waiting, closed_nodes=frozenset({0}))
    plan = default_registry().create(name).schedule(view)
    assert _touched(plan) == {1}
    assert sum(a.allocation.num_gpus for a in plan.starts) == 4


@pytest.mark.parametrize("name", POLICIES)
def test_policies_leave_jobs_on_closed_nodes_alone(name: str) -> None:
    """A low-priority job on a closed node is neither preempted nor moved for a
    higher-priority one: its GPUs could go to nobody."""
    cluster = Cluster.homogeneous(2, 2)
    low = JobStatus(
        _request("low", 2, 0, priority=-5, max_gpus=4),
        Allocation.whole_gpus([(1, 0), (1, 1)]),
        last_start=0.0,
    )
    other = JobStatus(
        _request("other", 2, 1, priority=-5),
        Allocation.whole_gpus([(0, 0), (0, 1)]),
        last_start=0.0,
    )
    high = JobStatus(_request("high", 2, 2, priority=10))
    closed = ClusterView(
        100.0, cluster, running=(low, other), pending=(high,), closed_nodes=frozenset({1})
    )
    plan = default_registry().create(name).schedule(closed)
    assert "low" not in {p.job_id for p in plan.preempts}
    assert "low" not in {r.job_id for r in plan.resizes}
    assert 1 not in _touched(plan)


_SHAPES = st.sampled_from(["rigid", "elastic", "shared"])


@st.composite
def _views(draw: st.DrawFn) -> ClusterView:
    nodes = draw(st.integers(1, 4))
    per_node = draw(st.integers(1, 4))
    cluster = Cluster.homogeneous(nodes, per_node)
    closed = frozenset(draw(st.sets(st.integers(0, nodes - 1), max_size=nodes)))
    used = [[0] * per_node for _ in range(nodes)]
    running: list[JobStatus] = []
    pending: list[JobStatus] = []
    for seq in range(draw(st.integers(0, 8))):
        shape = draw(_SHAPES)
        gpus = 1 if shape == "shared" else draw(st.integers(1, per_node * nodes))
        kw: dict[str, Any] = {"priority": draw(st.integers(-2, 2))}
        if shape == "elastic":
            kw["max_gpus"] = gpus + draw(st.integers(1, 4))
        if shape == "shared":
            kw["gpu_milli"] = draw(st.sampled_from([250, 500]))
        request = _request(f"j{seq}", gpus, seq, **kw)
        free = [(n, g) for n in range(nodes) for g in range(per_node) if used[n][g] == 0]
        if draw(st.booleans()) and len(free) >= gpus:
            start = draw(st.integers(0, len(free) - gpus))
            at = free[start : start + gpus]
            milli = kw.get("gpu_milli", 1000)
            for n, g in at:
                used[n][g] = 1
            shares = tuple(GpuShare(n, g, milli, 0) for n, g in at)
            running.append(JobStatus(request, Allocation(shares), last_start=0.0))
        else:
            pending.append(JobStatus(request))
    return ClusterView(
        50.0, cluster, running=tuple(running), pending=tuple(pending), closed_nodes=closed
    )


@pytest.mark.parametrize("name", POLICIES)
@settings(max_examples=60, deadline=None)
@given(view=_views())
def test_no_policy_puts_work_on_or_moves_work_off_a_closed_node(
    name: str, view: ClusterView
) -> None:
    plan = default_registry().create(name).schedule(view)
    assert not _touched(plan) & view.closed_nodes
    on_closed = {
        j.id for j in view.running if any(s.node in view.closed_nodes for s in j.allocation.shares)
    }
    assert not on_closed & {p.job_id for p in plan.preempts}
    assert not on_closed & {r.job_id for r in plan.resizes}


@pytest.mark.parametrize("name", ["priority", "value-density"])
def test_a_ranked_round_counts_only_open_capacity(name: str) -> None:
    """An idle closed node is no room for a higher-priority job: it preempts the
    lower-priority one on the open node instead of waiting for good."""
    cluster = Cluster.homogeneous(2, 2)
    low = JobStatus(
        _request("low", 2, 0, priority=-5), Allocation.whole_gpus([(0, 0), (0, 1)]), last_start=0.0
    )
    high = JobStatus(_request("high", 2, 1, priority=10))
    view = ClusterView(100.0, cluster, running=(low,), pending=(high,), closed_nodes=frozenset({1}))
    plan = default_registry().create(name).schedule(view)
    assert [p.job_id for p in plan.preempts] == ["low"]
    assert [s.job_id for s in plan.starts] == ["high"]
    assert _touched(plan) == {0}
