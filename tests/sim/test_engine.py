"""The simulator on hand-computed workloads, invariants under real policies, trace loaders."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pytest

from danlu.core.cluster import MILLI_PER_GPU, Cluster, Node
from danlu.core.errors import ConfigError, DataError
from danlu.core.state import JobState, check_transition
from danlu.core.units import GiB, MiB
from danlu.sched.policies.base import Policy
from danlu.sched.registry import make_policy
from danlu.sched.view import ClusterView, JobRequest, Plan, usage_from_allocations
from danlu.sim.config import SimConfig
from danlu.sim.engine import Simulator
from danlu.sim.metrics import SimResult, fragmentation
from danlu.sim.workload import (
    FORMATS,
    RigidWork,
    Workload,
    WorkloadJob,
    detect_format,
    load_workload,
    synthetic_workload,
)


def write(tmp_path: Path, text: str, name: str = "w.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def simulate(
    workload: Workload,
    policy: str | Policy = "fifo",
    cluster: Cluster | None = None,
    **config: object,
) -> SimResult:
    pol = make_policy(policy) if isinstance(policy, str) else policy
    return Simulator(
        cluster or Cluster.homogeneous(1, 2),
        pol,
        workload,
        SimConfig(**config),  # type: ignore[arg-type]
    ).run()


def times(result: SimResult) -> dict[str, tuple[float | None, float | None]]:
    return {r.id: (r.start_time, r.end_time) for r in result.jobs}


# a 2-GPU cluster, interval 60:
#   a (t=0, 2 GPUs, 100 s) starts at the first tick, 60, ends 160;
#   b (t=10, 1 GPU) and c (t=120 = a tick, 1 GPU) wait for a: both start at 180;
#   d (t=240 = a tick, on an idle cluster) starts at 240.
FOUR_JOBS = "name,submit_time,gpus,duration\na,0,2,100\nb,10,1,50\nc,120,1,30\nd,240,2,60\n"


def test_fifo_on_the_interval_grid(tmp_path: Path) -> None:
    result = simulate(load_workload(write(tmp_path, FOUR_JOBS)), interval=60.0)
    assert times(result) == {
        "a": (60.0, 160.0),
        "b": (180.0, 230.0),
        "c": (180.0, 210.0),
        "d": (240.0, 300.0),
    }
    assert sorted(result.to_json()["job_jcts"].items()) == [
        ("a", 160.0),
        ("b", 220.0),
        ("c", 90.0),
        ("d", 60.0),
    ]
    summary = result.summary()
    assert summary["avg_jct"] == pytest.approx((160 + 220 + 90 + 60) / 4)
    assert summary["makespan"] == 300.0
    assert summary["avg_queueing_delay"] == pytest.approx((60 + 170 + 60 + 0) / 4)
    assert summary["preemptions"] == 0.0
    # GPU-seconds held: 2x100 + 50 + 30 + 2x60, over 2 GPUs x 300 s
    assert summary["gpu_utilization"] == pytest.approx(400 / 600)
    assert result.unfinished == [] and result.rejected == []


def test_an_idle_gap_between_arrivals_is_skipped(tmp_path: Path) -> None:
    """After the last job finished, the clock jumps to the next arrival (it stepped through
    the gap one interval at a time: a job submitted at 1e12 s never arrived)."""
    text = "name,submit_time,gpus,duration\na,0,1,100\nb,1e12,1,50\n"
    for event_rounds in (False, True):
        result = simulate(load_workload(write(tmp_path, text)), event_rounds=event_rounds)
        assert result.unfinished == [] and result.rounds <= 4
        start, end = times(result)["b"]
        assert start is not None and end == start + 50 and 1e12 <= start <= 1e12 + 60


def test_every_job_needs_a_name(tmp_path: Path) -> None:
    """An empty ``name`` is refused in each format that carries one (results name jobs by it)."""
    texts = {
        "danlu": "name,submit_time,gpus,duration\na,0,1,10\n  ,5,1,10\n",
        "pollux": "name,time,application,num_replicas,batch_size\n,1,cifar10,1,128\n",
        "openb": (
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time\n"
            ",1000,1024,1,500,0,100\n"
        ),
    }
    for kind, text in texts.items():
        line = 3 if kind == "danlu" else 2
        with pytest.raises(DataError, match=rf":{line}: column 'name' is empty"):
            load_workload(write(tmp_path, text))


def test_every_pollux_job_needs_an_application(tmp_path: Path) -> None:
    text = "name,time,application,num_replicas,batch_size\na,0,cifar10,1,128\nb,1, ,1,128\n"
    with pytest.raises(DataError, match=r":3: column 'application' is empty"):
        load_workload(write(tmp_path, text))


def test_job_names_are_unique(tmp_path: Path) -> None:
    text = "name,submit_time,gpus,duration\na,0,1,10\nb,5,1,10\na,6,1,10\n"
    with pytest.raises(DataError, match=r":4: job name 'a' is used twice \(lines 2 and 4\)"):
        load_workload(write(tmp_path, text))
    twice = Workload("w", "danlu", (*synthetic_workload(jobs=2).jobs,) * 2)
    with pytest.raises(ConfigError, match="job ids must be unique"):
        simulate(twice)
    bad = "name,submit_time,gpus,duration,priority\na,0,1,10,high\n"
    with pytest.raises(DataError, match="'priority' must be a whole number"):
        load_workload(write(tmp_path, bad))
    negative = "name,submit_time,gpus,duration,priority\na,0,1,10,-3\n"
    assert load_workload(write(tmp_path, negative)).jobs[0].request.priority == -3


def test_allocation_ratio_counts_completions_between_instants(tmp_path: Path) -> None:
    result = simulate(load_workload(write(tmp_path, FOUR_JOBS)), interval=60.0)
    # 400 GPU-seconds allocated over 2 GPUs x 300 s (the makespan)
    assert result.summary()["gpu_allocation_ratio"] == pytest.approx(400 / 600)


def test_allocation_ratio_is_over_the_makespan_not_the_trailing_round(tmp_path: Path) -> None:
    # One 1-GPU job of 100 s, submitted at 0, runs from the first round (60) to 160: the
    # timeline has one more instant (180) after the end, which used to count as idle time
    # (0.5556, below the utilisation).
    text = "name,submit_time,gpus,duration\nj,0,1,100\n"
    result = simulate(
        load_workload(write(tmp_path, text)),
        cluster=Cluster.homogeneous(1, 1),
        interval=60.0,
        restart_cost=0.0,
    )
    assert result.timeline.times[-1] > 160.0
    summary = result.summary()
    assert summary["makespan"] == 160.0
    assert summary["gpu_allocation_ratio"] == pytest.approx(100 / 160)
    assert summary["gpu_allocation_ratio"] >= summary["gpu_utilization"]


def test_fifo_strict_order_on_the_grid(tmp_path: Path) -> None:
    # b (2 GPUs) blocks c (1 GPU) behind it while a holds one GPU
    text = "name,submit_time,gpus,duration\na,0,1,200\nb,1,2,10\nc,2,1,10\n"
    result = simulate(load_workload(write(tmp_path, text)), interval=60.0)
    assert times(result) == {"a": (60.0, 260.0), "b": (300.0, 310.0), "c": (360.0, 370.0)}
    backfill = simulate(
        load_workload(write(tmp_path, text)), make_policy("fifo", backfill=True), interval=60.0
    )
    assert times(backfill)["c"] == (60.0, 70.0)


def test_other_interval(tmp_path: Path) -> None:
    result = simulate(load_workload(write(tmp_path, FOUR_JOBS)), interval=25.0)
    # ticks at 25, 50, ...: a starts 25 ends 125; b, c start at 125 (a tick), c arrived 120
    assert times(result) == {
        "a": (25.0, 125.0),
        "b": (125.0, 175.0),
        "c": (125.0, 155.0),
        "d": (250.0, 310.0),
    }


def test_event_rounds_start_jobs_at_their_arrival(tmp_path: Path) -> None:
    result = simulate(load_workload(write(tmp_path, FOUR_JOBS)), interval=60.0, event_rounds=True)
    assert times(result) == {
        "a": (0.0, 100.0),
        "b": (100.0, 150.0),  # blocked by a until its completion
        "c": (120.0, 150.0),
        "d": (240.0, 300.0),
    }
    assert result.summary()["avg_jct"] == pytest.approx((100 + 140 + 30 + 60) / 4)


def test_preemption_and_restart_cost_for_rigid_jobs(tmp_path: Path) -> None:
    # 1 GPU; low starts at 60 (first start: no restart cost); high arrives at 100 and
    # preempts low at the tick 120; high ends 170; low resumes at 180 and pays 30 s:
    # 200 - 60 = 140 s left -> ends 180 + 30 + 140 = 350.
    text = "name,submit_time,gpus,duration,priority\nlow,0,1,200,0\nhigh,100,1,50,1\n"
    result = simulate(
        load_workload(write(tmp_path, text)),
        "priority",
        Cluster.homogeneous(1, 1),
        interval=60.0,
        restart_cost=30.0,
    )
    assert times(result) == {"low": (60.0, 350.0), "high": (120.0, 170.0)}
    records = {r.id: r for r in result.jobs}
    assert records["low"].preemptions == 1 and records["high"].preemptions == 0
    assert records["low"].restart_gpu_seconds == 30.0
    assert records["high"].restart_gpu_seconds == 0.0
    assert records["low"].gpu_seconds == pytest.approx(60 + 170)  # restart time is held
    assert records["high"].gpu_seconds == pytest.approx(50)
    assert records["low"].restarts == 1 and records["low"].resizes == 0  # one resume
    summary = result.summary()
    assert summary["preemptions"] == 1.0
    assert (summary["restarts"], summary["resizes"], summary["max_job_restarts"]) == (1, 0, 1)
    assert summary["avg_jct"] == pytest.approx((350 + 70) / 2)
    assert summary["gpu_utilization"] == pytest.approx((230 + 50 - 30) / 350)
    # a free restart changes only low's end
    free = simulate(
        load_workload(write(tmp_path, text)),
        "priority",
        Cluster.homogeneous(1, 1),
        interval=60.0,
        restart_cost=0.0,
    )
    assert times(free)["low"] == (60.0, 320.0)


def test_job_larger_than_the_cluster_is_rejected(tmp_path: Path) -> None:
    text = "name,submit_time,gpus,duration,gpu_memory\nok,0,1,10,0\nhuge,0,3,10,0\n"
    text += f"fat,0,1,10,{200 * GiB}\n"
    result = simulate(load_workload(write(tmp_path, text)))
    assert [r.id for r in result.jobs] == ["ok"]
    reasons = dict(result.rejected)
    assert reasons["huge"] == "asks for 3 GPUs; the cluster has 2"
    assert "the largest GPU has" in reasons["fat"]
    assert reasons["fat"].startswith("asks for 200.0GiB per GPU;"), reasons["fat"]
    assert result.to_json()["rejected"][0]["id"] in {"huge", "fat"}


def test_max_time_leaves_jobs_unfinished(tmp_path: Path) -> None:
    result = simulate(load_workload(write(tmp_path, FOUR_JOBS)), interval=60.0, max_time=200.0)
    assert [r.id for r in result.jobs] == ["a"]
    assert sorted(result.unfinished) == ["b", "c"]  # arrived, not finished (d never arrived)


def test_jobs_completing_before_max_time_count_as_finished(tmp_path: Path) -> None:
    # c ends at 210, between the instants 180 and 240; b (230) and d (arrives 240) do not
    result = simulate(load_workload(write(tmp_path, FOUR_JOBS)), interval=60.0, max_time=220.0)
    assert times(result) == {"a": (60.0, 160.0), "c": (180.0, 210.0)}
    assert result.unfinished == ["b"]


def test_jobs_submitted_after_max_time_are_listed_not_lost(tmp_path: Path) -> None:
    """Jobs submitted after ``max_time`` were in none of the result's lists: the workload's
    jobs did not add up."""
    workload = load_workload(write(tmp_path, FOUR_JOBS + "e,500,1,10\nhuge,600,3,10\n"))
    result = simulate(workload, interval=60.0, max_time=200.0)
    listed = [r.id for r in result.jobs] + result.unfinished + result.not_submitted
    listed += [job_id for job_id, _ in result.rejected]
    assert sorted(listed) == sorted(j.request.id for j in workload.jobs)
    # in submission order; huge, which could never run, too: its submission never came
    assert result.not_submitted == ["d", "e", "huge"] and not result.rejected
    assert result.to_json()["not_submitted"] == ["d", "e", "huge"]
    assert simulate(workload, interval=60.0).not_submitted == []


def test_config_validation() -> None:
    with pytest.raises(ConfigError, match="interval"):
        SimConfig(interval=0)
    with pytest.raises(ConfigError, match="restart_cost"):
        SimConfig(restart_cost=-1)
    with pytest.raises(ConfigError, match="idle_retries"):
        SimConfig(idle_retries=-1)


@dataclass
class Deferring:
    """fifo, but a job starts only once it has waited ``patience`` seconds (as Pollux gives a
    job of age 0 no GPUs); its plans say whether the decision may change with time."""

    patience: float
    recheck_at: float = 0.0
    name: str = "deferring"

    def schedule(self, view: ClusterView) -> Plan:
        ready = [j for j in view.pending if view.time - j.request.submit_time >= self.patience]
        plan = make_policy("fifo").schedule(replace(view, pending=tuple(ready)))
        return replace(plan, recheck_at=self.recheck_at)


# one 1-GPU job submitted on a tick (t=120) to an idle cluster, nothing else to come
ON_A_TICK = Workload(
    "on-a-tick",
    "danlu",
    (
        WorkloadJob(
            JobRequest(id="a", submit_time=120.0, gpus=1, seq=0, expected_duration=30.0),
            RigidWork(30.0),
        ),
    ),
)
"""One job submitted at 120 s (a CSV's times count from its first job: built here)."""


@pytest.mark.parametrize(("patience", "start"), [(0, 120.0), (60, 180.0), (300, 420.0)])
def test_a_policy_may_defer_a_start_on_an_idle_cluster(
    tmp_path: Path, patience: float, start: float
) -> None:
    result = simulate(ON_A_TICK, Deferring(patience))
    assert times(result) == {"a": (start, start + 30)} and not result.rejected


def test_a_policy_that_never_starts_the_job_fails_it(tmp_path: Path) -> None:
    workload = ON_A_TICK
    # it would start at 720: the round at 120 and 5 more in a row start nothing
    result = simulate(workload, Deferring(patience=600), idle_retries=5)
    assert not result.jobs and dict(result.rejected).keys() == {"a"} and result.rounds == 6
    assert times(simulate(workload, Deferring(patience=600), idle_retries=10)) == {
        "a": (720.0, 750.0)
    }
    # a plan that cannot change with time fails the job at its first idle round
    stuck = simulate(workload, Deferring(patience=60, recheck_at=math.inf))
    assert not stuck.jobs and dict(stuck.rejected).keys() == {"a"} and stuck.rounds == 1


@dataclass
class Checked:
    """A policy wrapper that checks every view the engine builds."""

    inner: Policy
    views: int = 0
    plans: list[Plan] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.inner.name

    def schedule(self, view: ClusterView) -> Plan:
        self.views += 1
        milli, memory = view.usage()
        assert (milli <= MILLI_PER_GPU).all() and (milli >= 0).all()
        assert (memory <= view.cluster.arrays.gpu_memory).all() and (memory >= 0).all()
        expect = usage_from_allocations(view.cluster, (j.allocation for j in view.running))
        assert np.array_equal(milli, expect[0]) and np.array_equal(memory, expect[1])
        ids = [j.id for j in (*view.running, *view.pending)]
        assert len(ids) == len(set(ids))
        assert all(j.running for j in view.running)
        assert not any(j.running for j in view.pending)
        plan = self.inner.schedule(view)
        return plan


def mixed_workload(tmp_path: Path) -> Workload:
    """The synthetic gangs plus memory-sized GPU shares, priorities included."""
    base = synthetic_workload(jobs=50, seed=3, hours=2.0)
    lines = ["name,submit_time,gpus,duration,priority,gpu_memory"]
    for job in base.jobs:
        req = job.request
        assert isinstance(job.work, RigidWork)
        lines.append(f"{req.id},{req.submit_time},{req.gpus},{job.work.duration},{req.priority},0")
    for i in range(20):
        lines.append(f"share-{i},{i * 300},1,{600 + 37 * i},{i % 3},{(5 + (7 * i) % 30) * GiB}")
    return load_workload(write(tmp_path, "\n".join(lines) + "\n", "mixed.csv"))


@pytest.mark.parametrize("policy", ["fifo", "sjf", "priority", "tiresias", "value-density"])
def test_no_gpu_is_ever_over_allocated_and_events_are_legal(tmp_path: Path, policy: str) -> None:
    workload = mixed_workload(tmp_path)
    options = {"thresholds": (3600.0,)} if policy == "tiresias" else {}
    checked = Checked(make_policy(policy, **options))
    result = Simulator(
        Cluster.homogeneous(4, 4, "A100-40GB"),
        checked,
        workload,
        SimConfig(interval=60.0, record_events=True),
    ).run()
    assert checked.views == result.rounds > 0
    assert len(result.jobs) == len(workload.jobs) and result.unfinished == []
    by_job: dict[str, list[tuple[JobState, JobState, float]]] = {}
    for event in result.events:
        check_transition(event.old, event.new)
        assert event.reason
        by_job.setdefault(event.job_id, []).append((event.old, event.new, event.time))
    for record in result.jobs:
        events = by_job[record.id]
        assert events[0][:2] == (JobState.PENDING, JobState.RUNNING)
        assert events[-1][:2] == (JobState.RUNNING, JobState.SUCCEEDED)
        assert all(a[1] == b[0] for a, b in itertools.pairwise(events))
        assert all(a[2] <= b[2] for a, b in itertools.pairwise(events))
        assert events[0][2] == record.start_time and events[-1][2] == record.end_time
        assert sum(1 for e in events if e[1] is JobState.PREEMPTING) == record.preemptions
        assert record.start_time is not None and record.start_time >= record.submit_time
    assert sum(r.preemptions for r in result.jobs) == result.preemptions
    assert max(result.timeline.allocated_gpus) <= 16
    if policy in ("fifo", "sjf"):
        assert result.preemptions == 0


def test_simulation_is_deterministic() -> None:
    workload = synthetic_workload(jobs=80, seed=7, hours=3.0)
    cluster = Cluster.homogeneous(2, 4)
    one = simulate(workload, "tiresias", cluster).to_json(timeline=True)
    two = simulate(workload, "tiresias", cluster).to_json(timeline=True)
    assert one == two


def test_unschedulable_by_type_fails_the_jobs(tmp_path: Path) -> None:
    # a shared job that asks for more memory than any GPU has is rejected up front
    text = f"name,submit_time,gpus,duration,gpu_memory\nx,0,1,10,{81 * GiB}\ny,0,1,10,0\n"
    result = simulate(load_workload(write(tmp_path, text)), cluster=Cluster.homogeneous(1, 1))
    assert [r.id for r in result.jobs] == ["y"] and dict(result.rejected).keys() == {"x"}


def test_cluster_with_a_gpu_less_node(tmp_path: Path) -> None:
    cluster = Cluster((Node("gpu", 2), Node("cpu-only", 0)))
    result = simulate(load_workload(write(tmp_path, FOUR_JOBS)), cluster=cluster)
    assert times(result)["d"] == (240.0, 300.0)


def test_fragmentation_metric() -> None:
    # node sizes 2, 0, 2: node 0 half used, node 2 idle -> 1 of 3 free GPUs is stranded
    assert fragmentation(np.array([0, 1000, 0, 0]), [0, 2, 2]) == pytest.approx(1 / 3)
    assert fragmentation(np.array([0, 1000]), [0, 2, 2]) == 1.0
    assert fragmentation(np.array([1000, 1000]), [0]) == 0.0
    assert fragmentation(np.array([0, 0, 0, 0]), [0, 2]) == 0.0


# ------------------------------------------------------------------------ loaders
def test_danlu_loader(tmp_path: Path) -> None:
    text = "name,submit_time,gpus,duration,priority,gpu_memory\nb,5,2,0.5,3,\na,5,1,100,,1GiB\n"
    workload = load_workload(write(tmp_path, text, "mine.csv"))
    assert workload.format == "danlu" and workload.name == "mine"
    b, a = workload.jobs  # same submit time: file order
    assert (b.request.id, b.request.gpus, b.request.priority) == ("b", 2, 3)
    assert b.work == RigidWork(0.5)  # a duration below 1 s is kept as given
    assert a.request.gpu_memory == GiB and a.request.expected_duration == 100.0
    assert a.request.shares_gpu and not b.request.shares_gpu


def test_philly_loader(tmp_path: Path) -> None:
    text = (
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        "2017-10-01 10:00:30,3600,8,28800,6214e9\n"
        "2017-10-01 10:00:00,120,1,120,11cb48\n"
        "2017-10-01 10:01:00,0,1,0,\n"
        "2017-10-01 10:02:00,60,0,0,cpu\n"
    )
    workload = load_workload(write(tmp_path, text, "philly.csv"))
    assert workload.format == "philly"
    got = [(j.request.id, j.request.submit_time, j.request.gpus, j.work) for j in workload.jobs]
    assert got == [
        ("philly-1", 0.0, 1, RigidWork(120.0)),
        ("philly-0", 30.0, 8, RigidWork(3600.0)),
        ("philly-2", 60.0, 1, RigidWork(0.0)),  # 0 s, as given
    ]
    assert workload.no_gpu == ("philly-3",)  # 0 GPUs: left out, as openb's CPU-only pods
    # the virtual cluster is the project (quotas, fair-share weights)
    assert [j.request.project for j in workload.jobs] == ["11cb48", "6214e9", "default"]
    bad = write(tmp_path, "timestamp,duration,num_gpus\nyesterday,1,1\n", "bad.csv")
    with pytest.raises(DataError, match=r"bad\.csv:2: column 'timestamp'"):
        load_workload(bad)


def test_openb_loader(tmp_path: Path) -> None:
    text = (
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
        "creation_time,deletion_time,scheduled_time\n"
        "p-share,6000,2048,1,460,,LS,Running,100,700,200\n"
        "p-cpu,4000,100,0,0,,BE,Running,50,80,50\n"
        "p-gang,8000,4096,8,1000,,BE,Running,10,1010,\n"
    )
    workload = load_workload(write(tmp_path, text, "openb.csv"))
    assert workload.format == "openb"
    gang, share = workload.jobs  # CPU-only pods are not GPU jobs
    assert (gang.request.id, gang.request.gpus, gang.request.gpu_milli) == ("p-gang", 8, 1000)
    assert gang.work == RigidWork(1000.0)  # no scheduled_time: from creation
    assert (share.request.gpus, share.request.gpu_milli) == (1, 460)
    assert share.request.shares_gpu and share.request.submit_time == 100.0
    assert share.work == RigidWork(500.0)  # deletion - scheduled
    assert share.request.cpu_milli == 6000 and share.request.memory == 2048 * MiB
    result = simulate(workload, "fifo", Cluster.homogeneous(2, 4))
    assert len(result.jobs) == 2 and result.unfinished == []


OPENB_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time,scheduled_time\n"
)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        # 2.5 GPUs used to be read as 2, 0.5 as a CPU-only pod
        ("p1,1000,100,2.5,1000,0,100,0", r":2: column 'num_gpu' must be a whole number >= 0"),
        ("p1,1000,100,0.5,500,0,100,0", r":2: column 'num_gpu' must be a whole number >= 0"),
        # deleted before it was created (or scheduled): used to be a 1 s job
        (
            "p1,1000,100,1,500,100,50,",
            r":2: column 'deletion_time' \(50\) is before the pod's "
            r"creation_time \(100\)",
        ),
        (
            "p1,1000,100,1,500,10,50,60",
            r":2: column 'deletion_time' \(50\) is before the pod's "
            r"scheduled_time \(60\)",
        ),
        # no share of its one GPU, or more than the GPU
        ("p1,1000,100,1,0,0,100,", r":2: column 'gpu_milli' must be a whole number from 1 to 1000"),
        ("p1,1000,100,1,1500,0,100,", r":2: column 'gpu_milli' must be a whole number from 1"),
    ],
)
def test_openb_loader_refuses_what_it_cannot_schedule(
    tmp_path: Path, row: str, message: str
) -> None:
    with pytest.raises(DataError, match=message):
        load_workload(write(tmp_path, OPENB_HEADER + row + "\n", "openb.csv"))


