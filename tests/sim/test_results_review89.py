"""The simulator's results and planning: the jobs a run stopped at ``max_time``
(or rejected) left out of the per-project figures and the JSON's ``per_job`` list, and
``plan_capacity`` called from Python without the CLI's bound on ``max_nodes``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from danlu.core.cluster import Allocation, Cluster
from danlu.core.errors import ConfigError
from danlu.sched.registry import make_policy
from danlu.sched.view import ClusterView, Plan, Preempt, Start
from danlu.sim.config import SimConfig
from danlu.sim.engine import Simulator
from danlu.sim.metrics import SimResult
from danlu.sim.plan import parse_target, plan_capacity
from danlu.sim.workload import load_workload

ROWS = """name,submit_time,gpus,duration,project,user
a1,0,2,100,alpha,ann
b1,0,2,100000,beta,bob
b2,10,4,100,beta,bea
c1,20,64,100,gamma,cy
d1,5000,1,100,delta,di
"""


def stopped_run(tmp_path: Path) -> SimResult:
    """4 GPUs, fifo, the clock stopped at 1000 s: ``a1`` finishes, ``b1`` still runs,
    ``b2`` waits behind it, ``c1`` (64 GPUs) is rejected, ``d1`` is never submitted."""
    path = tmp_path / "w.csv"
    path.write_text(ROWS)
    workload = load_workload(path)
    config = SimConfig(max_time=1000.0)
    return Simulator(Cluster.homogeneous(1, 4), make_policy("fifo"), workload, config).run()


def test_projects_keep_their_unfinished_and_rejected_jobs(tmp_path: Path) -> None:
    result = stopped_run(tmp_path)
    assert result.unfinished == ["b1", "b2"] and result.not_submitted == ["d1"]
    assert [job for job, _ in result.rejected] == ["c1"]
    projects = result.by_project()
    # beta's jobs ran past the stop and gamma's was rejected: both projects were missing
    assert sorted(projects) == ["alpha", "beta", "gamma"]
    beta, gamma, alpha = projects["beta"], projects["gamma"], projects["alpha"]
    assert beta["jobs"] == 0 and math.isnan(beta["avg_jct"])
    assert (beta["unfinished"], beta["running"], beta["pending"]) == (2, 1, 1)
    # b1 held 2 GPUs from its start at 60 s to the stop at 1000 s
    assert beta["unfinished_gpu_hours"] == pytest.approx(2 * 940 / 3600)
    assert gamma["rejected"] == 1 and gamma["jobs"] == 0 and gamma["unfinished"] == 0
    # the finished project's figures are as they were
    assert alpha["jobs"] == 1 and alpha["avg_jct"] == 160.0 and alpha["gpu_share"] == 1.0
    assert alpha["unfinished"] == 0 and alpha["rejected"] == 0


def test_per_job_lists_every_job_let_in_with_its_state(tmp_path: Path) -> None:
    data = json.loads(json.dumps(stopped_run(tmp_path).to_json(), allow_nan=False))
    per_job = {job["id"]: job for job in data["per_job"]}
    assert list(per_job) == ["a1", "b1", "b2", "c1"]  # d1: never submitted
    states = {name: job["state"] for name, job in per_job.items()}
    assert states == {"a1": "finished", "b1": "running", "b2": "pending", "c1": "rejected"}
    assert per_job["b1"]["project"] == "beta" and per_job["b1"]["start_time"] == 60.0
    assert per_job["b1"]["end_time"] is None and per_job["b1"]["jct"] is None
    assert per_job["b1"]["gpu_seconds"] == pytest.approx(2 * 940)
    assert per_job["c1"]["user"] == "cy" and per_job["c1"]["queueing_delay"] is None
    assert per_job["c1"]["gpus"] == 64 and per_job["c1"]["gpu_seconds"] == 0.0
    # the finished jobs' table is unchanged: JCTs of finished jobs only
    assert data["job_jcts"] == {"a1": 160.0}
    assert data["projects"]["beta"]["avg_jct"] is None  # null, not NaN, in strict JSON


class RunsOnceThenGivesUp:
    """Starts ``x`` on GPU 0 at its first round, preempts it at the next, then starts
    nothing for good: the engine fails ``x`` as unschedulable after it held a GPU."""

    name = "gives-up"

    def __init__(self) -> None:
        self.rounds = 0

    def schedule(self, view: ClusterView) -> Plan:
        self.rounds += 1
        if self.rounds == 1:
            return Plan(starts=(Start("x", Allocation.whole_gpus([(0, 0)])),))
        if self.rounds == 2:
            return Plan(preempts=(Preempt("x", "test"),))
        return Plan(recheck_at=math.inf)


def test_a_job_failed_after_it_ran_keeps_its_project_and_gpu_time(tmp_path: Path) -> None:
    path = tmp_path / "w.csv"
    path.write_text("name,submit_time,gpus,duration,project,user\nx,0,1,100000,vision,ann\n")
    workload = load_workload(path)
    result = Simulator(Cluster.homogeneous(1, 4), RunsOnceThenGivesUp(), workload).run()
    ((name, reason),) = result.rejected
    assert name == "x" and reason.startswith("could not be placed even on an idle cluster")
    (record,) = result.rejected_records
    assert (record.state, record.project, record.user) == ("rejected", "vision", "ann")
    assert record.start_time == 60.0 and record.gpu_seconds == 60.0  # 60 s to 120 s
    assert record.preemptions == 1
    assert result.by_project()["vision"]["rejected"] == 1
    assert result.summary()["jobs"] == 0  # the summary's figures are the finished jobs'


def test_plan_capacity_bounds_max_nodes() -> None:
    sizes: list[int] = []

    def simulate(nodes: int) -> tuple[dict[str, float], int]:
        sizes.append(nodes)
        return {"avg_jct": 10.0}, 0

    never = [parse_target("avg_jct<=1")]
    with pytest.raises(ConfigError, match=r"max_nodes \(--max-nodes\) must be at most 4,096"):
        plan_capacity(simulate, never, 1, 10**9)
    assert sizes == []  # refused before a cluster of a billion nodes was simulated
    assert plan_capacity(simulate, never, 1, 4096).nodes is None  # the CLI's bound: fine
