"""A running job whose allocation is empty (the server drops the shares on GPUs that left
its inventory, then re-queues the job): the view takes it out of ``running`` (into
``lost``), so no policy starts it again, moves or preempts it, or counts GPUs for it."""

from __future__ import annotations

import pytest

from danlu.core.cluster import Allocation, Cluster
from danlu.core.errors import ConfigError
from danlu.sched.quota import QuotaPolicy
from danlu.sched.quota_limits import Quota, Quotas
from danlu.sched.registry import default_registry, make_policy
from danlu.sched.view import ClusterView, JobRequest, JobStatus, Plan

POLICIES = default_registry().names()


def _lost(elastic: bool) -> JobStatus:
    """A running 2-GPU job of priority 10, short and with little service (ranked first by
    every policy), whose shares were all dropped."""
    request = JobRequest(
        "lost",
        0.0,
        2,
        max_gpus=4 if elastic else 0,
        priority=10,
        expected_duration=10.0,
        project="a",
        seq=0,
    )
    return JobStatus(request, Allocation(), last_start=0.0, run_time=5.0, attained_service=10.0)


def _named(plan: Plan) -> set[str]:
    moves = [*plan.starts, *plan.resizes, *plan.preempts, *plan.rebatches]
    return {m.job_id for m in moves} | set(plan.waiting)


def test_the_view_keeps_a_job_holding_no_gpu_out_of_running() -> None:
    lost = _lost(False)
    holder = JobStatus(JobRequest("r", 0.0, 1, seq=1), Allocation.whole_gpus([(0, 0)]))
    view = ClusterView(100.0, Cluster.homogeneous(1, 4), running=(lost, holder))
    assert view.running == (holder,)
    assert view.lost == (lost,)
    assert int(view.usage()[0].sum()) == 1000
    # a job listed twice is still refused, lost or not
    with pytest.raises(ConfigError, match="listed"):
        ClusterView(
            0.0, Cluster.homogeneous(1, 4), running=(lost,), pending=(JobStatus(lost.request),)
        )


@pytest.mark.parametrize("elastic", [False, True])
@pytest.mark.parametrize("name", POLICIES)
def test_no_policy_starts_or_counts_a_running_job_that_holds_no_gpu(
    name: str, elastic: bool
) -> None:
    cluster = Cluster.homogeneous(1, 4)
    pending = JobStatus(JobRequest("p", 1.0, 4, expected_duration=100.0, project="b", seq=1))
    view = ClusterView(100.0, cluster, running=(_lost(elastic),), pending=(pending,))
    plan = make_policy(name).schedule(view)
    assert "lost" not in _named(plan)  # before: optimus and pollux started it again
    # its 2 GPUs are free: the 4-GPU job starts on all four
    (start,) = plan.starts
    assert start.job_id == "p" and start.allocation.num_gpus == 4


@pytest.mark.parametrize("name", ["fifo", "fair-share", "optimus"])
def test_a_quota_counts_no_gpu_for_a_running_job_that_holds_none(name: str) -> None:
    lost = JobStatus(JobRequest("lost", 0.0, 2, project="a", seq=0), Allocation(), last_start=0.0)
    pending = JobStatus(JobRequest("p", 1.0, 2, project="a", seq=1))
    policy = QuotaPolicy(make_policy(name), Quotas(projects={"a": Quota("a", gpus=2)}))
    view = ClusterView(10.0, Cluster.homogeneous(1, 4), running=(lost,), pending=(pending,))
    plan = policy.schedule(view)
    # before, optimus started "lost" and held "p" back for the 2 GPUs it counted for it
    assert [s.job_id for s in plan.starts] == ["p"] and plan.waiting == {}