def test_philly_row_without_a_timestamp_is_a_data_error(tmp_path: Path) -> None:
    text = "duration,num_gpus,timestamp\n100,1,2017-10-03 10:00:00\n100,1\n"
    with pytest.raises(DataError, match=r":3: column 'timestamp' is missing or empty"):
        load_workload(write(tmp_path, text, "philly.csv"))


def test_format_detection_errors_list_the_formats(tmp_path: Path) -> None:
    with pytest.raises(DataError) as info:
        load_workload(write(tmp_path, "who,when\nx,1\n"))
    message = str(info.value)
    for name, columns in FORMATS.items():
        assert f"{name}:" in message
        assert all(c in message for c in columns)
    assert detect_format(["name", "time", "application", "num_replicas", "batch_size"]) == "pollux"
    assert detect_format([" name", "submit_time ", "gpus", "duration"]) == "danlu"


def test_loader_value_errors(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="cannot read workload"):
        load_workload(tmp_path / "missing.csv")
    bad = write(tmp_path, "name,submit_time,gpus,duration\na,0,two,10\n", "bad.csv")
    with pytest.raises(DataError, match=r"bad\.csv:2: column 'gpus' must be a number"):
        load_workload(bad)
    neg = write(tmp_path, "name,submit_time,gpus,duration\na,-5,1,10\n", "neg.csv")
    with pytest.raises(DataError, match="must be >= 0"):
        load_workload(neg)
    nan = write(tmp_path, "name,submit_time,gpus,duration\na,0,1,nan\n", "nan.csv")
    with pytest.raises(DataError, match="must be >= 0"):
        load_workload(nan)


