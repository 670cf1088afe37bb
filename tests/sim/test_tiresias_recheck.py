"""Tiresias' ``recheck_at`` lets the simulator skip rounds: skipping must never change a
decision. A job the round starts is demoted once its service crosses the next threshold, and
a job left waiting may then overtake it, so the plan's recheck time must include the
demotion times of the jobs it starts, not only of those already running."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from danlu.core.cluster import Allocation, Cluster
from danlu.sched.policies.base import Policy
from danlu.sched.policies.tiresias import TiresiasPolicy
from danlu.sched.registry import make_policy
from danlu.sched.view import ClusterView, JobRequest, JobStatus, Plan
from danlu.sim.config import SimConfig
from danlu.sim.engine import Simulator
from danlu.sim.metrics import SimResult
from danlu.sim.workload import Workload, load_workload, synthetic_workload

# L runs from 60; S (t=300) preempts L (queue 1 since t=160); M starts at 360 while L waits
# and is demoted at 460, after which L (queue 1 since 160) goes first.
HAND = "name,submit_time,gpus,duration\nL,0,1,1000\nS,300,1,50\nM,310,1,200\n"


@dataclass
class EveryRound:
    """The same policy, but the engine is told to ask it every round (``recheck_at`` 0)."""

    inner: Policy

    @property
    def name(self) -> str:
        """The wrapped policy's name."""
        return self.inner.name

    def schedule(self, view: ClusterView) -> Plan:
        """The wrapped policy's plan, due again at the next round."""
        return replace(self.inner.schedule(view), recheck_at=0.0)


def _run(workload: Workload, policy: Policy, cluster: Cluster) -> SimResult:
    return Simulator(cluster, policy, workload, SimConfig(interval=60.0, restart_cost=0)).run()


def _times(result: SimResult) -> dict[str, tuple[float | None, float | None, int]]:
    return {r.id: (r.start_time, r.end_time, r.preemptions) for r in result.jobs}


def test_a_job_started_while_another_waits_is_demoted_on_time(tmp_path: Path) -> None:
    path = tmp_path / "tir.csv"
    path.write_text(HAND)
    workload = load_workload(path)
    cluster = Cluster.homogeneous(1, 1)
    skipping = _run(workload, make_policy("tiresias", thresholds=(100.0,)), cluster)
    every = _run(workload, EveryRound(make_policy("tiresias", thresholds=(100.0,))), cluster)
    # M is demoted at 460 and preempted at the round of 480; L (queue 1 since 160) runs on.
    assert _times(every) == {
        "S": (300.0, 350.0, 0),
        "L": (60.0, 1240.0, 1),
        "M": (360.0, 1340.0, 1),
    }
    assert _times(skipping) == _times(every)
    assert skipping.summary()["avg_jct"] == pytest.approx(2320.0 / 3)


def test_the_plan_rechecks_at_the_demotion_of_a_job_it_starts() -> None:
    cluster = Cluster.homogeneous(1, 4)
    # "run" holds 2 GPUs (not yet demoted: 40 GPU-s of 100 by t=20, crossing at t=50);
    # "new" starts on the other 2 (crossing at 20 + 100 / 2 = 70); "big" (4 GPUs) waits.
    run = JobStatus(
        JobRequest("run", 0.0, 2, seq=0),
        Allocation.whole_gpus([(0, 0), (0, 1)]),
        last_start=0.0,
    )
    new = JobStatus(JobRequest("new", 10.0, 2, seq=1))
    big = JobStatus(JobRequest("big", 15.0, 4, seq=2))
    policy = TiresiasPolicy(thresholds=(100.0,))
    plan = policy.schedule(ClusterView(20.0, cluster, running=(run,), pending=(new, big)))
    assert [s.job_id for s in plan.starts] == ["new"] and plan.has_waiting
    assert plan.recheck_at == pytest.approx(50.0)
    # without the running job, only the started one's demotion is due
    alone = policy.schedule(ClusterView(20.0, cluster, pending=(new, big)))
    assert [s.job_id for s in alone.starts] == ["new"]
    assert alone.recheck_at == pytest.approx(70.0)
    # with service already attained (40 GPU-s) it crosses sooner: 20 + 60 / 2 = 50
    served = replace(new, attained_service=40.0, run_time=20.0)
    again = policy.schedule(ClusterView(20.0, cluster, pending=(served, big)))
    assert again.recheck_at == pytest.approx(50.0)
    # past the last threshold there is no demotion left to wait for (both in queue 1)
    last = replace(new, attained_service=150.0, run_time=75.0)
    behind = replace(big, attained_service=200.0, run_time=50.0)
    plan = policy.schedule(ClusterView(20.0, cluster, pending=(last, behind)))
    assert [s.job_id for s in plan.starts] == ["new"] and plan.has_waiting
    assert plan.recheck_at == math.inf


@pytest.mark.parametrize(
    ("seed", "options"),
    [
        (5, {"thresholds": (1800.0,)}),
        (5, {"thresholds": (600.0, 7200.0)}),
        (3, {"thresholds": (1800.0,), "starvation_factor": 2.0, "starvation_min": 600.0}),
        (1, {"thresholds": (300.0, 3600.0), "starvation_factor": 1.0}),
    ],
    ids=["one-threshold", "two-thresholds", "starvation-guard", "starvation-two-thresholds"],
)
def test_skipped_rounds_never_change_a_decision(seed: int, options: dict[str, object]) -> None:
    # The starvation cases also need the promotion time of a job the round preempts (it
    # waits from then on, though the plan lists no waiting job).
    workload = synthetic_workload(jobs=80, seed=seed, hours=3.0)
    cluster = Cluster.homogeneous(2, 4)
    skipping = _run(workload, make_policy("tiresias", **options), cluster)
    every = _run(workload, EveryRound(make_policy("tiresias", **options)), cluster)
    assert sum(r.preemptions for r in every.jobs) > 0  # the case preempts at all
    assert _times(skipping) == _times(every)
