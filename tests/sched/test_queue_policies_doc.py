"""What docs/queue-policies.md says of ``fifo``, ``priority``, ``sjf`` and ``fair-share``:
their option defaults, the priority order with aging and the preemption rule beside it,
fair-share's tie rule and recent usage, and the figures of its reclaim and burst examples."""

from __future__ import annotations

import dataclasses
import math
import statistics
from pathlib import Path

import pytest

from danlu.core.cluster import Allocation, Cluster
from danlu.core.errors import ConfigError
from danlu.sched.policies.fair_share import FairSharePolicy
from danlu.sched.policies.priority import PriorityPolicy
from danlu.sched.project_usage import stretch_weight
from danlu.sched.registry import make_policy
from danlu.sched.view import ClusterView, JobRequest, JobStatus, Plan
from danlu.sim.config import SimConfig
from danlu.sim.engine import Simulator
from danlu.sim.workload import load_workload

ONE_GPU = Cluster.homogeneous(1, 1)
HOUR = 3600.0


def _options(name: str) -> dict[str, object]:
    policy = make_policy(name)
    return {
        f.name: getattr(policy, f.name)
        for f in dataclasses.fields(policy)  # type: ignore[arg-type]
        if f.init and f.name != "name"
    }


def test_the_option_defaults_are_the_tables() -> None:
    assert _options("fifo") == {"placement": "best-fit", "backfill": False, "reserve": False}
    assert _options("priority") == {
        "placement": "best-fit",
        "aging_per_hour": 1.0,
        "preempt": True,
        "backfill": True,
        "reserve": False,
    }
    assert _options("fair-share") == {
        "placement": "best-fit",
        "backfill": True,
        "reclaim": False,
        "min_run": 300.0,
        "half_life": 0.0,
        "users": False,
    }
    assert _options("sjf") == {
        "placement": "best-fit",
        "backfill": True,
        "reserve": False,
        "by_gpu_time": True,
    }
    with pytest.raises(ConfigError, match="set backfill=true as well"):
        make_policy("fifo", reserve=True)


def _started(plan: Plan) -> list[str]:
    return [start.job_id for start in plan.starts]


def _waiting(job_id: str, priority: int, submit: float, seq: int, **kw: bool) -> JobStatus:
    return JobStatus(
        JobRequest(id=job_id, submit_time=submit, seq=seq, priority=priority, **kw)  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("later_submit", "first"),
    [(3700.0, "old"), (3500.0, "urgent"), (3600.0, "old")],  # aged 2 against 1.97, 2.03, 2
)
def test_priority_ages_a_job_one_per_hour_waited_then_goes_by_submission(
    later_submit: float, first: str
) -> None:
    """At 2 h, a priority-0 job waiting since 0 ranks at 2: ahead of a priority-1 job that
    waited under an hour, behind one that waited over, ahead by submission at a tie."""
    pending = (_waiting("old", 0, 0.0, 0), _waiting("urgent", 1, later_submit, 1))
    view = ClusterView(2 * HOUR, ONE_GPU, pending=pending)
    assert _started(PriorityPolicy(preempt=False).schedule(view)) == [first]


def test_with_preempt_an_aged_job_does_not_start_ahead_of_one_that_would_preempt_it() -> None:
    pending = (_waiting("old", 0, 0.0, 0), _waiting("urgent", 1, 3700.0, 1))
    view = ClusterView(2 * HOUR, ONE_GPU, pending=pending)
    assert _started(PriorityPolicy().schedule(view)) == ["urgent"]
    # one that may not be preempted still starts first where aging puts it
    fixed = (_waiting("old", 0, 0.0, 0, preemptible=False), pending[1])
    view = ClusterView(2 * HOUR, ONE_GPU, pending=fixed)
    assert _started(PriorityPolicy().schedule(view)) == ["old"]


def test_fair_share_ties_go_to_the_project_whose_next_job_is_older() -> None:
    def job(job_id: str, project: str, seq: int) -> JobStatus:
        return JobStatus(JobRequest(id=job_id, submit_time=float(seq), seq=seq, project=project))

    pending = (job("p-new", "p", 5), job("q-old", "q", 3), job("p-newer", "p", 6))
    plan = FairSharePolicy().schedule(ClusterView(10.0, ONE_GPU, pending=pending))
    assert _started(plan) == ["q-old"]


