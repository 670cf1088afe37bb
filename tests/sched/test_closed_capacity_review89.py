"""Capacity on GPUs closed to new work (a failed or cordoned node) is capacity no
job can be given.

- ``fair-share`` with ``reclaim`` split the whole cluster, closed GPUs included, into the
  projects' fair shares: with half the cluster failed, a project holding every open GPU was
  still within its share, and a project holding nothing waited for ever.
- The ranked policies (``priority``, ``tiresias``, ``value-density``) told a job asking for
  more than the cluster could ever give it (more GPUs than are open, or than the jobs that
  may not be preempted leave) that it was "outranked: ... held by higher-ranked jobs", even
  when it outranked every running job.
"""

from __future__ import annotations

from typing import Any

import pytest

from danlu.core.cluster import Allocation, Cluster
from danlu.sched.policies.fair_share import FairSharePolicy
from danlu.sched.registry import make_policy
from danlu.sched.view import ClusterView, JobRequest, JobStatus

TWO_BY_4 = Cluster.homogeneous(2, 4)


def _req(job_id: str, gpus: int, seq: int, **kw: Any) -> JobRequest:
    return JobRequest(id=job_id, submit_time=float(seq), gpus=gpus, seq=seq, **kw)


def _on(
    job_id: str, gpus: list[tuple[int, int]], seq: int, service: float = 0.0, **kw: Any
) -> JobStatus:
    request = _req(job_id, len(gpus), seq, **kw)
    alloc = Allocation.whole_gpus(gpus)
    return JobStatus(request, alloc, attained_service=service, last_start=0.0)


def _pending(job_id: str, seq: int) -> JobStatus:
    return JobStatus(_req(job_id, 1, seq, project="a"))


def test_reclaim_splits_only_the_open_gpus() -> None:
    # node 1 failed (closed, idle); project b holds the 4 open GPUs; project a waits with 2
    # jobs of 1 GPU: its fair share of the 4 GPUs anyone can hold is 2
    running = tuple(_on(f"b{g}", [(0, g)], g, project="b") for g in range(4))
    pending = (_pending("a0", 10), _pending("a1", 11))
    view = ClusterView(
        1000.0, TWO_BY_4, running=running, pending=pending, closed_nodes=frozenset({1})
    )
    plan = FairSharePolicy(reclaim=True, min_run=0.0).schedule(view)
    assert [s.job_id for s in plan.starts] == ["a0"]
    assert [p.job_id for p in plan.preempts] == ["b3"]  # the youngest
    # the same with node 1 held by a job that may not be preempted: it was reclaimed then
    held = tuple(_on(f"c{g}", [(1, g)], 20 + g, project="c", preemptible=False) for g in range(4))
    view = ClusterView(1000.0, TWO_BY_4, running=running + held, pending=pending)
    plan = FairSharePolicy(reclaim=True, min_run=0.0).schedule(view)
    assert [p.job_id for p in plan.preempts] == ["b3"]


def test_reclaim_still_keeps_a_project_within_its_open_share() -> None:
    # b holds 2 of the 4 open GPUs, a 2 and asks for more: both are at their share
    running = (
        *(_on(f"b{g}", [(0, g)], g, project="b") for g in range(2)),
        *(_on(f"a{g}", [(0, g)], 5 + g, project="a") for g in range(2, 4)),
    )
    view = ClusterView(
        1000.0,
        TWO_BY_4,
        running=running,
        pending=(_pending("a9", 10),),
        closed_nodes=frozenset({1}),
    )
    plan = FairSharePolicy(reclaim=True, min_run=0.0).schedule(view)
    assert plan.starts == () and plan.preempts == ()


@pytest.mark.parametrize("name", ["priority", "tiresias", "value-density"])
def test_a_job_larger_than_the_cluster_is_not_told_it_is_outranked(name: str) -> None:
    # two preemptible jobs of priority 0 and much service hold 6 GPUs; nine (priority 9,
    # no service: it ranks first under each policy) asks for 9 of 8
    running = (
        _on("r", [(0, g) for g in range(4)], -2, service=1e6),
        _on("r2", [(1, 0), (1, 1)], -1, service=1e6),
    )
    pending = (JobStatus(_req("nine", 9, 0, priority=9, expected_duration=10.0)),)
    plan = make_policy(name).schedule(
        ClusterView(1000.0, TWO_BY_4, running=running, pending=pending)
    )
    assert plan.starts == () and plan.preempts == ()
    reason = plan.reason("nine") or ""
    assert not reason.startswith("outranked")
    assert reason.startswith("needs 9 GPUs, more than the 8 GPUs of capacity new work may use")
    # node 1 closed: r2 may not be preempted there, so 4 GPUs are all it could get
    view = ClusterView(
        1000.0,
        TWO_BY_4,
        running=running,
        pending=(JobStatus(_req("eight", 8, 0, priority=9, expected_duration=10.0)),),
        closed_nodes=frozenset({1}),
    )
    plan = make_policy(name).schedule(view)
    assert plan.starts == () and plan.preempts == ()
    assert (plan.reason("eight") or "").startswith("needs 8 GPUs, more than the 4 GPUs")


def test_a_job_that_fits_the_cluster_is_still_outranked() -> None:
    # hi (priority 9) holds 6 GPUs, lo (priority 0) 1; mid (priority 5) asks for 4: the
    # cluster has them, but hi's rank takes 6 of the 8
    running = (
        _on("hi", [*((0, g) for g in range(4)), (1, 0), (1, 1)], -2, priority=9),
        _on("lo", [(1, 2)], -1),
    )
    pending = (JobStatus(_req("mid", 4, 0, priority=5)),)
    plan = make_policy("priority").schedule(
        ClusterView(1000.0, TWO_BY_4, running=running, pending=pending)
    )
    assert plan.starts == () and plan.preempts == ()
    assert plan.reason("mid") == "outranked: needs 4 GPUs of capacity held by higher-ranked jobs"
