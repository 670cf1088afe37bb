"""An elastic job measured at one size only, with no gradient statistics and no in-process
batch adaptation (a plain ``danlu.train`` run), explores a bigger size when whole GPUs are
idle and nothing waits: the model's one-point prior predicts a gain no larger than the
``hysteresis`` keep discount, so without exploration it would never measure a second size."""

from __future__ import annotations

from danlu.core.cluster import Allocation, Cluster
from danlu.sched.policies import danlu_model as dm
from danlu.sched.policies.danlu import DanluPolicy
from danlu.sched.policies.work_estimate import WORK
from danlu.sched.view import ClusterView, JobRequest, JobStatus, Plan

CLUSTER = Cluster.homogeneous(1, 2)
NOW = 100.0


def elastic(**stats: float) -> JobStatus:
    """A ``gpus: 1..2`` job running on GPU 0 since t=0, measured there once (the observed
    fields the server reports for a non-adaptive ``danlu.train`` run), plus ``stats``."""
    seen = {
        "init_batch": 16.0,
        "max_batch": 128.0,
        "min_local_bsz": 1.0,
        "max_local_bsz": 128.0,
        "target_batch": 16.0,
        "progress": 0.04,
        "local_bsz": 16.0,
        "accum_steps": 0.0,
        "batch_size": 16.0,
        "num_replicas": 1.0,
        "step_time": 0.2,
        "sync_time": 0.0,
        "num_nodes": 1.0,
        **stats,
    }
    marks = {**dm.remembered({}, seen), WORK: 2600.0}
    request = JobRequest(id="el", submit_time=0.0, gpus=1, max_gpus=2, seq=0)
    return JobStatus(
        request=request,
        allocation=Allocation.whole_gpus([(0, 0)]),
        last_start=0.0,
        run_time=0.0,
        observed=seen,
        marks=marks,
    )


def waiting() -> JobStatus:
    request = JobRequest(id="next", submit_time=50.0, gpus=1, seq=1, expected_duration=600.0)
    return JobStatus(request=request)


def schedule(job: JobStatus, pending: tuple[JobStatus, ...] = ()) -> Plan:
    """One round of the policy with short holds (the job is past them at ``NOW``)."""
    view = ClusterView(time=NOW, cluster=CLUSTER, running=(job,), pending=pending)
    return DanluPolicy(min_hold=5.0, grow_after=5.0, restart_cost=1.0).schedule(view)


def sizes(plan: Plan) -> list[tuple[str, int]]:
    return [(r.job_id, r.allocation.num_gpus) for r in plan.resizes]


def test_a_job_measured_at_one_size_explores_an_idle_gpu() -> None:
    plan = schedule(elastic())
    assert sizes(plan) == [("el", 2)]
    assert not plan.preempts and not plan.starts


def test_no_exploration_when_a_job_waits_for_the_gpu() -> None:
    plan = schedule(elastic(), (waiting(),))
    assert sizes(plan) == []
    assert [(s.job_id, s.allocation.num_gpus) for s in plan.starts] == [("next", 1)]


def test_no_exploration_when_the_restart_does_not_pay() -> None:
    job = elastic()
    view = ClusterView(time=NOW, cluster=CLUSTER, running=(job,), pending=())
    plan = DanluPolicy(min_hold=5.0, grow_after=5.0, restart_cost=100.0).schedule(view)
    assert sizes(plan) == []


def test_a_job_with_gradient_statistics_keeps_the_old_rule() -> None:
    # flat gain (no variance): the same prediction as without statistics, but a job that
    # reports them is left to the hysteresis and spare_gain bars as before
    assert sizes(schedule(elastic(grad_sqr=1.0, grad_var=0.0))) == []


def test_an_adaptive_job_keeps_the_old_rule() -> None:
    assert sizes(schedule(elastic(adaptive=1.0))) == []
