"""The simulator's admission checks a job's GPU memory against the GPUs it may use: those of
the types it names, and enough of them with that memory each."""

from __future__ import annotations

from danlu.core.cluster import GPU_TYPES, Cluster, Node
from danlu.core.units import GiB
from danlu.sched.registry import make_policy
from danlu.sched.view import JobRequest
from danlu.sim.config import SimConfig
from danlu.sim.engine import Simulator
from danlu.sim.metrics import SimResult
from danlu.sim.workload import RigidWork, Workload, WorkloadJob, in_submission_order

MIXED = Cluster(
    (
        Node("big", 2, GPU_TYPES["A100-80GB"]),
        Node("small-0", 4, GPU_TYPES["T4"]),
        Node("small-1", 4, GPU_TYPES["T4"]),
    )
)


def run(*requests: JobRequest) -> SimResult:
    jobs = in_submission_order([WorkloadJob(r, RigidWork(100.0)) for r in requests])
    workload = Workload("w", "danlu", jobs)
    return Simulator(MIXED, make_policy("fifo"), workload, SimConfig(interval=60.0)).run()


def test_memory_beyond_the_named_types_is_rejected_at_submission() -> None:
    """40 GiB per GPU fits the cluster's A100s but no T4, the only type the job may use: it
    was let in and failed only once nothing else could run ("could not be placed even on
    an idle cluster"), after holding its place in the queue the whole simulation."""
    result = run(
        JobRequest("fat-t4", 0.0, gpus=1, gpu_memory=40 * GiB, gpu_types=frozenset({"T4"})),
        JobRequest("ok", 0.0, gpus=1),
    )
    reasons = dict(result.rejected)
    assert reasons["fat-t4"] == (
        "asks for 40.0GiB per GPU; the largest GPU of ['t4'] has 16.0GiB"
    ), reasons["fat-t4"]
    assert [r.id for r in result.jobs] == ["ok"]


def test_too_few_gpus_with_the_memory_are_rejected_at_submission() -> None:
    """Three GPUs of 40 GiB each: the cluster has 10 GPUs but only 2 with that memory."""
    result = run(JobRequest("wide", 0.0, gpus=3, gpu_memory=40 * GiB), JobRequest("ok", 0.0))
    assert dict(result.rejected)["wide"] == ("asks for 3 GPUs of 40.0GiB each; the cluster has 2")
    typed = run(
        JobRequest("wide", 0.0, gpus=3, gpu_memory=10 * GiB, gpu_types=frozenset({"a100-80gb"}))
    )
    assert dict(typed.rejected)["wide"] == (
        "asks for 3 GPUs of ['a100-80gb'] of 10.0GiB each; the cluster has 2"
    )


def test_jobs_that_fit_their_types_still_run() -> None:
    result = run(
        JobRequest("t4", 0.0, gpus=8, gpu_memory=16 * GiB, gpu_types=frozenset({"t4"})),
        JobRequest("a100", 0.0, gpus=2, gpu_memory=40 * GiB),
        JobRequest("any", 0.0, gpus=10),
    )
    assert result.rejected == []
    assert sorted(r.id for r in result.jobs) == ["a100", "any", "t4"]


def test_a_type_the_cluster_lacks_names_the_type() -> None:
    result = run(JobRequest("h100", 0.0, gpus=1, gpu_memory=GiB, gpu_types=frozenset({"H100"})))
    assert dict(result.rejected)["h100"] == "asks for 1 GPU of ['h100']; the cluster has 0"