def test_recent_usage_counts_a_gpu_held_for_ever_as_one_and_half_a_half_life_later() -> None:
    half_life = 3600.0
    assert 8 * stretch_weight(-1e9, 10_000.0, 10_000.0, half_life) == pytest.approx(8.0)
    stopped = 8 * stretch_weight(-1e9, 10_000.0 - half_life, 10_000.0, half_life)
    assert stopped == pytest.approx(4.0)
    assert math.isclose(stretch_weight(0.0, 0.0, 10.0, half_life), 0.0)


def _team_waits(
    tmp_path: Path, rows: list[str], policy: str, config: SimConfig, **options: object
) -> tuple[dict[str, float], float, float]:
    header = "name,submit_time,gpus,duration,priority,gpu_memory,family,model,project"
    path = tmp_path / "teams.csv"
    path.write_text("\n".join([header, *rows]) + "\n")
    cluster = Cluster.homogeneous(2, 4)
    result = Simulator(cluster, make_policy(policy, **options), load_workload(path), config).run()
    delays: dict[str, list[float]] = {}
    for job in result.to_json()["per_job"]:
        delays.setdefault(job["id"].rstrip("0123456789"), []).append(job["queueing_delay"])
    summary = result.summary()
    waits = {team: round(statistics.mean(values), 1) for team, values in delays.items()}
    return waits, float(summary["preemptions"]), round(float(summary["avg_jct"]), 1)


def test_the_reclaim_example_figures(tmp_path: Path) -> None:
    """8 jobs of 10,000 s from t=0, 4 of 600 s at t=100, on 8 GPUs, restarts of 30 s."""
    rows = [f"big{i},0,1,10000,,,,,big" for i in range(8)]
    rows += [f"small{i},100,1,600,,,,,small" for i in range(4)]
    config = SimConfig(restart_cost=30.0)
    for policy in ("fifo", "fair-share"):
        waits, preemptions, jct = _team_waits(tmp_path, rows, policy, config)
        assert (waits["small"], preemptions, jct) == (9980.0, 0.0, 10233.3)
    waits, preemptions, jct = _team_waits(tmp_path, rows, "fair-share", config, reclaim=True)
    assert (waits["small"], preemptions, jct) == (350.0, 4.0, 7233.3)


def test_the_burst_example_figures(tmp_path: Path) -> None:
    """40 jobs of 600 s at t=0, 4 more of another team at t=60, on 8 GPUs."""
    rows = [f"big{i},0,1,600,,,,,big" for i in range(40)]
    rows += [f"small{i},60,1,600,,,,,small" for i in range(4)]
    config = SimConfig(event_rounds=True)
    assert _team_waits(tmp_path, rows, "fifo", config)[0] == {"big": 1200.0, "small": 2940.0}
    fair = _team_waits(tmp_path, rows, "fair-share", config)[0]
    assert fair == {"big": 1440.0, "small": 540.0}


def _on_the_gpu(job_id: str, priority: int, **kw: bool) -> JobStatus:
    request = JobRequest(id=job_id, submit_time=0.0, seq=0, priority=priority, **kw)  # type: ignore[arg-type]
    return JobStatus(request, Allocation.whole_gpus([(0, 0)]), last_start=0.0)


@pytest.mark.parametrize(
    ("running_priority", "preemptible", "waiting_priority", "preempted"),
    [
        (0, True, 1, True),  # strictly higher base priority
        (1, True, 1, False),  # the same base priority, however long the waiting one aged
        (0, False, 1, False),  # preemptible: false
    ],
)
def test_priority_preempts_only_for_a_strictly_higher_base_priority(
    running_priority: int, preemptible: bool, waiting_priority: int, preempted: bool
) -> None:
    victim = _on_the_gpu("victim", running_priority, preemptible=preemptible)
    waiting = _waiting("waiting", waiting_priority, 10.0, 1)
    view = ClusterView(1000 * HOUR, ONE_GPU, running=(victim,), pending=(waiting,))
    plan = PriorityPolicy().schedule(view)
    assert [p.job_id for p in plan.preempts] == (["victim"] if preempted else [])
    assert not PriorityPolicy(preempt=False).schedule(view).preempts