def test_synthetic_workload_is_deterministic() -> None:
    one, two = synthetic_workload(40, seed=1), synthetic_workload(40, seed=1)
    assert one == two and one != synthetic_workload(40, seed=2)
    submits = [j.request.submit_time for j in one.jobs]
    assert submits == sorted(submits) and len(one.jobs) == 40
    assert all(1 <= j.request.gpus <= 16 for j in one.jobs)
    assert math.isfinite(max(submits))


@pytest.mark.parametrize("policy", ["danlu", "pollux"])
def test_a_long_rigid_job_alone_takes_few_rounds(tmp_path: Path, policy: str) -> None:
    """A rigid job of 10^9 s: two rounds, not one a minute (17 million, a hang)."""
    path = tmp_path / "long.csv"
    path.write_text("name,submit_time,gpus,duration\nlong,0,2,1e9\n")
    result = Simulator(
        Cluster.homogeneous(1, 4), make_policy(policy), load_workload(path), SimConfig()
    ).run()
    assert result.jobs[0].end_time == pytest.approx(1e9)
    assert result.rounds <= 3


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "name,submit_time,gpus,duration\na,0,2.5,10\n",
            r"'gpus' must be a whole number >= 1, got '2\.5'",
        ),
        (
            "name,submit_time,gpus,duration\na,0,0,10\n",
            r"'gpus' must be a whole number >= 1, got '0'",
        ),
        ("name,time,application,num_replicas,batch_size\na,0,cifar10,1,128.5\n", r"'batch_size'"),
    ],
)
def test_counts_that_are_not_whole_numbers_are_refused(
    tmp_path: Path, text: str, message: str
) -> None:
    """2.5 GPUs was read as 2, and 0 GPUs as a job that never fits."""
    path = tmp_path / "w.csv"
    path.write_text(text)
    with pytest.raises(DataError, match=message):
        load_workload(path)
