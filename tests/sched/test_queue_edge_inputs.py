"""Queue policies on edge inputs: an estimate of 0 s (sjf, value-density), a waiting job that
could never start (fair-share's reclaim shares), a preemption pass whose higher-priority
start strict order drops (priority)."""

from __future__ import annotations

from typing import Any

from danlu.core.cluster import Allocation, Cluster, GpuShare
from danlu.sched.policies.fair_share import FairSharePolicy
from danlu.sched.policies.priority import PriorityPolicy
from danlu.sched.policies.sjf import SjfPolicy
from danlu.sched.policies.value_density import ValueDensityPolicy
from danlu.sched.view import ClusterView, JobRequest, JobStatus, Plan

ONE_GPU = Cluster.homogeneous(1, 1)


def _pending(job_id: str, seq: int, duration: float | None, gpus: int = 1) -> JobStatus:
    return JobStatus(
        JobRequest(job_id, submit_time=0.0, gpus=gpus, seq=seq, expected_duration=duration)
    )


def _started(plan: Plan) -> list[str]:
    return [start.job_id for start in plan.starts]


def test_sjf_ranks_an_estimate_of_zero_seconds_first_not_last() -> None:
    # an expected_duration of 0 is accepted (0 or more) and is the shortest estimate there
    # is; it was read as "no estimate" (0 or inf) and ranked behind every estimated job
    view = ClusterView(
        0.0, ONE_GPU, pending=(_pending("long", 0, 600.0), _pending("instant", 1, 0.0))
    )
    assert _started(SjfPolicy().schedule(view)) == ["instant"]
    assert _started(SjfPolicy(by_gpu_time=False).schedule(view)) == ["instant"]


def test_sjf_still_ranks_a_job_without_an_estimate_last() -> None:
    view = ClusterView(
        0.0, ONE_GPU, pending=(_pending("unknown", 0, None), _pending("long", 1, 600.0))
    )
    assert _started(SjfPolicy().schedule(view)) == ["long"]


def test_value_density_reads_an_estimate_of_zero_seconds_as_zero_not_default() -> None:
    # 0 s left is the least remaining time (min_remaining), the highest density; it was
    # priced at default_duration (3600 s), below a job of 600 s
    view = ClusterView(
        0.0, ONE_GPU, pending=(_pending("long", 0, 600.0), _pending("instant", 1, 0.0))
    )
    policy = ValueDensityPolicy()
    assert _started(policy.schedule(view)) == ["instant"]
    assert policy.density(view.pending[1], 0.0) == 1.0 / policy.min_remaining


def _holding(job_id: str, project: str, node: int, gpu: int, seq: int) -> JobStatus:
    request = JobRequest(job_id, submit_time=0.0, gpus=1, seq=seq, project=project)
    return JobStatus(request, Allocation.whole_gpus([(node, gpu)]), last_start=0.0)


def test_reclaim_shares_leave_out_a_job_that_could_never_start() -> None:
    # 8 GPUs: a holds 4, c 2, d 2 and waits for 1 more; b waits only with a 16-GPU job,
    # which no end of any job lets start. Counted as b's demand it gave b a share of 2 GPUs
    # it could never use, cut d's share to the 2 it holds, and d waited beside a's 4
    gpus = [(node, gpu) for node in range(2) for gpu in range(4)]
    owners = ["a", "a", "a", "a", "c", "c", "d", "d"]
    running = tuple(
        _holding(f"{owner}{i}", owner, *at, seq=i)
        for i, (owner, at) in enumerate(zip(owners, gpus, strict=True))
    )
    pending = (
        JobStatus(JobRequest("b-wide", submit_time=0.0, gpus=16, seq=10, project="b")),
        JobStatus(JobRequest("d-next", submit_time=0.0, gpus=1, seq=11, project="d")),
    )
    view = ClusterView(1000.0, Cluster.homogeneous(2, 4), running=running, pending=pending)
    plan = FairSharePolicy(reclaim=True, min_run=300.0).schedule(view)
    assert _started(plan) == ["d-next"]
    assert [p.job_id for p in plan.preempts] == ["a3"]  # the youngest of a's: ties by seq
    assert plan.reason("b-wide") == "no free GPUs"


def _share_on(job_id: str, gpu: int, milli: int, seq: int, **kw: Any) -> JobStatus:
    request = JobRequest(job_id, submit_time=0.0, gpus=1, gpu_milli=milli, seq=seq, **kw)
    memory = request.memory_on(int(TWO_GPUS.arrays.gpu_memory[gpu]))
    return JobStatus(request, Allocation((GpuShare(0, gpu, milli, memory),)), last_start=0.0)


TWO_GPUS = Cluster.homogeneous(1, 2)


def test_priority_keeps_no_preemption_whose_higher_priority_start_strict_order_dropped() -> None:
    # GPU 0: "victim" (priority 0, whole); GPU 1: half held by a job that may not be
    # preempted. The preemption pass starts "high" (priority 1, 600 milli) on GPU 0 by
    # preempting the victim, and places "low" (priority 0, 300 milli) beside it; strict
    # order then holds "high" back (it comes after "wide" by aging). "low" was kept on GPU
    # 0 and so was the preemption: the victim was preempted for a job of its own priority
    victim = JobStatus(
        JobRequest("victim", submit_time=0.0, gpus=1, seq=0),
        Allocation.whole_gpus([(0, 0)]),
        last_start=0.0,
    )
    fixed = _share_on("fixed", 1, 500, 1, preemptible=False)
    pending = (
        JobStatus(JobRequest("low", submit_time=0.0, gpus=1, gpu_milli=300, seq=2)),
        JobStatus(JobRequest("wide", submit_time=10.0, gpus=2, seq=3)),
        JobStatus(JobRequest("high", submit_time=2000.0, gpus=1, gpu_milli=600, priority=1, seq=4)),
    )
    view = ClusterView(2000.0, TWO_GPUS, running=(victim, fixed), pending=pending)
    plan = PriorityPolicy(aging_per_hour=3600.0, backfill=False).schedule(view)
    assert plan.preempts == ()
    # "low" starts where the queue pass put it, on GPU 1's free half
    assert [(s.job_id, [(g.node, g.gpu) for g in s.allocation.shares]) for s in plan.starts] == [
        ("low", [(0, 1)])
    ]
    assert plan.reason("high") is not None and plan.reason("wide") is not None
