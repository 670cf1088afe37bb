"""The simulator: workload jobs built in code with times the clock cannot reach,
the timeline of a clock stopped before the first submission, failure times that moved with
the policy, and capacity-planning targets shown with another bound than the one checked."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import pytest

from danlu.core.cluster import Cluster
from danlu.core.errors import ConfigError
from danlu.sched.registry import make_policy
from danlu.sched.view import ClusterView, JobRequest, Plan
from danlu.sim.config import SimConfig
from danlu.sim.elastic import load_profile
from danlu.sim.engine import Simulator
from danlu.sim.failures import Failures
from danlu.sim.metrics import SimResult
from danlu.sim.plan import Target, parse_target, plan_capacity
from danlu.sim.workload import ProfiledWork, RigidWork, Workload, WorkloadJob

NCF = Path(__file__).resolve().parents[2] / "../shared/data/pollux/traces/ncf"


def rigid(name: str, submit: float, duration: float, seq: int, **more: object) -> WorkloadJob:
    request = JobRequest(id=name, submit_time=submit, seq=seq, expected_duration=1.0)
    return WorkloadJob(request, RigidWork(duration), **more)  # type: ignore[arg-type]


def simulate(jobs: list[WorkloadJob], policy: object = None, **config: object) -> SimResult:
    chosen = make_policy("fifo") if policy is None else policy
    workload = Workload("w", "danlu", tuple(jobs))
    settings = SimConfig(**config)  # type: ignore[arg-type]
    return Simulator(Cluster.homogeneous(1, 2), chosen, workload, settings).run()  # type: ignore[arg-type]


# -- 1. job times built in code ----------------------------------------------------------


@pytest.mark.parametrize(
    ("job", "needle"),
    [
        # let in at the first tick, its wait counted from 100 s before the clock started
        (rigid("a", -100.0, 10.0, 0), "request.submit_time must be a finite"),
        # ran for ever: the run ended with it unfinished and no word why
        (rigid("a", 0.0, math.nan, 0), "work.duration must be a finite"),
        (rigid("a", 0.0, math.inf, 0), "work.duration must be a finite"),
        # ended 5 s before it started
        (rigid("a", 0.0, -5.0, 0), "work.duration must be a finite"),
        # cancelled at its start, as if it had reached its limit
        (rigid("a", 0.0, 10.0, 0, time_limit=math.nan), "time_limit must be a finite"),
        (rigid("a", 0.0, 10.0, 0, time_limit=-5.0), "time_limit must be a finite"),
        (rigid("a", 0.0, 10.0, 0, time_limit=0.0), "time_limit must be a finite"),
        # a string raised a bare TypeError deep in the run
        (rigid("a", 0.0, "10", 0), "work.duration must be a number"),  # type: ignore[arg-type]
    ],
)
def test_a_job_time_the_clock_cannot_reach_is_refused_naming_the_job(
    job: WorkloadJob, needle: str
) -> None:
    jobs = [rigid("first", 0.0, 10.0, -1), job]
    with pytest.raises(ConfigError, match=needle) as caught:
        Simulator(Cluster.homogeneous(1, 2), make_policy("fifo"), Workload("w", "t", tuple(jobs)))
    assert "workload.jobs[1] (job 'a')" in str(caught.value)


@pytest.mark.parametrize("submit", [math.nan, math.inf])
def test_a_submit_time_that_is_no_finite_number_is_refused_with_its_request(
    submit: float,
) -> None:
    # NaN: a bare ValueError ('cannot convert float NaN to integer') from the clock's grid;
    # an infinity: never reached, listed as not submitted. The request refuses both now
    with pytest.raises(ConfigError, match=r"JobRequest 'a': submit_time .* finite"):
        rigid("a", submit, 10.0, 0)


def test_work_of_no_known_kind_is_refused_naming_the_job() -> None:
    job = WorkloadJob(JobRequest(id="odd", submit_time=0.0), "3600")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"jobs\[0\] \(job 'odd'\): work must be a RigidWork"):
        Simulator(Cluster.homogeneous(1, 2), make_policy("fifo"), Workload("w", "t", (job,)))


def test_good_job_times_still_run() -> None:
    jobs = [rigid("zero", 0.0, 0.0, 0), rigid("limited", 0.0, 100.0, 1, time_limit=30.0)]
    result = simulate(jobs, event_rounds=True)
    ends = {record.id: (record.end_time, record.timed_out) for record in result.jobs}
    assert ends == {"zero": (0.0, False), "limited": (30.0, True)}


# -- 2. a clock stopped before the first submission ---------------------------------------


@pytest.mark.parametrize("too_wide_first", [False, True])
def test_a_clock_stopped_before_the_first_submission_keeps_an_ordered_timeline(
    too_wide_first: bool,
) -> None:
    """The timeline got a point at the first (admitted) submission, 100 s, then one at the
    stop, 50 s: its times ran backwards, past the clock's stop, in the JSON and the plot."""
    jobs = [rigid("late", 100.0, 10.0, 1)]
    if too_wide_first:  # rejected: the first job let in comes later
        wide = JobRequest(id="wide", submit_time=0.0, gpus=8, seq=0)
        jobs.insert(0, WorkloadJob(wide, RigidWork(10.0)))
    result = simulate(jobs, max_time=50.0)
    assert result.not_submitted == ["late"] and not result.jobs
    times = result.timeline.times
    assert times == sorted(times) and all(t <= 50.0 for t in times)
    timeline = result.to_json(timeline=True)["timeline"]
    assert timeline["time"] == times == []
    assert result.summary()["gpu_allocation_ratio"] == 0.0


