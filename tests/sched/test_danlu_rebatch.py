"""Batch-only changes in the danlu policy: a running job whose best batch on its GPUs moved
is rebatched in place (no Resize, no restart priced, allocation kept); jobs that adapt their
batch themselves are started adaptive and never moved only to change their batch."""

from __future__ import annotations

from typing import Any

from pytest import approx

from danlu.core.cluster import Allocation, Cluster
from danlu.sched.policies import danlu_model as dm
from danlu.sched.policies.danlu import DanluPolicy
from danlu.sched.policies.danlu_model import observed_goodput
from danlu.sched.policies.danlu_place import BATCH, MOVES
from danlu.sched.view import ClusterView, JobRequest, JobStatus, Plan, Rebatch

LIMITS = {"init_batch": 128.0, "max_batch": 4096.0, "min_local_bsz": 32.0, "max_local_bsz": 256.0}


def running(cluster: Cluster, gpus: int, observed: dict[str, float], **kw: Any) -> JobStatus:
    marks = dm.remembered({}, observed)
    marks.update(kw.pop("marks", {}))
    alloc = Allocation.whole_gpus([(0, i) for i in range(gpus)])
    request = JobRequest(id="e", submit_time=0.0, gpus=gpus, seq=0)
    return JobStatus(
        request=request, allocation=alloc, last_start=0.0, observed=observed, marks=marks, **kw
    )


def seen(batch: int, *, adaptive: bool, progress: float = 0.2) -> dict[str, float]:
    """Measured on 4 GPUs of one node at micro-batch ``batch / 4``; gradient noise is high
    (var >> sqr), so bigger batches pay off and the batch of 128 is far from the best."""
    out = {
        **LIMITS,
        "target_batch": 128.0,
        "progress": progress,
        "step_time": 0.06 + 0.0004 * batch / 4,
        "sync_time": 0.05,
        "local_bsz": batch / 4,
        "accum_steps": 0.0,
        "batch_size": float(batch),
        "num_replicas": 4.0,
        "num_nodes": 1.0,
        "grad_sqr": 1.0,
        "grad_var": 200.0,
    }
    if adaptive:
        out["adaptive"] = 1.0
    return out


def plan_for(job: JobStatus, cluster: Cluster, **kw: Any) -> Plan:
    policy = DanluPolicy(min_hold=0.0, **kw)
    return policy.schedule(ClusterView(time=600.0, cluster=cluster, running=(job,)))


def test_best_batch_moved_gives_a_rebatch_not_a_resize() -> None:
    cluster = Cluster.homogeneous(1, 4)  # no other size to go to: only the batch can change
    job = running(cluster, 4, seen(128, adaptive=False))
    plan = plan_for(job, cluster)
    assert not plan.resizes and not plan.preempts and not plan.starts
    assert len(plan.rebatches) == 1
    rebatch = plan.rebatches[0]
    assert isinstance(rebatch, Rebatch) and rebatch.job_id == "e"
    assert rebatch.batch_size > 128 and not rebatch.adaptive
    note = plan.marks["e"]
    assert note[BATCH] == rebatch.batch_size
    assert MOVES not in note  # a rebatch is not a move: the job's hold is not lengthened


def test_rebatch_is_not_charged_a_restart() -> None:
    cluster = Cluster.homogeneous(1, 4)
    job = running(cluster, 4, seen(128, adaptive=False))
    # a restart cost far above the remaining time would forbid any change that restarts
    plan = plan_for(job, cluster, restart_cost=1e7)
    assert [r.job_id for r in plan.rebatches] == ["e"]


def test_no_rebatch_at_the_best_batch() -> None:
    cluster = Cluster.homogeneous(1, 4)
    first = plan_for(running(cluster, 4, seen(128, adaptive=False)), cluster)
    best = first.rebatches[0].batch_size
    again = plan_for(running(cluster, 4, seen(best, adaptive=False)), cluster)
    assert not again.rebatches and not again.resizes


def test_adaptive_job_changes_its_batch_itself() -> None:
    cluster = Cluster.homogeneous(1, 4)
    plan = plan_for(running(cluster, 4, seen(128, adaptive=True)), cluster)
    assert not plan.rebatches and not plan.resizes and not plan.preempts
    # with adaptation switched off in the policy, the policy changes the batch (in place)
    off = plan_for(running(cluster, 4, seen(128, adaptive=True)), cluster, adaptive_jobs=False)
    assert [r.adaptive for r in off.rebatches] == [False]


def test_starts_and_resizes_carry_the_adaptive_flag() -> None:
    cluster = Cluster.homogeneous(1, 8)
    for adaptive in (True, False):
        limits = {**LIMITS, "target_batch": 128.0, "progress": 0.0}
        if adaptive:
            limits["adaptive"] = 1.0
        pending = JobStatus(
            request=JobRequest(id="p", submit_time=0.0, gpus=2, seq=0), observed=limits
        )
        plan = DanluPolicy().schedule(ClusterView(time=60.0, cluster=cluster, pending=(pending,)))
        assert [s.adaptive for s in plan.starts] == [adaptive]


def test_work_estimate_integrates_goodput_over_trained_time() -> None:
    """Total work = goodput integrated over the time trained / progress: exact at a constant
    goodput, across a round, a rebatch-like goodput change and a restart (left out)."""
    policy = DanluPolicy()
    total = 5000.0
    marks: dict[str, float] = {}

    def status(progress: float, batch: int, last_start: float) -> JobStatus:
        observed = {**seen(batch, adaptive=True), "progress": progress}
        alloc = Allocation.whole_gpus([(0, i) for i in range(4)])
        request = JobRequest(id="w", submit_time=0.0, gpus=4, seq=0)
        return JobStatus(
            request=request,
            allocation=alloc,
            last_start=last_start,
            observed=observed,
            marks=dict(marks),
            run_time=0.0 if last_start == 0.0 else 100.0,
        )

    good = observed_goodput(seen(256, adaptive=True))
    better = observed_goodput(seen(512, adaptive=True))
    progress = good * (90.0 - 30.0) / total  # trained 60 s after the 30 s restart
    update: dict[str, float] = {}
    assert policy._work(status(progress, 256, 0.0), marks, 90.0, update) == approx(total)
    marks.update(update)
    progress += 0.5 * (good + better) * 60.0 / total  # the batch changed in between
    update = {}
    assert policy._work(status(progress, 512, 0.0), marks, 150.0, update) == approx(total)
    marks.update(update)
    progress += better * (300.0 - 230.0) / total  # resized at 200: trained from 230
    update = {}
    assert policy._work(status(progress, 512, 200.0), marks, 300.0, update) == approx(total)
