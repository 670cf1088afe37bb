"""Why a job waits under Pollux when it needs more GPUs than it may use: its reason says so
(with how many it may use), as Optimus's does, instead of "the allocation search gave it no
GPUs this round", which read as if other jobs had been chosen over it."""

from __future__ import annotations

from danlu.core.cluster import GPU_TYPES, Allocation, Cluster, Node
from danlu.sched.policies.pollux import NO_GPUS, PolluxPolicy
from danlu.sched.view import ClusterView, JobRequest, JobStatus

A100, H100 = GPU_TYPES["A100-80GB"], GPU_TYPES["H100"]
CLUSTER = Cluster((Node("a", 4, A100), Node("h", 2, H100)))


def _plan(*pending: JobStatus, running: tuple[JobStatus, ...] = ()) -> dict[str, str]:
    view = ClusterView(100.0, CLUSTER, running=running, pending=pending)
    plan = PolluxPolicy().schedule(view)
    return {job.id: plan.reason(job.id) or "" for job in pending}


def _job(job_id: str, gpus: int, seq: int, **asked: object) -> JobStatus:
    return JobStatus(JobRequest(job_id, float(seq), gpus, seq=seq, **asked))  # type: ignore[arg-type]


def test_a_rigid_job_wider_than_its_gpu_type_says_how_many_it_may_use() -> None:
    reasons = _plan(_job("wide", 3, 1, gpu_types=frozenset({"H100"})))
    assert reasons["wide"].startswith("needs 3 GPUs but may use only 2 (of the GPU types")


def test_a_rigid_job_wider_than_the_cluster_says_so() -> None:
    reasons = _plan(_job("huge", 8, 1))
    assert reasons["huge"].startswith("needs 8 GPUs but may use only 6")


def test_gpus_held_by_jobs_that_stay_are_not_counted() -> None:
    fixed = JobStatus(
        JobRequest("fixed", 0.0, 1, seq=0, preemptible=False),
        Allocation.whole_gpus([(1, 0)]),
        last_start=0.0,
    )
    reasons = _plan(_job("wide", 2, 1, gpu_types=frozenset({"H100"})), running=(fixed,))
    assert reasons["wide"].startswith("needs 2 GPUs but may use only 1")


def test_a_job_behind_unmovable_jobs_may_use_none() -> None:
    held = JobStatus(
        JobRequest("held", 0.0, 6, seq=0, preemptible=False),
        Allocation.whole_gpus([(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1)]),
        last_start=0.0,
    )
    reasons = _plan(_job("later", 1, 1), running=(held,))
    assert reasons["later"].startswith("needs 1 GPU but may use only 0")


def test_a_job_that_fits_but_lost_the_search_keeps_the_search_reason() -> None:
    reasons = _plan(_job("a", 4, 1), _job("b", 4, 2))
    assert sorted(reasons.values()) == ["", NO_GPUS]  # 6 GPUs: either could run alone
