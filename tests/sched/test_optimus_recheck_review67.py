"""``optimus``'s ``recheck_at``. Its plan reads the clock only through the work
estimate of a running job it has measured (the goodput it trained at, times the time since
the last round): with none such, and no marks left for the next round, only a change of
jobs can change the plan (``recheck_at`` infinite); otherwise the next tick's round is due
(0)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from danlu.core.cluster import Allocation, Cluster
from danlu.sched.policies import danlu_model as dm
from danlu.sched.policies import work_estimate as we
from danlu.sched.policies.optimus import NO_GPUS, OptimusPolicy
from danlu.sched.view import ClusterView, JobRequest, JobStatus

LIMITS = {"init_batch": 128.0, "max_batch": 4096.0, "min_local_bsz": 32.0, "max_local_bsz": 256.0}


def status(job_id: str, gpus: int, submit: float, **kw: Any) -> JobStatus:
    keys = ("max_gpus", "batch_size", "gpu_milli")
    req_kw = {k: kw.pop(k) for k in list(kw) if k in keys}
    request = JobRequest(id=job_id, submit_time=submit, gpus=gpus, seq=int(submit), **req_kw)
    return JobStatus(request=request, **kw)


def on_node(node: int, gpus: int) -> Allocation:
    return Allocation.whole_gpus([(node, g) for g in range(gpus)])


def measured(replicas: int, progress: float) -> dict[str, float]:
    """What a job of batch 256 reports on ``replicas`` GPUs of one node."""
    local = 256 // replicas
    return {
        **LIMITS,
        "adaptive": 1.0,
        "progress": progress,
        "step_time": 0.1 + 0.002 * local,
        "sync_time": 0.02 if replicas > 1 else 0.0,
        "local_bsz": float(local),
        "accum_steps": 0.0,
        "batch_size": 256.0,
        "num_replicas": float(replicas),
        "num_nodes": 1.0,
        "grad_sqr": 1.0,
        "grad_var": 40.0,
    }


def test_rigid_jobs_waiting_behind_rigid_ones_need_no_round_until_jobs_change() -> None:
    cluster = Cluster.homogeneous(2, 4)
    a = status("a", 4, 0.0, allocation=on_node(0, 4), last_start=0.0, run_time=600.0)
    b = status("b", 4, 1.0, allocation=on_node(1, 4), last_start=0.0, run_time=600.0)
    wide = status("wide", 8, 2.0)
    share = status("share", 1, 3.0, gpu_milli=500)
    view = ClusterView(time=600.0, cluster=cluster, running=(a, b), pending=(wide, share))
    plan = OptimusPolicy().schedule(view)
    assert not plan.starts and not plan.preempts and not plan.resizes
    assert plan.waiting["wide"] == NO_GPUS and "share" in plan.waiting
    assert plan.recheck_at == math.inf
    # the same view an hour later: the same plan (nothing in it reads the clock)
    later = OptimusPolicy().schedule(replace(view, time=4200.0))
    assert later == plan


def test_an_elastic_job_not_measured_yet_reads_no_clock() -> None:
    cluster = Cluster.homogeneous(1, 4)
    rigid = status("rigid", 4, 0.0, allocation=on_node(0, 4), last_start=0.0)
    new = status("new", 2, 1.0, max_gpus=4, observed={**LIMITS, "adaptive": 1.0})
    view = ClusterView(time=600.0, cluster=cluster, running=(rigid,), pending=(new,))
    plan = OptimusPolicy().schedule(view)
    assert not plan.starts and not plan.marks
    assert plan.recheck_at == math.inf


def test_a_measured_running_job_s_work_estimate_reads_the_clock() -> None:
    # Its remaining work is estimated from the goodput it trained at times the time since
    # the last round: the next tick's round may split the GPUs otherwise.
    cluster = Cluster.homogeneous(1, 8)
    job = status(
        "m",
        8,
        0.0,
        max_gpus=8,
        batch_size=256,
        allocation=on_node(0, 8),
        observed=measured(8, progress=0.2),
        marks={we.WORK: 1e5, we.UNITS: 10.0, we.PB: 0.0, we.TG: 500.0, we.GOOD: 1.0},
        last_start=0.0,
        run_time=600.0,
    )
    plan = OptimusPolicy().schedule(ClusterView(time=600.0, cluster=cluster, running=(job,)))
    assert plan.marks["m"][we.TG] == 600.0
    assert plan.recheck_at == 0.0


def test_marks_left_for_the_next_round_ask_for_it() -> None:
    # A job reporting step times but no batch limits (rigid, measured): optimus remembers
    # the measurement (marks the next round's view holds, so that round is due), and then
    # has nothing new to remember: only a change of jobs can change the plan.
    cluster = Cluster.homogeneous(1, 4)
    seen = {k: v for k, v in measured(4, progress=0.1).items() if k not in LIMITS}
    job = status("rigid", 4, 0.0, allocation=on_node(0, 4), observed=seen, last_start=0.0)
    policy = OptimusPolicy()
    plan = policy.schedule(ClusterView(time=600.0, cluster=cluster, running=(job,)))
    assert not plan.resizes and not plan.preempts
    assert plan.marks["rigid"][dm.MAXR] == 4.0
    assert plan.recheck_at == 0.0
    kept = replace(job, marks={**job.marks, **plan.marks["rigid"]})
    again = policy.schedule(ClusterView(time=660.0, cluster=cluster, running=(kept,)))
    assert not again.marks and not again.resizes and not again.preempts
    assert again.recheck_at == math.inf
