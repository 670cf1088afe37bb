"""The reasons the sizing policies give a job that can never start as things
stand, instead of ones that blame other jobs or fragmentation.

- ``danlu``: a job needing more GPUs than are open and not held by jobs that stay waited as
  "shorter-ranked jobs hold the GPUs" on an idle cluster; one whose GPU type or memory no
  free GPU has as "the free GPUs are fragmented".
- ``optimus``: a job naming no GPU type, needing more GPUs than are open, waited as "the
  marginal-gain split gave it no GPUs this round".
- ``pollux``: a job asking for no GPU waited as "the allocation search gave it no GPUs
  this round" (every other policy says it asks for no GPU).
"""

from __future__ import annotations

from typing import Any

import pytest

from danlu.core.cluster import GPU_TYPES, Allocation, Cluster, Node
from danlu.core.units import GiB
from danlu.sched.policies.waiting import NO_GPU_ASKED, why_not
from danlu.sched.registry import make_policy
from danlu.sched.view import ClusterView, JobRequest, JobStatus

# node 0: 4 x A100-40GB, node 1: 2 x H100 (80 GiB)
MIXED = Cluster((Node("a", 4, GPU_TYPES["A100-40GB"]), Node("b", 2, GPU_TYPES["H100"])))


def _pending(job_id: str = "x", seq: int = 0, **kw: Any) -> JobStatus:
    return JobStatus(JobRequest(id=job_id, submit_time=float(seq), seq=seq, **kw))


def _reason(name: str, view: ClusterView, job_id: str = "x") -> str | None:
    plan = make_policy(name).schedule(view)
    assert job_id not in {s.job_id for s in plan.starts}
    return plan.reason(job_id)


@pytest.mark.parametrize("name", ["danlu", "optimus", "pollux"])
def test_a_job_wider_than_the_open_gpus_says_how_many_it_may_use(name: str) -> None:
    # node 0 (4 GPUs) closed: 2 GPUs are open, the cluster is idle, the job needs 4
    view = ClusterView(1000.0, MIXED, pending=(_pending(gpus=4),), closed_nodes=frozenset({0}))
    reason = _reason(name, view)
    assert reason is not None
    assert reason.startswith("needs 4 GPUs but may use only 2"), reason


def test_danlu_counts_the_gpus_jobs_that_stay_hold() -> None:
    # a job that may not be preempted holds 3 of the 6 GPUs; a 4-GPU job may use 3
    held = JobStatus(
        JobRequest(id="h", submit_time=0.0, gpus=3, preemptible=False),
        Allocation.whole_gpus([(0, 0), (0, 1), (0, 2)]),
        last_start=0.0,
    )
    view = ClusterView(1000.0, MIXED, running=(held,), pending=(_pending(gpus=4, seq=1),))
    reason = _reason("danlu", view)
    assert reason is not None and reason.startswith("needs 4 GPUs but may use only 3"), reason


def test_danlu_still_says_outranked_when_a_job_could_fit() -> None:
    # two jobs of 6 GPUs: one starts, the other is outranked (it could run on its own)
    view = ClusterView(1000.0, MIXED, pending=(_pending("a", 0, gpus=6), _pending("b", 1, gpus=6)))
    plan = make_policy("danlu").schedule(view)
    assert len(plan.starts) == 1
    waits = ({"a", "b"} - {plan.starts[0].job_id}).pop()
    assert plan.reason(waits) == "shorter-ranked jobs hold the GPUs"


@pytest.mark.parametrize(
    ("request_kw", "expected"),
    [
        ({"gpu_types": frozenset({"H100"})}, "needs 1 GPU of type H100; 0 of the 4 free"),
        ({"gpus": 2, "gpu_memory": 60 * GiB}, "needs 2 GPUs with 60.0GiB; 0 of the 4 free"),
    ],
)
def test_danlu_names_the_kind_no_free_gpu_has(request_kw: dict[str, Any], expected: str) -> None:
    # the H100 node is closed: no free GPU is of the type or memory the job asks for
    view = ClusterView(
        1000.0, MIXED, pending=(_pending(**request_kw),), closed_nodes=frozenset({1})
    )
    reason = _reason("danlu", view)
    assert reason is not None and reason.startswith(expected), reason
    assert "fragmented" not in reason


@pytest.mark.parametrize("gpus", [0, -1])
def test_pollux_says_a_job_asks_for_no_gpu(gpus: int) -> None:
    view = ClusterView(1000.0, MIXED, pending=(_pending(gpus=gpus),))
    assert _reason("pollux", view) == NO_GPU_ASKED


def test_why_not_at_a_count_other_than_the_request() -> None:
    # a sizing policy tries a job at its own size: the reason names that count
    from danlu.sched.placement.gang import FreeMap

    view = ClusterView(1000.0, MIXED, closed_nodes=frozenset({0}))
    free = FreeMap(view)
    job = _pending(gpus=8)
    assert why_not(free, job) == "needs 8 GPUs, 2 free"
    assert why_not(free, job, 4) == "needs 4 GPUs, 2 free"
    typed = _pending(gpus=8, gpu_types=frozenset({"A100-40GB"}))
    assert why_not(free, typed, 1).startswith("needs 1 GPU of type A100-40GB; 0 of the 2")
