"""The fair-share policy: the project holding the fewest GPUs starts its next job, a
project's own jobs by priority then age; in the simulator a small team is not queued behind
a large team's burst."""

from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from danlu.core.cluster import GPU_TYPES, Allocation, Cluster, Node
from danlu.core.errors import ConfigError
from danlu.sched.policies.fair_share import FairSharePolicy, fair_shares
from danlu.sched.project_usage import ProjectShare
from danlu.sched.registry import make_policy
from danlu.sched.view import ClusterView, JobRequest, JobStatus
from danlu.sim.config import SimConfig
from danlu.sim.engine import Simulator
from danlu.sim.workload import load_workload


def _job(job_id: str, project: str, seq: int, gpus: int = 1, priority: int = 0) -> JobStatus:
    request = JobRequest(
        id=job_id, submit_time=float(seq), gpus=gpus, seq=seq, project=project, priority=priority
    )
    return JobStatus(request)


def test_the_project_holding_fewer_gpus_goes_first_whatever_its_age() -> None:
    cluster = Cluster.homogeneous(1, 6)
    busy = JobStatus(
        JobRequest(id="run", submit_time=0.0, gpus=4, seq=0, project="a"),
        Allocation.whole_gpus([(0, g) for g in range(4)]),
        last_start=0.0,
    )
    pending = (_job("a1", "a", 1), _job("a2", "a", 2), _job("b1", "b", 3), _job("b2", "b", 4))
    plan = FairSharePolicy().schedule(ClusterView(10.0, cluster, running=(busy,), pending=pending))
    assert [s.job_id for s in plan.starts] == ["b1", "b2"]  # a holds 4 GPUs, b none
    assert plan.reason("a1") == "no free GPUs"


def test_projects_take_turns_and_priority_orders_a_projects_own_jobs() -> None:
    pending = (
        _job("a1", "a", 1),
        _job("a2", "a", 2, priority=5),
        _job("a3", "a", 3),
        _job("b1", "b", 4),
        _job("b2", "b", 5),
        _job("c1", "c", 6, gpus=2),
    )
    plan = FairSharePolicy().schedule(ClusterView(0.0, Cluster.homogeneous(1, 6), pending=pending))
    # equal shares at first: the oldest head (a's best, a2) goes, then b1 and c1 (c's head is
    # 2 GPUs: c then holds most), then a and b again
    assert [s.job_id for s in plan.starts] == ["a2", "b1", "c1", "a1", "b2"]
    assert plan.reason("a3") == "no free GPUs"


def test_without_backfill_the_first_job_that_does_not_fit_stops_the_round() -> None:
    pending = (_job("wide", "a", 1, gpus=4), _job("small", "b", 2))
    view = ClusterView(0.0, Cluster.homogeneous(1, 2), pending=pending)
    assert [s.job_id for s in FairSharePolicy().schedule(view).starts] == ["small"]
    strict = FairSharePolicy(backfill=False).schedule(view)
    assert strict.starts == () and strict.reason("small") == (
        "queued behind a job of project a (fair share, no backfill)"
    )
    assert make_policy("fair-share", backfill=False) == FairSharePolicy(backfill=False)


def _waits(tmp_path: Path, policy: str) -> dict[str, float]:
    """Team ``big`` submits 40 jobs of 600 s at t=0, team ``small`` 4 at t=60, on 8 GPUs:
    each team's mean queueing delay."""
    rows = [f"big{i},0,1,600,,,,,big" for i in range(40)]
    rows += [f"small{i},60,1,600,,,,,small" for i in range(4)]
    path = tmp_path / "teams.csv"
    header = "name,submit_time,gpus,duration,priority,gpu_memory,family,model,project"
    path.write_text("\n".join([header, *rows]) + "\n")
    workload = load_workload(path)
    result = Simulator(
        Cluster.homogeneous(2, 4), make_policy(policy), workload, SimConfig(event_rounds=True)
    ).run()
    assert result.unfinished == []
    delays: dict[str, list[float]] = {}
    for job in result.to_json()["per_job"]:
        delays.setdefault(job["id"].rstrip("0123456789"), []).append(job["queueing_delay"])
    return {team: statistics.mean(values) for team, values in delays.items()}


def test_in_the_simulator_a_small_team_is_not_queued_behind_a_burst(tmp_path: Path) -> None:
    fifo = _waits(tmp_path, "fifo")
    fair = _waits(tmp_path, "fair-share")
    assert fifo["small"] >= 2400  # behind all 40 of big's jobs: 5 waves of 600 s
    assert fair["small"] <= 600 - 60  # at the first GPUs that free up
    assert fair["big"] <= fifo["big"] + 300  # what it costs the big team


