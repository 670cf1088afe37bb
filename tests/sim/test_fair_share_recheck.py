"""Fair share's ``recheck_at`` lets the simulator skip rounds: skipping must never change a
decision. With ``half_life`` the projects' recent usage decays while nothing arrives or ends,
so without backfill the project whose blocked job holds the queue can be overtaken by one
whose next job fits: the plan must be due again by then. With backfill every waiting job was
tried against what is free, and decay cannot make room, so nothing is due."""

from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass
from pathlib import Path

import pytest

from danlu.core.cluster import Allocation, Cluster
from danlu.sched.policies.base import Policy
from danlu.sched.policies.fair_share import FairSharePolicy
from danlu.sched.project_usage import ProjectShare, stretch_weight
from danlu.sched.registry import make_policy
from danlu.sched.view import ClusterView, JobRequest, JobStatus, Plan
from danlu.sim.config import SimConfig
from danlu.sim.engine import Simulator
from danlu.sim.metrics import SimResult
from danlu.sim.workload import Workload, load_workload, synthetic_workload

# B held all 4 GPUs until 3060; A and B then hold 2 and 1. A's a_big (2 GPUs) blocks the
# queue (A has the lower standing) until B's past usage has decayed below A's growing one;
# then B's b_small takes the free GPU, long before a_long and b_long end.
HAND = (
    "name,submit_time,gpus,duration,project\n"
    "b_hist,0,4,3000,B\n"
    "a_long,2990,2,100000,A\n"
    "b_long,2995,1,100000,B\n"
    "a_big,3100,2,100,A\n"
    "b_small,3200,1,100,B\n"
)


@dataclass
class AskedEveryRound:
    """The same policy, but the engine is told to ask it every round (``recheck_at`` 0).
    It reads the same recent usage: the engine keeps it for a policy with a
    ``usage_half_life``, which this wrapper passes on."""

    inner: FairSharePolicy

    @property
    def name(self) -> str:
        """The wrapped policy's name."""
        return self.inner.name

    @property
    def usage_half_life(self) -> float:
        """The wrapped policy's half-life of recent usage."""
        return self.inner.usage_half_life

    def schedule(self, view: ClusterView) -> Plan:
        """The wrapped policy's plan, due again at the next round."""
        return dataclasses.replace(self.inner.schedule(view), recheck_at=0.0)


def _run(
    workload: Workload, policy: Policy, cluster: Cluster, shares: dict[str, float] | None = None
) -> SimResult:
    config = SimConfig(interval=60.0, restart_cost=0, project_shares=shares or {})
    return Simulator(cluster, policy, workload, config).run()


def _times(result: SimResult) -> dict[str, tuple[float | None, float | None, int]]:
    return {r.id: (r.start_time, r.end_time, r.preemptions) for r in result.jobs}


def _fair_share(**options: object) -> FairSharePolicy:
    policy = make_policy("fair-share", **options)
    assert isinstance(policy, FairSharePolicy)
    return policy


def test_decay_lets_a_fitting_job_pass_the_blocked_one(tmp_path: Path) -> None:
    path = tmp_path / "fs.csv"
    path.write_text(HAND)
    workload = load_workload(path)
    cluster = Cluster.homogeneous(1, 4)
    options = {"half_life": 600.0, "backfill": False}
    skipping = _run(workload, _fair_share(**options), cluster)
    every = _run(workload, AskedEveryRound(_fair_share(**options)), cluster)
    assert _times(every) == {
        "b_hist": (60.0, 3060.0, 0),
        "a_long": (3060.0, 103060.0, 0),
        "b_long": (3060.0, 103060.0, 0),
        "b_small": (3840.0, 3940.0, 0),
        "a_big": (103080.0, 103180.0, 0),
    }
    assert _times(skipping) == _times(every)
    assert skipping.summary()["rounds"] < every.summary()["rounds"]  # rounds were skipped


def _usage(
    start_recent: float, holding: float, since: float, now: float, half_life: float
) -> float:
    """A project's recent usage at ``now``: ``start_recent`` at ``since``, decayed, plus
    ``holding`` milli-GPUs held from ``since`` on (the definition in project_usage)."""
    decay = math.exp2(-(now - since) / half_life)
    return start_recent * decay + holding * stretch_weight(since, now, now, half_life)


def _blocked_view(
    now: float, recent_a: float, recent_b: float, weight_b: float = 1.0
) -> ClusterView:
    """1 node of 4 GPUs: A runs 2, B 1; A's a_big (2 GPUs) and B's b_small (1) wait."""
    a_run = JobStatus(
        JobRequest("a_run", 0.0, 2, project="A", seq=0),
        Allocation.whole_gpus([(0, 0), (0, 1)]),
        last_start=0.0,
    )
    b_run = JobStatus(
        JobRequest("b_run", 0.0, 1, project="B", seq=1),
        Allocation.whole_gpus([(0, 2)]),
        last_start=0.0,
    )
    a_big = JobStatus(JobRequest("a_big", 10.0, 2, project="A", seq=2))
    b_small = JobStatus(JobRequest("b_small", 20.0, 1, project="B", seq=3))
    projects = {"A": ProjectShare(1.0, recent_a), "B": ProjectShare(weight_b, recent_b)}
    return ClusterView(
        now,
        Cluster.homogeneous(1, 4),
        running=(a_run, b_run),
        pending=(a_big, b_small),
        projects=projects,
    )


