"""``danlu`` reads an infinite ``expected_duration`` (which :class:`JobRequest`
accepts, "0 or more") as unknown, as it reads None. Priced at infinite seconds, no option of
such a job beat leaving it waiting: it waited for ever on an idle cluster ("shorter-ranked
jobs hold the GPUs"), and past the starvation rule's wait too."""

from __future__ import annotations

import math

import pytest

from danlu.core.cluster import Allocation, Cluster
from danlu.sched.policies.danlu import DanluPolicy
from danlu.sched.view import ClusterView, JobRequest, JobStatus

ONE_BY_4 = Cluster.homogeneous(1, 4)


@pytest.mark.parametrize("duration", [None, 3600.0, math.inf])
def test_a_job_starts_on_an_idle_cluster_whatever_its_expected_duration(
    duration: float | None,
) -> None:
    job = JobStatus(JobRequest(id="x", submit_time=0.0, gpus=2, expected_duration=duration))
    plan = DanluPolicy().schedule(ClusterView(10.0, ONE_BY_4, pending=(job,)))
    assert [s.job_id for s in plan.starts] == ["x"]
    assert plan.starts[0].allocation.num_gpus == 2


def test_an_infinite_estimate_prices_as_an_unknown_one() -> None:
    # the same plans, round after round, as a job with no estimate at all
    def plans(duration: float | None) -> list[tuple[list[str], list[str]]]:
        policy = DanluPolicy()
        out = []
        for now in (100.0, 5000.0, 50_000.0):
            running = JobStatus(
                JobRequest(id="r", submit_time=0.0, gpus=4, expected_duration=duration),
                Allocation.whole_gpus([(0, g) for g in range(4)]),
                last_start=0.0,
            )
            waiting = JobStatus(
                JobRequest(id="w", submit_time=1.0, seq=1, gpus=4, expected_duration=duration)
            )
            view = ClusterView(now, ONE_BY_4, running=(running,), pending=(waiting,))
            plan = policy.schedule(view)
            out.append(([p.job_id for p in plan.preempts], [s.job_id for s in plan.starts]))
        return out

    unknown = plans(None)
    assert plans(math.inf) == unknown
    # the starvation rule starts the waiting job in the end (it waited past starve_after)
    assert unknown[-1] == (["r"], ["w"])