def _on(job_id: str, project: str, gpu: int, seq: int, start: float = 0.0) -> JobStatus:
    request = JobRequest(id=job_id, submit_time=0.0, gpus=1, seq=seq, project=project)
    return JobStatus(request, Allocation.whole_gpus([(0, gpu)]), last_start=start)


ONE_BY_4 = Cluster.homogeneous(1, 4)
TEAM_A = tuple(_on(f"a{i}", "a", i, i) for i in range(4))


def test_reclaim_preempts_an_over_share_job_for_an_under_share_project() -> None:
    policy = FairSharePolicy(reclaim=True, min_run=300.0)
    pending = (_job("b1", "b", 10), _job("b2", "b", 11), _job("b3", "b", 12))
    plan = policy.schedule(ClusterView(1000.0, ONE_BY_4, running=TEAM_A, pending=pending))
    # b's share is 2 of the 4 GPUs: one waiting job a round, the youngest of a's jobs
    assert [(p.job_id, p.reason) for p in plan.preempts] == [
        ("a3", "fair share: GPUs reclaimed for a job of project b")
    ]
    assert [(s.job_id, s.allocation.shares[0].gpu) for s in plan.starts] == [("b1", 3)]
    assert plan.recheck_at == 0.0
    too_soon = policy.schedule(ClusterView(200.0, ONE_BY_4, running=TEAM_A, pending=pending))
    assert too_soon.preempts == () and too_soon.starts == ()  # a's jobs ran < min_run
    plain = FairSharePolicy().schedule(
        ClusterView(1000.0, ONE_BY_4, running=TEAM_A, pending=pending)
    )
    assert plain.preempts == () and plain.recheck_at == float("inf")


def test_reclaim_preempts_only_the_victims_whose_gpus_the_job_gets() -> None:
    # a1, the youngest, sits on a 1-GPU node: released first, it is no room for a 2-GPU
    # job, which goes to a2's node. a1 used to be preempted too, its GPU left idle.
    cluster = Cluster(
        tuple(Node(f"n{i}", gpus, GPU_TYPES["A100-80GB"]) for i, gpus in enumerate((1, 2, 2, 2)))
    )
    starts = {"a1": 900.0, "a2": 500.0, "a3": 100.0, "a4": 100.0}
    running = tuple(
        JobStatus(
            JobRequest(name, 0.0, cluster.nodes[node].gpus, project="a", seq=node),
            Allocation.whole_gpus([(node, g) for g in range(cluster.nodes[node].gpus)]),
            last_start=starts[name],
        )
        for node, name in enumerate(starts)
    )
    pending = (_job("b1", "b", 10, gpus=2), _job("b2", "b", 11, gpus=2))
    plan = FairSharePolicy(reclaim=True, min_run=0.0).schedule(
        ClusterView(1000.0, cluster, running=running, pending=pending)
    )
    assert [s.job_id for s in plan.starts] == ["b1"]
    assert plan.starts[0].allocation.nodes == (1,)
    assert [p.job_id for p in plan.preempts] == ["a2"]


def test_reclaim_stops_at_the_shares_and_waits_for_draining_gpus() -> None:
    policy = FairSharePolicy(reclaim=True, min_run=300.0)
    # b holds 2 (its share): a's re-queued jobs do not take them back, nor b more of a's
    running = (*TEAM_A[:2], _on("b1", "b", 2, 10), _on("b2", "b", 3, 11))
    pending = (_job("a2", "a", 2), _job("b3", "b", 12))
    plan = policy.schedule(ClusterView(5000.0, ONE_BY_4, running=running, pending=pending))
    assert plan.preempts == () and plan.starts == ()
    # a3 is still checkpointing (preempted last round): b1 is placed on its GPU, no new victim
    view = ClusterView(
        1060.0,
        ONE_BY_4,
        running=TEAM_A,
        pending=(_job("b1", "b", 10),),
        draining=frozenset({"a3"}),
    )
    plan = policy.schedule(view)
    assert [(s.job_id, s.allocation.shares[0].gpu) for s in plan.starts] == [("b1", 3)]
    assert plan.preempts == ()


def test_max_min_shares_give_small_demands_in_full() -> None:
    assert fair_shares(8000, {"a": 8000, "b": 1000, "c": 8000}) == {
        "b": 1000.0,
        "a": 3500.0,
        "c": 3500.0,
    }


