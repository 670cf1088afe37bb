"""A waiting job that could never start (more GPUs than the open cluster has, a GPU type or
memory size none has) says so, under every queue policy: "needs 16 GPUs, 8 free" read as
if it would start once 8 more GPUs free up."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from danlu.core.cluster import Allocation, Cluster
from danlu.sched.policies.waiting import never_starts
from danlu.sched.registry import make_policy
from danlu.sched.view import ClusterView, JobRequest, JobStatus

TWO_BY_4 = Cluster.homogeneous(2, 4)
QUEUE_POLICIES = ["fifo", "priority", "sjf", "fair-share", "tiresias", "value-density"]
NEVER = "it could not start even with every open GPU free"


def _pending(job_id: str, gpus: int, seq: int, **kw: Any) -> JobStatus:
    request = JobRequest(id=job_id, submit_time=float(seq), gpus=gpus, seq=seq, **kw)
    return JobStatus(request=request)


def _running(job_id: str, gpus: list[tuple[int, int]], seq: int) -> JobStatus:
    request = JobRequest(id=job_id, submit_time=float(seq), gpus=len(gpus), seq=seq)
    return JobStatus(request=request, allocation=Allocation.whole_gpus(gpus), last_start=0.0)


POLICY_OPTIONS = (
    [(name, {}) for name in QUEUE_POLICIES]
    + [(name, {"backfill": False}) for name in ("fifo", "priority", "sjf", "fair-share")]
    + [("fifo", {"backfill": True}), ("priority", {"reserve": True})]
)


@pytest.mark.parametrize(("name", "options"), POLICY_OPTIONS)
def test_a_job_wider_than_the_cluster_says_it_could_never_start(
    name: str, options: dict[str, Any]
) -> None:
    pending = (_pending("wide", 16, 0), _pending("one", 1, 1))
    plan = make_policy(name, **options).schedule(ClusterView(0.0, TWO_BY_4, pending=pending))
    reason = plan.reason("wide")
    assert reason is not None and reason.startswith("needs 16 GPUs")
    assert reason == never_starts(reason.split(";")[0])


@pytest.mark.parametrize("name", QUEUE_POLICIES)
def test_a_gpu_type_or_memory_none_has_says_it_could_never_start(name: str) -> None:
    for job in (
        _pending("t4", 1, 0, gpu_types=frozenset({"T4"})),
        _pending("huge", 1, 1, gpu_memory=10**15),
    ):
        plan = make_policy(name).schedule(ClusterView(0.0, TWO_BY_4, pending=(job,)))
        reason = plan.reason(job.id)
        assert reason is not None and reason.endswith(
            "it could not start even with every open GPU free: ask for fewer GPUs, or for GPU "
            "types or memory the cluster has"
        )


@pytest.mark.parametrize("name", QUEUE_POLICIES)
def test_a_job_that_waits_for_gpus_to_free_up_does_not_say_never(name: str) -> None:
    """Six GPUs held: a 4-GPU job waits for them, and will start once they end."""
    running = (
        _running("r0", [(0, g) for g in range(4)], 0),
        _running("r1", [(1, 0), (1, 1)], 1),
    )
    pending = (_pending("four", 4, 2),)
    view = ClusterView(0.0, TWO_BY_4, running=running, pending=pending)
    plan = make_policy(name).schedule(view)
    reason = plan.reason("four")
    assert reason is not None and NEVER not in reason


def test_a_job_wider_than_the_open_gpus_says_so_while_a_node_is_closed() -> None:
    pending = (_pending("eight", 8, 0),)
    view = ClusterView(0.0, TWO_BY_4, pending=pending, closed_nodes=frozenset({1}))
    plan = make_policy("fifo").schedule(view)
    assert plan.reason("eight") == never_starts("needs 8 GPUs, 4 free")


def test_the_documented_reason_is_the_one_given() -> None:
    doc = Path(__file__).resolve().parents[2] / "docs" / "queue-policies.md"
    text = " ".join(doc.read_text().split())
    view = ClusterView(0.0, TWO_BY_4, pending=(_pending("wide", 16, 0),))
    reason = make_policy("fifo").schedule(view).reason("wide")
    assert reason is not None and f"`{reason}`" in text