def test_a_clock_stopped_after_the_first_submission_keeps_its_timeline() -> None:
    result = simulate([rigid("a", 100.0, 1000.0, 0)], max_time=500.0)
    assert result.unfinished == ["a"]
    times = result.timeline.times
    assert times[0] == 100.0 and times[-1] == 500.0 and times == sorted(times)
    assert result.timeline.allocated_gpus[0] == 0.0 and result.timeline.allocated_gpus[-1] == 1.0


# -- 3. failure times whatever the policy --------------------------------------------------


@dataclass(frozen=True)
class _Sizing:
    """fifo (with backfill), saying it sizes jobs: a profiled job wider than the cluster is
    let in (it waits, and fails once nothing else can run) instead of rejected."""

    name: str = "sizing-fifo"
    sizes_jobs = True

    def schedule(self, view: ClusterView) -> Plan:
        return make_policy("fifo").schedule(view)


@pytest.mark.skipif(not NCF.is_dir(), reason=f"Pollux ncf traces not found at {NCF.resolve()}")
def test_a_seed_gives_the_same_failure_times_whether_a_wide_first_job_is_let_in() -> None:
    """The failures started from the first job let in: at 0 s under a policy that sizes
    jobs (the wide profiled job is let in), at 100 s under fifo (it is rejected), so every
    failure came 100 s later under fifo."""
    profiles = {"ncf": load_profile(NCF)}
    wide = JobRequest(id="wide", submit_time=0.0, gpus=8, seq=0)
    long_job = JobRequest(id="long", submit_time=100.0, gpus=1, seq=1, expected_duration=1.0)
    workload = Workload(
        "w",
        "pollux",
        (WorkloadJob(wide, ProfiledWork("ncf", 256)), WorkloadJob(long_job, RigidWork(50_000.0))),
    )
    failures = Failures(mtbf=20_000.0, repair=600.0, checkpoint_every=600.0, seed=3)
    config = SimConfig(failures=failures, record_events=True)

    def run(policy: object) -> SimResult:
        cluster = Cluster.homogeneous(1, 4)
        return Simulator(cluster, policy, workload, config, profiles).run()  # type: ignore[arg-type]

    rejecting, sizing = run(make_policy("fifo")), run(_Sizing())
    assert [r[0] for r in rejecting.rejected] == ["wide"]  # at its submission
    assert [r[0] for r in sizing.rejected] == ["wide"]  # once nothing else could run

    def lost(result: SimResult) -> list[tuple[float, str]]:
        return [(e.time, e.reason) for e in result.events if e.reason.startswith("lost with")]

    # the long job runs from 120 s (180 s) to the end in both: every failure hits it
    assert len(lost(rejecting)) >= 2 and lost(rejecting) == lost(sizing)


# -- 4. plan targets as checked --------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("avg_jct<=3661", "avg_jct<=3661"),  # was avg_jct<=1h1m: 3660 s
        ("avg_jct<=0.5", "avg_jct<=0.5"),  # was avg_jct<=0s
        ("makespan<=59.99", "makespan<=59.99"),  # was makespan<=1m
        ("gpu_utilization>=0.1234567", "gpu_utilization>=0.1234567"),  # was 0.123457
        ("p99_queueing_delay<=1234567.5", "p99_queueing_delay<=1234567.5"),  # was 14d6h
        ("avg_jct<=2h", "avg_jct<=2h"),  # a duration that says it exactly stays one
        ("avg_jct<=1.5h", "avg_jct<=1h30m"),
        ("avg_jct<=100000d", "avg_jct<=8.64e+09"),  # was 1e+05d, which no flag reads
    ],
)
def test_a_target_is_shown_with_the_bound_it_checks(text: str, shown: str) -> None:
    target = parse_target(text)
    assert str(target) == shown
    assert parse_target(str(target)) == target


def test_a_missed_target_names_the_bound_that_was_missed() -> None:
    """A run with an average JCT of 3660.5 s missed avg_jct<=3661? No: it met it; one of
    3661.5 s missed it, and was said to miss avg_jct<=1h1m (3660 s), which 3660.5 misses
    too."""
    target = parse_target("avg_jct<=3661")

    def simulate_size(nodes: int) -> tuple[dict[str, float], int]:
        return {"avg_jct": 3661.5 if nodes < 3 else 3660.5}, 0

    found = plan_capacity(simulate_size, [target], 1, 4)
    assert found.nodes == 3
    missed = {trial.nodes: trial.missed for trial in found.trials}
    assert missed[2] == ("avg_jct<=3661",)
    assert json.loads(json.dumps(list(missed[2]))) == ["avg_jct<=3661"]
    assert Target("avg_jct", "<=", 3661.0) == parse_target(missed[2][0])
