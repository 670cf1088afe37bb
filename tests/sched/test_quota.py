"""Quotas as value types (``danlu.sched.quota``) and :class:`QuotaPolicy` around policies."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from danlu.core.cluster import Allocation, Cluster, GpuShare
from danlu.core.errors import ConfigError
from danlu.core.units import GiB
from danlu.sched.quota import (
    Quota,
    QuotaPolicy,
    Quotas,
    Usage,
    excess,
    held,
    minimum_usage,
    room,
    within_room,
)
from danlu.sched.registry import make_policy
from danlu.sched.view import ClusterView, JobRequest, JobStatus, Plan, Preempt, Resize, Start

VISION = Quota("project 'vision'", gpus=4)


def _whole(node: int, *gpus: int) -> Allocation:
    return Allocation(tuple(GpuShare(node, g) for g in gpus))


def _pending(job_id: str, gpus: int, seq: int, project: str = "vision", **kw: object) -> JobStatus:
    request = JobRequest(job_id, float(seq), gpus=gpus, project=project, seq=seq, **kw)  # type: ignore[arg-type]
    return JobStatus(request)


def _running(
    job_id: str, alloc: Allocation, seq: int, project: str = "vision", **kw: object
) -> JobStatus:
    request = JobRequest(  # type: ignore[arg-type]
        job_id, float(seq), gpus=alloc.num_gpus, project=project, seq=seq, **kw
    )
    return JobStatus(request, alloc, last_start=0.0)


class _Seeing:
    """A policy that keeps the views it is handed (and plans as ``inner``)."""

    def __init__(self, inner_name: str = "fifo") -> None:
        self.inner = make_policy(inner_name)
        self.views: list[ClusterView] = []

    @property
    def name(self) -> str:
        return self.inner.name

    def schedule(self, view: ClusterView) -> Plan:
        self.views.append(view)
        return self.inner.schedule(view)


def test_excess_names_the_holder_the_use_and_the_limit() -> None:
    assert excess(VISION, Usage(2.0), Usage(2.0)) is None
    assert excess(VISION, Usage(2.0), Usage(3.0)) == (
        "project 'vision' GPU quota: 2 in use + 3 asked > 4"
    )
    memory = Quota("user 'ana'", gpu_memory=40 * GiB)
    assert excess(memory, Usage(1.0, 30 * GiB), Usage(0.5, 10 * GiB)) is None
    why = excess(memory, Usage(1.0, 30 * GiB), Usage(0.5, 11 * GiB))
    assert why is not None and why.startswith("user 'ana' GPU memory quota:")
    # eight quarter-GPU shares fit a quota of two GPUs despite float sums
    assert excess(Quota("p", gpus=2), Usage(0.25 * 7), Usage(0.25)) is None


def test_room_counts_whole_gpus_left_by_either_limit() -> None:
    assert room(VISION, Usage(1.5), 0) == 2
    assert room(VISION, Usage(5.0), 0) == -1
    both = Quota("p", gpus=8, gpu_memory=100 * GiB)
    assert room(both, Usage(2.0, 20 * GiB), 40 * GiB) == 2  # memory binds
    assert room(Quota("p"), Usage(3.0), 0) == math.inf


@pytest.mark.parametrize(("gpus", "memory"), [(-1.0, None), (math.inf, None), (None, -5)])
def test_a_quota_below_zero_or_infinite_is_refused(gpus: float | None, memory: int | None) -> None:
    with pytest.raises(ConfigError, match="project 'x'"):
        Quota("project 'x'", gpus, memory)


def test_held_and_minimum_usage_count_parts_of_gpus() -> None:
    cluster = Cluster.homogeneous(1, 4)
    per_gpu = cluster.nodes[0].gpu_type.memory
    share = Allocation((GpuShare(0, 1, milli=250, memory=8 * GiB),))
    assert held(share) == Usage(0.25, 8 * GiB)
    assert held(_whole(0, 0, 1)).gpus == 2.0
    whole = JobRequest("w", 0.0, gpus=2)
    assert minimum_usage(whole, cluster) == Usage(2.0, 2 * per_gpu)
    part = JobRequest("s", 0.0, gpus=1, gpu_milli=500)
    assert minimum_usage(part, cluster).gpus == 0.5


def test_within_room_cuts_an_elastic_range_but_never_below_its_least() -> None:
    job = _running("e", _whole(0, 0, 1), 0, max_gpus=16)
    assert within_room(job, 2).request.max_gpus == 4
    assert within_room(job, -3).request.max_gpus == 2  # its least
    assert within_room(job, math.inf) is job


def test_a_start_past_the_quota_is_dropped_and_the_next_round_gives_the_gpus_away() -> None:
    cluster = Cluster.homogeneous(2, 4)
    quotas = Quotas({"vision": VISION})
    policy = QuotaPolicy(make_policy("fifo"), quotas)
    jobs = (_pending("a1", 4, 0), _pending("a2", 4, 1), _pending("b1", 4, 2, project="nlp"))
    first = policy.schedule(ClusterView(time=60.0, cluster=cluster, pending=jobs))
    # fifo alone starts a1 and a2 (8 GPUs); a2 would take vision to 8 > 4 (a1's 4 in use
    # once a1 starts, as the server's plan recording counts it, and a2's own 4 asked)
    assert [s.job_id for s in first.starts] == ["a1"]
    assert (
        first.reason("a2")
        == "waiting for quota: project 'vision' GPU quota: 4 in use + 4 asked > 4"
    )
    assert first.recheck_at == 0.0  # the freed GPUs go to someone next round
    a1 = first.starts[0]
    running = (_running("a1", a1.allocation, 0),)
    second = policy.schedule(
        ClusterView(time=120.0, cluster=cluster, running=running, pending=jobs[1:])
    )
    assert [s.job_id for s in second.starts] == ["b1"]
    assert second.reason("a2") == (
        "waiting for quota: project 'vision' GPU quota: 4 in use + 4 asked > 4"
    )


def test_a_user_quota_counts_the_users_jobs_in_every_project() -> None:
    cluster = Cluster.homogeneous(2, 4)
    quotas = Quotas(users={"ana": Quota("user 'ana'", gpus=4)})
    seeing = _Seeing()
    policy = QuotaPolicy(seeing, quotas)
    running = (_running("r", _whole(0, 0, 1, 2), 0, project="nlp", user="ana"),)
    pending = (
        _pending("p1", 2, 1, project="vision", user="ana"),
        _pending("p2", 1, 2, project="vision", user="ana"),
        _pending("p3", 2, 3, project="vision", user="bo"),
    )
    plan = policy.schedule(
        ClusterView(time=60.0, cluster=cluster, running=running, pending=pending)
    )
    assert [j.id for j in seeing.views[0].pending] == ["p2", "p3"]  # p1: 3 + 2 > 4
    assert sorted(s.job_id for s in plan.starts) == ["p2", "p3"]
    assert "user 'ana' GPU quota: 3 in use + 2 asked > 4" in (plan.reason("p1") or "")


def test_elastic_jobs_are_offered_only_what_the_quota_leaves() -> None:
    cluster = Cluster.homogeneous(4, 4)
    quotas = Quotas({"vision": Quota("project 'vision'", gpus=6)})
    seeing = _Seeing()
    running = (_running("e", _whole(0, 0, 1), 0, max_gpus=16),)
    pending = (_pending("w", 1, 1, max_gpus=8), _pending("n", 2, 2, project="nlp", max_gpus=8))
    QuotaPolicy(seeing, quotas).schedule(
        ClusterView(time=60.0, cluster=cluster, running=running, pending=pending)
    )
    view = seeing.views[0]
    assert view.running[0].request.max_gpus == 6  # 2 held + 4 left
    by_id = {j.id: j.request.max_gpus for j in view.pending}
    assert by_id == {"w": 4, "n": 8}  # the other project's range is untouched


def test_a_resize_past_the_quota_is_dropped() -> None:
    cluster = Cluster.homogeneous(2, 4)
    grown = _whole(0, 0, 1, 2, 3)

    class _Grow:
        name = "grow"

        def schedule(self, view: ClusterView) -> Plan:
            return Plan(resizes=(Resize("e", grown),))

    job = _running("e", _whole(0, 0, 1), 0, max_gpus=8)
    view = ClusterView(time=60.0, cluster=cluster, running=(job,))
    assert QuotaPolicy(_Grow(), Quotas({"vision": Quota("v", gpus=3)})).schedule(view).resizes == ()
    kept = QuotaPolicy(_Grow(), Quotas({"vision": Quota("v", gpus=4)})).schedule(view)
    assert [r.job_id for r in kept.resizes] == ["e"]


def test_no_quota_hands_the_view_through_unchanged() -> None:
    seeing = _Seeing()
    view = ClusterView(time=1.0, cluster=Cluster.homogeneous(1, 4), pending=(_pending("a", 1, 0),))
    QuotaPolicy(seeing, Quotas()).schedule(view)
    assert seeing.views[0] is view
    assert not Quotas() and Quotas({"x": VISION})


def test_the_wrapper_reports_what_the_simulator_asks_of_its_policy() -> None:
    quotas = Quotas({"vision": VISION})
    assert QuotaPolicy(make_policy("pollux"), quotas).sizes_jobs
    assert not QuotaPolicy(make_policy("fifo"), quotas).sizes_jobs
    fair = QuotaPolicy(make_policy("fair-share", half_life=3600.0), quotas)
    assert fair.usage_half_life == 3600.0 and fair.name == "fair-share"


def test_never_starts_names_the_quota_a_job_passes_alone() -> None:
    cluster = Cluster.homogeneous(2, 4)
    quotas = Quotas({"vision": VISION}, {"ana": Quota("user 'ana'", gpus=2)})
    assert quotas.never_starts(JobRequest("a", 0.0, gpus=4, project="vision"), cluster) is None
    wide = JobRequest("b", 0.0, gpus=5, project="vision")
    assert "project 'vision' GPU quota" in (quotas.never_starts(wide, cluster) or "")
    mine = JobRequest("c", 0.0, gpus=3, project="nlp", user="ana")
    assert "user 'ana' GPU quota" in (quotas.never_starts(mine, cluster) or "")


def test_a_dropped_resize_keeps_its_gpus_so_moves_onto_them_are_dropped_too() -> None:
    cluster = Cluster.homogeneous(1, 4)
    mover = _running("m", _whole(0, 0, 1), 0, max_gpus=4)
    # the plan grows m from GPUs 0-1 to 1-3 and starts another project's job on GPU 0
    moved = Allocation((GpuShare(0, 1), GpuShare(0, 2), GpuShare(0, 3)))

    class _Swap:
        name = "swap"

        def schedule(self, view: ClusterView) -> Plan:
            return Plan(
                resizes=(Resize("m", moved),),
                starts=(Start("n", _whole(0, 0)),),
            )

    view = ClusterView(
        time=60.0, cluster=cluster, running=(mover,), pending=(_pending("n", 1, 1, "nlp"),)
    )
    quotas = Quotas({"vision": Quota("project 'vision'", gpus=2)})
    plan = QuotaPolicy(_Swap(), quotas).schedule(view)
    assert plan.resizes == () and plan.starts == ()  # n's GPU 0 stays m's
    assert "a quota stopped" in (plan.reason("n") or "")
    roomy = QuotaPolicy(_Swap(), Quotas({"vision": Quota("project 'vision'", gpus=3)}))
    kept = roomy.schedule(view)
    assert [r.job_id for r in kept.resizes] == ["m"] and [s.job_id for s in kept.starts] == ["n"]


class _Sizing:
    """A policy that sizes jobs (``sizes_jobs``) and keeps the views it is handed."""

    name = "sizing"
    sizes_jobs = True

    def __init__(self) -> None:
        self.views: list[ClusterView] = []

    def schedule(self, view: ClusterView) -> Plan:
        self.views.append(view)
        return Plan()


LIMITS = {"init_batch": 128.0, "max_batch": 4096.0, "min_local_bsz": 32.0, "max_local_bsz": 256.0}
"""Batch limits a job reports: a policy that sizes jobs may choose its GPU count."""


def _sizeable(job: JobStatus) -> JobStatus:
    return replace(job, observed=LIMITS)


def test_a_policy_that_sizes_jobs_is_handed_one_count_requests_cut_to_the_quota() -> None:
    cluster = Cluster.homogeneous(4, 8)
    quotas = Quotas({"vision": Quota("project 'vision'", gpus=12)})
    running = (_sizeable(_running("r", _whole(0, 0, 1, 2, 3), 0)),)  # vision: 4 of 12
    pending = (
        _sizeable(_pending("wide", 16, 1)),
        _sizeable(_pending("small", 2, 2)),
        _pending("free", 16, 3, "nlp"),
    )
    sizing = _Sizing()
    plan = QuotaPolicy(sizing, quotas).schedule(
        ClusterView(time=60.0, cluster=cluster, running=running, pending=pending)
    )
    (view,) = sizing.views
    ranges = {j.id: (j.request.gpus, j.request.max_gpus) for j in (*view.running, *view.pending)}
    # 8 GPUs left: a 16-GPU request may start on 1..8 under such a policy, not wait for good
    assert ranges == {"r": (1, 12), "wide": (1, 8), "small": (1, 8), "free": (16, 0)}
    assert plan.reason("wide") is None
    # a policy that runs requests as they are: the 16-GPU job waits, and alone it never fits
    seeing = _Seeing()
    waits = QuotaPolicy(seeing, quotas).schedule(
        ClusterView(time=60.0, cluster=cluster, running=running, pending=pending)
    )
    assert "4 in use + 16 asked > 12" in (waits.reason("wide") or "")
    assert quotas.never_starts(pending[0].request, cluster) is not None
    assert quotas.never_starts(pending[0].request, cluster, sized=True) is None


def test_a_policy_that_sizes_jobs_never_cuts_a_rigid_job() -> None:
    """A job that reports no batch limits runs on exactly its request under danlu and
    pollux: a quota never hands it to them cut (they would start it on fewer GPUs than it
    asked for, or shrink it while it runs); it waits for the quota instead."""
    cluster = Cluster.homogeneous(1, 8)
    quotas = Quotas({"vision": Quota("project 'vision'", gpus=2)})
    rigid = _pending("rigid", 4, 1)
    running = (_running("r", _whole(0, 0, 1, 2), 0),)  # over the quota already
    sizing = _Sizing()
    plan = QuotaPolicy(sizing, quotas).schedule(
        ClusterView(time=60.0, cluster=cluster, running=running, pending=(rigid,))
    )
    (view,) = sizing.views
    assert [j.request for j in view.running] == [running[0].request]  # not cut to a range
    assert view.pending == ()  # 4 asked > 2: it waits for the quota
    assert "waiting for quota" in (plan.reason("rigid") or "")
    for name in ("danlu", "pollux"):
        alone = ClusterView(time=100.0, cluster=cluster, pending=(rigid,))
        plan = QuotaPolicy(make_policy(name), quotas).schedule(alone)
        assert plan.starts == (), name
        assert "0 in use + 4 asked > 2" in (plan.reason("rigid") or ""), name
        # with its batch limits it may be sized: it starts within the quota
        sized = QuotaPolicy(make_policy(name), quotas).schedule(
            ClusterView(time=100.0, cluster=cluster, pending=(_sizeable(rigid),))
        )
        assert [s.allocation.num_gpus <= 2 for s in sized.starts] == [True], name
    assert quotas.never_starts(rigid.request, cluster) is not None


def test_a_preemption_made_only_for_a_start_over_quota_is_dropped() -> None:
    """A start dropped for the quota takes its preemption with it (the victim keeps
    running, its GPU is not left idle); the plan is due again at once."""
    cluster = Cluster.homogeneous(1, 2)
    cap = cluster.nodes[0].gpu_type.memory
    low1 = _running("low1", Allocation.whole_gpus([(0, 0)], cap), 0, "q", priority=0)
    low2 = _running("low2", Allocation.whole_gpus([(0, 1)], cap), 1, "q", priority=0)
    a, b = _pending("a", 1, 2, "p", priority=10), _pending("b", 1, 3, "p", priority=10)
    view = ClusterView(100.0, cluster, running=(low1, low2), pending=(a, b))
    quotas = Quotas({"p": Quota("project 'p'", gpus=1)})
    for name in ("priority", "value-density"):
        inner = make_policy(name).schedule(view)  # both start, both low jobs preempted
        assert sorted(p.job_id for p in inner.preempts) == ["low1", "low2"], name
        plan = QuotaPolicy(make_policy(name), quotas).schedule(view)
        (start,) = plan.starts
        gpus = {(s.node, s.gpu) for s in start.allocation.shares}
        freed = {
            (s.node, s.gpu)
            for j in view.running
            if j.id in {p.job_id for p in plan.preempts}
            for s in j.allocation.shares
        }
        assert freed == gpus, name  # only the kept start's victim is stopped
        assert "waiting for quota" in (plan.reason("a" if start.job_id == "b" else "b") or "")
        assert plan.recheck_at == 0.0


def test_a_preemption_of_the_policys_own_stays_when_a_start_is_dropped() -> None:
    """A preemption whose GPUs no move of the plan takes is the policy's own choice: it
    stays when a quota drops a start."""
    cluster = Cluster.homogeneous(1, 2)
    running = (_running("victim", _whole(0, 1), 0, "q"),)
    view = ClusterView(time=60.0, cluster=cluster, running=running, pending=(_pending("n", 1, 1),))

    class _Both:
        name = "both"

        def schedule(self, view: ClusterView) -> Plan:
            return Plan(
                starts=(Start("n", _whole(0, 0)),),
                preempts=(Preempt("victim", "its own reason"),),
            )

    plan = QuotaPolicy(_Both(), Quotas({"vision": Quota("project 'vision'", gpus=0)})).schedule(
        view
    )
    assert plan.starts == () and [p.job_id for p in plan.preempts] == ["victim"]
