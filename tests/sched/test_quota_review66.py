"""A quota limits its holder's total, not each job's size.

A quota the cluster cannot pass changes nothing (the same plans as no quota), and under a
binding quota the policy may still move GPUs between the holder's jobs: the shrinks and
preemptions of a plan make room for the growths and starts of the same plan."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from danlu.core.cluster import Allocation, Cluster, GpuShare
from danlu.sched.policies.base import Policy
from danlu.sched.quota import Quota, QuotaPolicy, Quotas, held
from danlu.sched.registry import make_policy
from danlu.sched.view import ClusterView, JobRequest, JobStatus, Plan, Preempt, Resize, Start
from danlu.sim.config import SimConfig
from danlu.sim.elastic import load_profiles
from danlu.sim.engine import Simulator
from danlu.sim.metrics import SimResult
from danlu.sim.workload import Workload, load_workload

POLLUX = Path(__file__).resolve().parents[2] / "../shared/data/pollux"
ELASTIC = ("danlu", "pollux", "optimus")
"""The policies that size jobs."""


def _whole(node: int, *gpus: int) -> Allocation:
    return Allocation(tuple(GpuShare(node, g) for g in gpus))


def _running(
    job_id: str, alloc: Allocation, seq: int, project: str = "vision", **kw: object
) -> JobStatus:
    """A running job of ``project`` (``kw``: more request fields, e.g. an elastic range)."""
    fields: dict[str, object] = {"gpus": alloc.num_gpus, **kw}
    request = JobRequest(job_id, float(seq), project=project, seq=seq, **fields)  # type: ignore[arg-type]
    return JobStatus(request, alloc, last_start=0.0)


def _pending(job_id: str, gpus: int, seq: int, project: str = "vision") -> JobStatus:
    return JobStatus(JobRequest(job_id, float(seq), gpus=gpus, project=project, seq=seq))


class _Fixed:
    """A policy that plans ``plan`` whatever it sees, and keeps the views it is handed."""

    name = "fixed"

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.views: list[ClusterView] = []

    def schedule(self, view: ClusterView) -> Plan:
        self.views.append(view)
        return self.plan


class _Watching:
    """A policy that records, each round, the GPUs each running job holds (the view the
    quota layer hands on shows the plans applied so far), and plans as ``inner``."""

    def __init__(self, inner: Policy) -> None:
        self.inner = inner
        self.rounds: list[dict[str, float]] = []

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def sizes_jobs(self) -> bool:
        return bool(getattr(self.inner, "sizes_jobs", False))

    def schedule(self, view: ClusterView) -> Plan:
        self.rounds.append({job.id: held(job.allocation).gpus for job in view.running})
        return self.inner.schedule(view)


# -- the quota layer, one round --------------------------------------------------------


def test_a_quota_the_cluster_cannot_pass_hands_the_view_and_the_plan_through() -> None:
    """The project holds every GPU of the cluster, which its quota allows: its jobs are
    offered their whole ranges and a waiting job of it is not held back."""
    cluster = Cluster.homogeneous(1, 4)
    running = (
        _running("a", _whole(0, 0, 1), 0, max_gpus=4),
        _running("b", _whole(0, 2, 3), 1, max_gpus=4),
    )
    view = ClusterView(time=60.0, cluster=cluster, running=running, pending=(_pending("c", 1, 2),))
    plan = Plan(resizes=(Resize("a", _whole(0, 0)), Resize("b", _whole(0, 1, 2, 3))))
    fixed = _Fixed(plan)
    got = QuotaPolicy(fixed, Quotas({"vision": Quota("project 'vision'", 4)})).schedule(view)
    assert fixed.views == [view]
    assert got is plan


def test_shrinks_in_the_plan_make_room_for_growths_of_the_same_project() -> None:
    """The project is at its quota (6): one job gives up 2 GPUs and another takes them."""
    cluster = Cluster.homogeneous(2, 4)
    running = (
        _running("a", _whole(0, 0, 1, 2, 3), 0, gpus=1, max_gpus=8),
        _running("b", _whole(1, 0, 1), 1, gpus=1, max_gpus=8),
    )
    view = ClusterView(time=60.0, cluster=cluster, running=running)
    plan = Plan(resizes=(Resize("b", _whole(1, 0, 1, 2, 3)), Resize("a", _whole(0, 0, 1))))
    fixed = _Fixed(plan)
    quotas = Quotas({"vision": Quota("project 'vision'", 6)})
    got = QuotaPolicy(fixed, quotas).schedule(view)
    assert sorted(r.job_id for r in got.resizes) == ["a", "b"]
    # each job is offered what the quota leaves when the other one shrinks to its least
    (seen,) = fixed.views
    assert {j.id: j.request.max_gpus for j in seen.running} == {"a": 5, "b": 5}
    # a growth past what the shrinks free is still dropped
    over = Plan(resizes=(Resize("b", _whole(1, 0, 1, 2, 3)), Resize("a", _whole(0, 0, 1, 2))))
    assert [r.job_id for r in QuotaPolicy(_Fixed(over), quotas).schedule(view).resizes] == ["a"]


def test_a_preemption_in_the_plan_makes_room_for_starts_of_the_same_project() -> None:
    """Quota 4, 2 held: each waiting job fits alone; the plan stops the running job and
    starts both, which holds 4 after the plan."""
    cluster = Cluster.homogeneous(1, 4)
    running = (_running("old", _whole(0, 0, 1), 0),)
    pending = (_pending("new1", 2, 1), _pending("new2", 2, 2))
    view = ClusterView(time=60.0, cluster=cluster, running=running, pending=pending)
    plan = Plan(
        preempts=(Preempt("old", "make room"),),
        starts=(Start("new1", _whole(0, 2, 3)), Start("new2", _whole(0, 0, 1))),
    )
    fixed = _Fixed(plan)
    got = QuotaPolicy(fixed, Quotas({"vision": Quota("project 'vision'", 4)})).schedule(view)
    assert [j.id for j in fixed.views[0].pending] == ["new1", "new2"]
    assert got.starts == plan.starts and got.preempts == plan.preempts
    assert got.reason("new2") is None


def test_room_from_a_preemption_that_is_dropped_is_not_counted() -> None:
    """A preemption made only for a start the quotas drop is dropped too: the growth of
    the same project that counted on its GPUs is then dropped as well (to a fixed point)."""
    cluster = Cluster.homogeneous(1, 4)
    running = (
        _running("v1", _whole(0, 0, 1), 0),
        _running("v2", _whole(0, 2), 1, gpus=1, max_gpus=4),
    )
    pending = (_pending("n1", 2, 2, project="nlp"),)
    view = ClusterView(time=60.0, cluster=cluster, running=running, pending=pending)
    plan = Plan(
        preempts=(Preempt("v1", "for n1"),),
        starts=(Start("n1", _whole(0, 0, 1)),),
        resizes=(Resize("v2", _whole(0, 2, 3)),),
    )
    quotas = Quotas({"vision": Quota("project 'vision'", 3), "nlp": Quota("project 'nlp'", 1)})
    got = QuotaPolicy(_Fixed(plan), quotas).schedule(view)
    assert got.starts == () and got.preempts == () and got.resizes == ()
    assert "project 'nlp' GPU quota" in (got.reason("n1") or "")
    assert got.recheck_at == 0.0


def test_a_plan_past_the_quota_is_asked_again_within_shares_of_it() -> None:
    """At its quota (4), the project's plan grows ``a`` to 4 and shrinks ``b`` to 1 (5 in
    all): the policy is asked again with ``b`` at what the plan kept of it and ``a`` given
    the GPU ``b`` gave up; the second plan moves that GPU from ``b`` to ``a``."""
    cluster = Cluster.homogeneous(1, 8)
    running = (
        _running("a", _whole(0, 0, 1), 0, gpus=1, max_gpus=8),
        _running("b", _whole(0, 2, 3), 1, gpus=1, max_gpus=8),
    )
    view = ClusterView(time=60.0, cluster=cluster, running=running)
    first = Plan(resizes=(Resize("a", _whole(0, 0, 1, 4, 5)), Resize("b", _whole(0, 2))))
    second = Plan(resizes=(Resize("a", _whole(0, 0, 1, 4)), Resize("b", _whole(0, 2))))

    class _Twice:
        name = "twice"

        def __init__(self) -> None:
            self.views: list[ClusterView] = []

        def schedule(self, view: ClusterView) -> Plan:
            self.views.append(view)
            return (first, second)[len(self.views) - 1]

    twice = _Twice()
    got = QuotaPolicy(twice, Quotas({"vision": Quota("project 'vision'", 4)})).schedule(view)
    assert [{j.id: j.request.max_gpus for j in v.running} for v in twice.views] == [
        {"a": 3, "b": 3},  # 4 less the other's least
        {"a": 3, "b": 1},  # b: what the plan kept; a: its 2 and the 1 b gave up
    ]
    assert got.resizes == second.resizes


# -- whole runs of the policies that size jobs ----------------------------------------

needs_pollux = pytest.mark.skipif(
    not (POLLUX / "traces").is_dir(),
    reason=f"Pollux artifact data not found at {POLLUX.resolve()} (../shared/data is absent)",
)


def _run(policy: Policy, quotas: Quotas, jobs: int = 10) -> SimResult:
    """The first ``jobs`` jobs of a Pollux workload (all of project ``default``) on 3 nodes
    of 4 GPUs."""
    full = load_workload(POLLUX / "workloads" / "workload-3.csv")
    workload: Workload = replace(full, jobs=full.jobs[:jobs])
    profiles = load_profiles(POLLUX / "traces")
    sim = Simulator(Cluster.homogeneous(3, 4), policy, workload, SimConfig(quotas=quotas), profiles)
    return sim.run()


def _policy(name: str) -> Policy:
    options = {"population": 8, "generations": 4} if name == "pollux" else {}
    return make_policy(name, **options)


@needs_pollux
@pytest.mark.parametrize("name", ELASTIC)
@pytest.mark.parametrize("limit", [12.0, 1000.0], ids=["cluster-size", "far-above"])
def test_a_quota_the_cluster_cannot_pass_leaves_the_run_unchanged(name: str, limit: float) -> None:
    free = _run(_policy(name), Quotas())
    limited = _run(_policy(name), Quotas({"default": Quota("project 'default'", limit)}))
    assert limited.to_json() == free.to_json()


@needs_pollux
@pytest.mark.parametrize("name", ELASTIC)
def test_a_binding_quota_holds_the_total_and_gpus_still_move_between_its_jobs(name: str) -> None:
    quota = 6.0
    watching = _Watching(_policy(name))
    result = _run(watching, Quotas({"default": Quota("project 'default'", quota)}))
    assert not result.unfinished and not result.rejected and len(result.jobs) == 10
    totals = [sum(gpus.values()) for gpus in watching.rounds]
    assert max(totals) <= quota + 1e-9  # every round, after the plans applied so far
    assert max(totals) == quota  # it binds
    # the policy still sizes the project's jobs: several change size while they run (with
    # each job held to its size once the project reached its quota, none did)
    assert sum(1 for job in result.jobs if job.resizes) >= 3
    grown = [
        job
        for before, after in zip(watching.rounds, watching.rounds[1:], strict=False)
        for job, gpus in after.items()
        if gpus > before.get(job, gpus)
    ]
    assert grown
