"""The ``pollux`` baseline through the simulator on the start of a Pollux workload: every
job finishes, adaptive jobs start on one GPU and grow as they are measured, and no node ever
holds two jobs spread over several nodes."""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

import pytest

from danlu.core.cluster import Cluster
from danlu.sched.policies.pollux import PolluxPolicy
from danlu.sched.view import ClusterView, Plan
from danlu.sim.config import SimConfig
from danlu.sim.elastic import load_profiles
from danlu.sim.engine import Simulator
from danlu.sim.workload import load_workload

POLLUX = Path(__file__).resolve().parents[2] / "../shared/data/pollux"

pytestmark = pytest.mark.skipif(
    not (POLLUX / "workloads-0.5").is_dir() or not (POLLUX / "traces").is_dir(),
    reason=f"Pollux artifact data not found at {POLLUX.resolve()} (../shared/data is absent)",
)


class Recorder:
    """The policy, with what each round saw and decided."""

    def __init__(self, policy: PolluxPolicy) -> None:
        self.policy = policy
        self.name = policy.name
        self.rounds: list[tuple[ClusterView, Plan]] = []

    def schedule(self, view: ClusterView) -> Plan:
        plan = self.policy.schedule(view)
        self.rounds.append((view, plan))
        return plan


def test_baseline_runs_the_start_of_a_pollux_workload() -> None:
    workload = load_workload(POLLUX / "workloads-0.5" / "workload-1.csv")
    workload = dataclasses.replace(workload, jobs=workload.jobs[:12])
    recorder = Recorder(PolluxPolicy(population=20, generations=10))
    result = Simulator(
        Cluster.homogeneous(16, 4),
        recorder,
        workload,
        SimConfig(interval=60.0, restart_cost=30.0),
        load_profiles(POLLUX / "traces"),
    ).run()
    assert len(result.jobs) == 12 and all(j.end_time is not None for j in result.jobs)
    first: dict[str, int] = {}
    most: Counter[str] = Counter()
    for view, plan in recorder.rounds:
        for start in plan.starts:
            first.setdefault(start.job_id, start.allocation.num_gpus)
        spread_on: Counter[int] = Counter()
        for job in view.running:
            most[job.id] = max(most[job.id], job.allocation.num_gpus)
            if len(job.allocation.nodes) > 1:
                spread_on.update(job.allocation.nodes)
        assert all(count == 1 for count in spread_on.values()), "two distributed jobs on a node"
    adaptive = {j.request.id for j in workload.jobs if not j.request.id.startswith("ncf")}
    assert {first[j] for j in adaptive} == {1}
    assert max(most[j] for j in adaptive) >= 8  # measured jobs grow
