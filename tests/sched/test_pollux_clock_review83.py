"""The ``pollux`` baseline seeds its search with the round's clock: a view whose clock is
before 0 (built in code) is scheduled as any other, not a bare ValueError from NumPy."""

from __future__ import annotations

from danlu.core.cluster import Cluster
from danlu.sched.policies.pollux import PolluxPolicy
from danlu.sched.view import ClusterView, JobRequest, JobStatus


def test_a_clock_before_zero_schedules_a_new_job() -> None:
    request = JobRequest(id="new", submit_time=-120.0, gpus=2)
    view = ClusterView(
        time=-60.0, cluster=Cluster.homogeneous(1, 4), pending=(JobStatus(request=request),)
    )
    plan = PolluxPolicy(population=10, generations=5).schedule(view)
    assert [start.job_id for start in plan.starts] == ["new"]
    again = PolluxPolicy(population=10, generations=5).schedule(view)
    assert again.starts == plan.starts  # deterministic for the seed and the clock
