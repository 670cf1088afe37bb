"""Why a whole-GPU job that names GPU types or a memory size waits: with too few GPUs free at
all it says how many are free, as a job naming neither does (it said "free GPUs are
fragmented or of the wrong type" whenever it set ``gpu_memory``, which sent users to their
spec or their nodes); the free GPUs of another kind are counted apart."""

from __future__ import annotations

from danlu.core.cluster import GPU_TYPES, Allocation, Cluster, Node
from danlu.core.units import GiB
from danlu.sched.policies.priority import PriorityPolicy
from danlu.sched.view import ClusterView, JobRequest, JobStatus

A100, H100 = GPU_TYPES["A100-80GB"], GPU_TYPES["H100"]


def _held(job_id: str, gpus: list[tuple[int, int]]) -> JobStatus:
    request = JobRequest(job_id, 0.0, len(gpus), seq=0, preemptible=False)
    return JobStatus(request, Allocation.whole_gpus(gpus), last_start=0.0)


def _reason(cluster: Cluster, running: tuple[JobStatus, ...], **asked: object) -> str | None:
    gpus = int(asked.pop("gpus", 2))  # type: ignore[call-overload]
    waiting = JobStatus(JobRequest("W", 1.0, gpus, seq=1, **asked))  # type: ignore[arg-type]
    view = ClusterView(10.0, cluster, running=running, pending=(waiting,))
    plan = PriorityPolicy().schedule(view)
    assert plan.starts == ()
    return plan.reason("W")


def test_too_few_free_reads_the_same_with_a_memory_size() -> None:
    cluster = Cluster((Node("n", 2, A100),))
    held = (_held("H", [(0, 0)]),)
    assert _reason(cluster, held) == "needs 2 GPUs, 1 free"
    assert _reason(cluster, held, gpu_memory=80 * GiB) == "needs 2 GPUs with 80.0GiB, 1 free"


def test_free_gpus_of_another_type_are_counted_apart() -> None:
    cluster = Cluster((Node("a", 4, A100), Node("h", 2, H100)))
    held = (_held("H", [(1, 0)]),)
    assert (
        _reason(cluster, held, gpu_types=frozenset({"H100"}))
        == "needs 2 GPUs of type H100; 1 of the 5 free GPUs are"
    )


def test_too_few_of_the_kind_on_several_nodes() -> None:
    cluster = Cluster((Node("a", 2, H100), Node("b", 2, H100)))
    held = (_held("H1", [(0, 0)]), _held("H2", [(1, 0)]))
    three = _reason(cluster, held, gpus=3, gpu_types=frozenset({"H100"}))
    assert three == "needs 3 GPUs of type H100, 2 free"