@pytest.mark.parametrize(
    ("recent_b", "weight_b", "crossing"),
    [
        # A: 2000 + (2000 - 2000x); B: 1000 + (1000 + 2000x); equal at x = 1/2
        (3000.0, 1.0, 1600.0),
        # B: (2000 + 4000x) / 2 against A's 4000 - 2000x: x = 3/4
        (5000.0, 2.0, 1000.0 + 600.0 * math.log2(4.0 / 3.0)),
    ],
    ids=["equal-weights", "b-weight-2"],
)
def test_the_plan_rechecks_when_the_blocked_project_is_overtaken(
    recent_b: float, weight_b: float, crossing: float
) -> None:
    policy = FairSharePolicy(half_life=600.0, backfill=False)
    plan = policy.schedule(_blocked_view(1000.0, 0.0, recent_b, weight_b))
    assert plan.starts == () and plan.has_waiting
    assert plan.recheck_at == pytest.approx(crossing)
    assert plan.recheck_at <= crossing  # never late, whatever the rounding
    # the usage as project_usage defines it, a second either side of the crossing
    for at, starts in ((crossing - 1.0, []), (crossing + 1.0, ["b_small"])):
        recent_a = _usage(0.0, 2000.0, 1000.0, at, 600.0)
        recent = _usage(recent_b, 1000.0, 1000.0, at, 600.0)
        later = policy.schedule(_blocked_view(at, recent_a, recent, weight_b))
        assert [s.job_id for s in later.starts] == starts


def test_nothing_is_due_when_decay_changes_no_decision() -> None:
    view = _blocked_view(1000.0, 0.0, 3000.0)
    # no history: the standings stay as they are
    assert FairSharePolicy(backfill=False).schedule(view).recheck_at == math.inf
    # backfill: b_small starts now, and a_big cannot fit until a job ends
    plan = FairSharePolicy(half_life=600.0).schedule(view)
    assert [s.job_id for s in plan.starts] == ["b_small"] and plan.has_waiting
    assert plan.recheck_at == math.inf
    # B holds more than A for ever after: it never overtakes A (A's usage only decays)
    held_b = dataclasses.replace(
        view,
        running=(view.running[1],),
        projects={"A": ProjectShare(1.0, 1000.0), "B": ProjectShare(1.0, 3000.0)},
    )
    wide = JobStatus(JobRequest("a_big", 10.0, 4, project="A", seq=2))
    held_b = dataclasses.replace(held_b, pending=(wide, view.pending[1]))
    plan = FairSharePolicy(half_life=600.0, backfill=False).schedule(held_b)
    assert plan.starts == () and plan.has_waiting
    assert plan.recheck_at == math.inf


def _with_projects(workload: Workload, seed: int, count: int = 3) -> Workload:
    """``workload`` with each job in one of ``count`` projects, drawn with ``seed``."""
    rng = random.Random(seed)
    jobs = tuple(
        dataclasses.replace(
            job, request=dataclasses.replace(job.request, project=f"p{rng.randrange(count)}")
        )
        for job in workload.jobs
    )
    return dataclasses.replace(workload, jobs=jobs)


@pytest.mark.parametrize(
    ("seed", "options", "shares"),
    [
        (0, {"half_life": 600.0, "backfill": False}, {}),
        (1, {"half_life": 3600.0, "backfill": False}, {}),
        (2, {"half_life": 600.0, "backfill": False}, {"p0": 2.0}),
        (1, {"half_life": 3600.0, "backfill": False, "users": True}, {"p1": 0.5}),
        (2, {"half_life": 600.0}, {"p0": 2.0}),
        (0, {"half_life": 600.0, "backfill": False, "reclaim": True}, {}),
    ],
    ids=["no-backfill", "no-backfill-long", "weights", "users", "backfill", "reclaim"],
)
def test_skipped_rounds_never_change_a_decision(
    seed: int, options: dict[str, object], shares: dict[str, float]
) -> None:
    workload = _with_projects(synthetic_workload(jobs=80, seed=seed, hours=3.0), seed)
    cluster = Cluster.homogeneous(2, 4)
    skipping = _run(workload, _fair_share(**options), cluster, shares)
    every = _run(workload, AskedEveryRound(_fair_share(**options)), cluster, shares)
    assert _times(skipping) == _times(every)
    if not options.get("reclaim"):  # reclaim asks every round while a job waits
        assert skipping.summary()["rounds"] < every.summary()["rounds"]