def test_in_the_simulator_reclaim_makes_room_for_a_team_behind_long_jobs(tmp_path: Path) -> None:
    """Team ``big`` runs 8 jobs of 10,000 s on the 8 GPUs from t=0; team ``small`` submits
    4 jobs of 600 s at t=100: without reclaim they wait for big's jobs to end."""
    rows = [f"big{i},0,1,10000,,,,,big" for i in range(8)]
    rows += [f"small{i},100,1,600,,,,,small" for i in range(4)]
    path = tmp_path / "long.csv"
    header = "name,submit_time,gpus,duration,priority,gpu_memory,family,model,project"
    path.write_text("\n".join([header, *rows]) + "\n")

    def run(**options: object) -> tuple[dict[str, float], float]:
        result = Simulator(
            Cluster.homogeneous(2, 4),
            make_policy("fair-share", **options),
            load_workload(path),
            SimConfig(restart_cost=30.0),
        ).run()
        assert result.unfinished == []
        delays: dict[str, list[float]] = {}
        for job in result.to_json()["per_job"]:
            delays.setdefault(job["id"].rstrip("0123456789"), []).append(job["queueing_delay"])
        means = {team: statistics.mean(values) for team, values in delays.items()}
        return means, float(result.summary()["preemptions"])

    waits, preemptions = run()
    assert waits["small"] >= 9000 and preemptions == 0
    waits, preemptions = run(reclaim=True)
    assert waits["small"] <= 600  # once big's jobs ran min_run (300 s), a round each
    assert preemptions == 4  # one per small job: nothing bounces back


def test_weights_decide_the_turns_and_history_counts_against_a_project() -> None:
    pending = tuple(_job(f"a{i}", "a", i) for i in range(6)) + tuple(
        _job(f"b{i}", "b", 10 + i) for i in range(6)
    )
    cluster = Cluster.homogeneous(1, 6)

    def started(view: ClusterView, policy: FairSharePolicy | None = None) -> dict[str, int]:
        plan = (policy or FairSharePolicy()).schedule(view)
        counts = {"a": 0, "b": 0}
        for start in plan.starts:
            counts[start.job_id[0]] += 1
        return counts

    assert started(ClusterView(0.0, cluster, pending=pending)) == {"a": 3, "b": 3}
    weighted = {"a": ProjectShare(weight=2.0)}
    assert started(ClusterView(0.0, cluster, pending=pending, projects=weighted)) == {
        "a": 4,
        "b": 2,
    }
    # a held 3 GPUs on average lately: b starts 3 jobs first, then they alternate (a's
    # head is older on ties): b0 b1 b2 a0 b3 a1
    recent = {"a": ProjectShare(recent_milli=3000.0)}
    assert started(ClusterView(0.0, cluster, pending=pending, projects=recent)) == {
        "a": 2,
        "b": 4,
    }


def test_weighted_shares_split_what_small_demands_leave() -> None:
    assert fair_shares(8000, {"a": 8000, "b": 8000}, {"a": 3.0}) == {"a": 6000.0, "b": 2000.0}
    shares = fair_shares(8000, {"a": 1000, "b": 8000, "c": 8000}, {"b": 2.0})
    assert shares["a"] == 1000.0
    assert shares["b"] == pytest.approx(7000 * 2 / 3)
    assert shares["c"] == pytest.approx(7000 / 3)


def test_reclaim_gives_a_heavier_project_more_of_the_cluster() -> None:
    policy = FairSharePolicy(reclaim=True, min_run=300.0)
    pending = (_job("b1", "b", 10), _job("b2", "b", 11), _job("b3", "b", 12))
    # b of weight 3 is owed 3 of the 4 GPUs: one job a round, b1 first
    view = ClusterView(
        1000.0, ONE_BY_4, running=TEAM_A, pending=pending, projects={"b": ProjectShare(3.0)}
    )
    assert [s.job_id for s in policy.schedule(view).starts] == ["b1"]
    running = (TEAM_A[0], _on("b1", "b", 1, 10), _on("b2", "b", 2, 11), TEAM_A[3])
    view = ClusterView(
        2000.0, ONE_BY_4, running=running, pending=pending[2:], projects={"b": ProjectShare(3.0)}
    )
    plan = policy.schedule(view)
    assert [p.job_id for p in plan.preempts] == ["a3"] and [s.job_id for s in plan.starts] == ["b3"]
    # with equal weights b already holds its 2: nothing is reclaimed
    assert FairSharePolicy(reclaim=True).schedule(replace(view, projects={})).starts == ()


EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "workloads"


