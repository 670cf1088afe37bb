"""Why a request for part of a GPU waits names what it needs in the units of the other
reasons: a share sized by memory said it needed "1000 milli-GPU and 21474836480
bytes", though it takes only the compute its memory is a part of; what it lacks is memory."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from danlu.core.cluster import GPU_TYPES, Cluster, Node
from danlu.core.units import GiB
from danlu.sched.policies.fifo import FifoPolicy
from danlu.sched.policies.priority import PriorityPolicy
from danlu.sched.view import ClusterView, JobRequest, JobStatus, Plan

POLICIES: dict[str, Callable[[], object]] = {
    "fifo-backfill": lambda: FifoPolicy(backfill=True),
    "priority": PriorityPolicy,
}


def _fourth_reason(policy: str, **asked: object) -> str | None:
    # the reviewer's server repro: an A100 of 40 GiB and a V100 of 32 GiB take three shares
    # of 20 GiB (500, 500 and 625 milli-GPU); the fourth waits
    cluster = Cluster((Node("a", 1, GPU_TYPES["A100-40GB"]), Node("v", 1, GPU_TYPES["V100-32GB"])))
    jobs = tuple(
        JobStatus(JobRequest(f"s{i}", float(i), seq=i, **asked))  # type: ignore[arg-type]
        for i in range(4)
    )
    plan: Plan = POLICIES[policy]().schedule(ClusterView(10.0, cluster, pending=jobs))  # type: ignore[attr-defined]
    assert sorted(start.job_id for start in plan.starts) == ["s0", "s1", "s2"]
    return plan.reason("s3")


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_a_share_sized_by_memory_says_the_memory_it_lacks(policy: str) -> None:
    reason = _fourth_reason(policy, gpu_memory=20 * GiB)
    assert reason == "no GPU has 20.0GiB of memory free"


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_a_share_of_both_names_both(policy: str) -> None:
    reason = _fourth_reason(policy, gpu_milli=400, gpu_memory=20 * GiB)
    assert reason == "no GPU has 400 milli-GPU and 20.0GiB of memory free"


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_a_typed_share_names_its_types(policy: str) -> None:
    cluster = Cluster((Node("v", 1, GPU_TYPES["V100-32GB"]), Node("h", 1, GPU_TYPES["H100"])))
    v100 = frozenset({"V100-32GB"})
    jobs = tuple(
        JobStatus(JobRequest(f"s{i}", float(i), seq=i, gpu_memory=20 * GiB, gpu_types=v100))
        for i in range(2)
    )
    plan: Plan = POLICIES[policy]().schedule(ClusterView(10.0, cluster, pending=jobs))  # type: ignore[attr-defined]
    assert [start.job_id for start in plan.starts] == ["s0"]
    assert plan.reason("s1") == "no GPU of type V100-32GB has 20.0GiB of memory free"


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_a_share_sized_by_compute_names_compute_and_some_memory(policy: str) -> None:
    # it takes its part of the memory, or what is left (review 70: it named compute only)
    cluster = Cluster((Node("h", 1, GPU_TYPES["H100"]),))
    jobs = tuple(JobStatus(JobRequest(f"s{i}", float(i), seq=i, gpu_milli=400)) for i in range(3))
    plan: Plan = POLICIES[policy]().schedule(ClusterView(10.0, cluster, pending=jobs))  # type: ignore[attr-defined]
    assert [start.job_id for start in plan.starts] == ["s0", "s1"]
    assert plan.reason("s2") == "no GPU has 400 milli-GPU and some memory free"