def _team_delays(name: str, config: SimConfig, **options: object) -> dict[str, float]:
    """Each team's mean queueing delay on 12 GPUs for ``examples/workloads/NAME``
    (``docs/queue-policies.md`` prints these)."""
    workload = load_workload(EXAMPLES / name)
    policy = make_policy("fair-share", **options)
    result = Simulator(Cluster.homogeneous(2, 6), policy, workload, config).run()
    assert result.unfinished == []
    delays: dict[str, list[float]] = {}
    for job in result.to_json()["per_job"]:
        delays.setdefault(job["id"].rstrip("0123456789"), []).append(job["queueing_delay"])
    return {team: statistics.mean(values) for team, values in delays.items()}


def test_in_the_simulator_a_heavier_project_waits_less() -> None:
    even = _team_delays("two-teams.csv", SimConfig(event_rounds=True))
    assert (even["vision"], even["speech"]) == (2700.0, 2700.0)
    weighted = SimConfig(event_rounds=True, project_shares={"vision": 2.0})
    # vision holds 8 of the 12 GPUs while both wait
    delays = _team_delays("two-teams.csv", weighted)
    assert (delays["vision"], delays["speech"]) == (1960.0, 3440.0)


def test_in_the_simulator_recent_use_lets_the_other_team_go_first() -> None:
    """vision ran 12 jobs alone for 3,000 s; when both teams queue 24 jobs, speech goes
    first with a half-life of an hour, and the two alternate without one."""
    config = SimConfig(event_rounds=True)
    plain = _team_delays("after-the-night.csv", config)
    assert (plain["vision"], plain["speech"]) == (1000.0, 950.0)
    history = _team_delays("after-the-night.csv", config, half_life=3600.0)
    assert (history["vision"], history["speech"]) == (1350.0, 600.0)


def test_sim_config_checks_project_weights() -> None:
    with pytest.raises(ConfigError, match="project_shares: a's weight must be above 0"):
        SimConfig(project_shares={"a": 0.0})
    # below the control plane's bound too: read as it, 1e-320 would run as 0.000001
    with pytest.raises(ConfigError, match=r"a's weight must be at least 0\.000001, not 1e-320"):
        SimConfig(project_shares={"a": 1e-320})


def _user_job(job_id: str, user: str, seq: int) -> JobStatus:
    request = JobRequest(id=job_id, submit_time=float(seq), seq=seq, project="lab", user=user)
    return JobStatus(request)


def test_with_users_a_projects_gpus_are_shared_between_its_users() -> None:
    alice_runs = JobStatus(
        JobRequest(id="run", submit_time=0.0, gpus=2, seq=0, project="lab", user="alice"),
        Allocation.whole_gpus([(0, 0), (0, 1)]),
        last_start=0.0,
    )
    pending = (
        _user_job("a1", "alice", 1),
        _user_job("a2", "alice", 2),
        _user_job("b1", "bob", 3),
        _user_job("b2", "bob", 4),
        _user_job("c1", "carol", 5),
    )
    view = ClusterView(10.0, ONE_BY_4, running=(alice_runs,), pending=pending)
    # alice holds 2 of the lab's GPUs: bob and carol start first (bob's head is older)
    assert [s.job_id for s in FairSharePolicy(users=True).schedule(view).starts] == ["b1", "c1"]
    # without users the lab's jobs go by submission
    assert [s.job_id for s in FairSharePolicy().schedule(view).starts] == ["a1", "a2"]
    # projects still come first: a project that holds nothing goes before the lab
    other = (*pending, JobStatus(JobRequest(id="o1", submit_time=9.0, seq=9, project="x")))
    plan = FairSharePolicy(users=True).schedule(replace(view, pending=other))
    assert [s.job_id for s in plan.starts] == ["o1", "b1"]


def test_in_the_simulator_users_share_a_project(tmp_path: Path) -> None:
    """One project: alice submits 40 jobs of 600 s at t=0, bob 4 at t=60, on 8 GPUs."""
    header = "name,submit_time,gpus,duration,priority,gpu_memory,family,model,project,"
    header += "time_limit,user"
    rows = [f"alice{i},0,1,600,,,,,lab,,alice" for i in range(40)]
    rows += [f"bob{i},60,1,600,,,,,lab,,bob" for i in range(4)]
    path = tmp_path / "lab.csv"
    path.write_text("\n".join([header, *rows]) + "\n")

    def bob_wait(**options: object) -> float:
        result = Simulator(
            Cluster.homogeneous(2, 4),
            make_policy("fair-share", **options),
            load_workload(path),
            SimConfig(event_rounds=True),
        ).run()
        waits = [j["queueing_delay"] for j in result.to_json()["per_job"] if j["id"][:3] == "bob"]
        return statistics.mean(waits)

    assert bob_wait() >= 2400  # behind all of alice's jobs
    assert bob_wait(users=True) <= 600 - 60  # at the first GPUs that free up
