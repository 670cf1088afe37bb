"""EASY backfill (``reserve=True``): the first job that cannot start gets a reservation at the
running jobs' expected ends, and a later job starts only if it ends before it or leaves its
GPUs alone; greedy backfill lets a wide job wait for ever behind a stream of small ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from danlu.core.cluster import Allocation, Cluster, GpuType, Node
from danlu.core.units import GiB
from danlu.sched.placement.gang import FreeMap
from danlu.sched.policies import reservation
from danlu.sched.policies.fifo import FifoPolicy
from danlu.sched.policies.priority import PriorityPolicy
from danlu.sched.policies.sjf import SjfPolicy
from danlu.sched.registry import make_policy
from danlu.sched.view import ClusterView, JobRequest, JobStatus, Plan
from danlu.sim.config import SimConfig
from danlu.sim.engine import Simulator
from danlu.sim.workload import RigidWork, Workload, WorkloadJob, load_workload

TWO_BY_4 = Cluster.homogeneous(2, 4)


def _job(job_id: str, gpus: int, seq: int, duration: float | None = None) -> JobRequest:
    return JobRequest(
        id=job_id, submit_time=float(seq), gpus=gpus, seq=seq, expected_duration=duration
    )


def _running(job_id: str, node: int, gpus: int, duration: float | None) -> JobStatus:
    shares = [(node, g) for g in range(gpus)]
    return JobStatus(
        _job(job_id, gpus, -1 - node, duration), Allocation.whole_gpus(shares), last_start=0.0
    )


def _schedule(policy: Any, ends: tuple[float | None, float | None], now: float = 0.0) -> Plan:
    """Node 0 is full until ``ends[0]`` (4 GPUs), node 1 half full until ``ends[1]``; the
    queue: ``wide`` (6 GPUs, cannot start now: 2 are free), then ``long`` (2 GPUs, 500 s),
    ``unknown`` (1 GPU, no estimate) and ``short`` (2 GPUs, 50 s)."""
    running = (_running("r0", 0, 4, ends[0]), _running("r1", 1, 2, ends[1]))
    pending = (
        JobStatus(_job("wide", 6, 1, 300)),
        JobStatus(_job("long", 2, 2, 500)),
        JobStatus(_job("unknown", 1, 3)),
        JobStatus(_job("short", 2, 4, 50)),
    )
    return policy.schedule(ClusterView(now, TWO_BY_4, running=running, pending=pending))


@pytest.mark.parametrize(
    "policy",
    [
        FifoPolicy(backfill=True, reserve=True),
        SjfPolicy(reserve=True, by_gpu_time=False),
        PriorityPolicy(reserve=True, preempt=False),
    ],
    ids=lambda p: p.name,
)
def test_a_later_job_starts_only_if_it_leaves_the_reservation_alone(policy: Any) -> None:
    # at t=100 node 0 frees up: wide is reserved 4 GPUs there and the 2 free on node 1
    plan = _schedule(policy, (100.0, 1000.0))
    starts = {s.job_id for s in plan.starts}
    assert "wide" not in starts
    if policy.name == "sjf":  # it ranks short first: it takes node 1's GPUs before wide
        assert starts == {"short"}  # and wide, blocked, is reserved node 0 + what is left
        return
    assert starts == {"short"}  # ends at 50, before the reservation; long would delay it
    reason = plan.reason("long") or ""
    assert reason == "backfill holds GPUs for a job of project default (reserved to start in 100s)"
    assert plan.reason("unknown") == reason  # no estimate: it could run past it
    greedy = _schedule(FifoPolicy(backfill=True), (100.0, 1000.0))
    assert {s.job_id for s in greedy.starts} == {"long"}  # and wide waits for it too


def test_gpus_the_reserved_job_will_not_need_are_backfilled_whatever_their_length() -> None:
    # node 0 frees up at t=1000 and wide (4 GPUs) is reserved it; node 1's other job runs
    # until t=2000, so its 2 free GPUs are not wide's: a job of any length may have them
    running = (_running("r0", 0, 4, 1000.0), _running("r1", 1, 2, 2000.0))
    pending = (JobStatus(_job("wide", 4, 1, 300)), JobStatus(_job("endless", 2, 2)))
    policy = FifoPolicy(backfill=True, reserve=True)
    plan = policy.schedule(ClusterView(0.0, TWO_BY_4, running=running, pending=pending))
    assert [s.job_id for s in plan.starts] == ["endless"]
    assert {(share.node, share.gpu) for share in plan.starts[0].allocation.shares} == {
        (1, 2),
        (1, 3),
    }


def test_without_a_known_end_no_reservation_is_made_and_backfill_is_greedy() -> None:
    plan = _schedule(FifoPolicy(backfill=True, reserve=True), (None, None))
    assert {s.job_id for s in plan.starts} == {"long"}
    assert plan.reason("wide") == "needs 6 GPUs, 2 free"


def test_reserve_is_an_option_of_the_queue_policies() -> None:
    assert make_policy("fifo", backfill=True, reserve=True) == FifoPolicy(
        backfill=True, reserve=True
    )
    assert make_policy("priority", reserve=True).reserve
    assert make_policy("sjf", reserve=True).reserve


# one 4-GPU node: a wide job (4 GPUs) arrives behind a stream of 1-GPU jobs of 100 s, one
# every 30 s; with greedy backfill a free GPU is always taken again before the other three
# free up, so the wide job waits until the stream ends; two quick jobs (20 s) come after it
STREAM = "name,submit_time,gpus,duration\n" + "".join(f"s{i},{i * 30},1,100\n" for i in range(40))
WIDE_AND_QUICK = "wide,45,4,200\nq1,50,1,20\nq2,70,1,20\n"


def _starts(tmp_path: Path, name: str = "fifo", **options: Any) -> dict[str, float]:
    path = tmp_path / "w.csv"
    path.write_text(STREAM + WIDE_AND_QUICK)
    policy = make_policy(name, **options)
    result = Simulator(
        Cluster.homogeneous(1, 4), policy, load_workload(path), SimConfig(event_rounds=True)
    ).run()
    assert result.unfinished == [] and len(result.jobs) == 43
    return {r.id: float(r.start_time or 0.0) for r in result.jobs}


def test_in_the_simulator_the_wide_job_is_not_starved_and_gaps_still_fill(
    tmp_path: Path,
) -> None:
    greedy = _starts(tmp_path, backfill=True)
    easy = _starts(tmp_path, backfill=True, reserve=True)
    strict = _starts(tmp_path)
    assert greedy["wide"] >= 1000  # passed by the whole stream
    # reserved at t=130, when the two jobs running at its arrival end: as early as strict
    # FIFO starts it, and the quick jobs, which end before then, still start at once
    assert easy["wide"] == strict["wide"] == 130
    assert (easy["q1"], easy["q2"]) == (50, 70)
    assert strict["q1"] >= 130 + 200  # strict order: behind the wide job


def test_priority_defaults_let_a_stream_of_equal_jobs_pass_a_wide_one(tmp_path: Path) -> None:
    """What :class:`PriorityPolicy`'s docstring says: aging orders the queue, but with the
    defaults (greedy backfill) the jobs behind a wide one of the same priority start in
    every gap and it waits until the stream ends; ``reserve=True`` starts it as soon as the
    jobs running at its arrival end."""
    assert PriorityPolicy().backfill and not PriorityPolicy().reserve
    greedy = _starts(tmp_path, "priority")
    easy = _starts(tmp_path, "priority", reserve=True)
    assert greedy["wide"] >= 1000  # passed by the whole stream
    assert easy["wide"] == 130
    assert (easy["q1"], easy["q2"]) == (50, 70)


def test_the_reservation_is_found_past_many_ends_that_do_not_make_room() -> None:
    """The wide job needs the "big" node, whose job ends last, after 40 jobs on "small"
    nodes: the tries thin out after 16 misses and still find it (at the last end)."""
    small = GpuType("small", 16 * GiB)
    big = GpuType("big", 80 * GiB)
    cluster = Cluster((*(Node(f"s{i}", 1, small) for i in range(40)), Node("b", 2, big)))
    smalls = [
        JobStatus(
            _job(f"r{i}", 1, -100 - i, 10.0 * (i + 1)),
            Allocation.whole_gpus([(i, 0)]),
            last_start=0.0,
        )
        for i in range(40)
    ]
    on_big = Allocation.whole_gpus([(40, 0), (40, 1)])
    running = (*smalls, JobStatus(_job("rb", 2, -1, 1000.0), on_big, last_start=0.0))
    wide = JobRequest(
        id="wide",
        submit_time=0.0,
        gpus=2,
        seq=1,
        expected_duration=50.0,
        gpu_types=frozenset({"big"}),
    )
    plan = FifoPolicy(backfill=True, reserve=True).schedule(
        ClusterView(0.0, cluster, running=running, pending=(JobStatus(wide),))
    )
    assert plan.starts == ()
    later = JobStatus(_job("later", 1, 2, 5000.0))
    plan = FifoPolicy(backfill=True, reserve=True).schedule(
        ClusterView(10.0, cluster, running=running[1:], pending=(JobStatus(wide), later))
    )
    # a small GPU is free (r0 ended): later may take it, wide is reserved the big node at 1000
    assert [s.job_id for s in plan.starts] == ["later"]
    assert (
        reservation.reserve(
            ClusterView(10.0, cluster, running=running[1:]),
            FreeMap(ClusterView(10.0, cluster, running=running[1:])),
            JobStatus(wide),
            [],
        ).at
        == 1000.0
    )


def test_under_sjf_the_reservation_holds_back_only_longer_jobs() -> None:
    """What ``SjfPolicy(reserve=True)`` promises (its docstring, docs/queue-policies.md): a
    wide job's reservation holds back the jobs ranked behind it (longer ones), not shorter
    ones, so a stream of shorter jobs keeps it waiting; under ``fifo`` it starts at once."""
    jobs = [
        WorkloadJob(JobRequest("wide", 0.0, 4, seq=0, expected_duration=600.0), RigidWork(600.0))
    ]
    for i in range(1, 60):  # a 1-GPU job of 100 s every 30 s for 30 minutes
        request = JobRequest(f"s{i}", 30.0 * (i - 1), 1, seq=i, expected_duration=100.0)
        jobs.append(WorkloadJob(request, RigidWork(100.0)))
    stream = Workload("stream", "danlu", tuple(jobs))
    last_short = 30.0 * 58

    def wide_start(policy: Any) -> float:
        result = Simulator(
            Cluster.homogeneous(1, 4), policy, stream, SimConfig(restart_cost=0.0)
        ).run()
        (wide,) = (r for r in result.jobs if r.id == "wide")
        assert wide.start_time is not None
        return wide.start_time

    assert wide_start(FifoPolicy(backfill=True, reserve=True)) == 60.0
    assert wide_start(SjfPolicy(reserve=True)) > last_short
    # A longer job arriving behind the blocked wide job is held back by the reservation.
    running = (_running("r0", 0, 2, 100.0),)
    pending = (JobStatus(_job("wide", 4, 1, 50)), JobStatus(_job("longer", 2, 2, 5000)))
    plan = SjfPolicy(reserve=True, by_gpu_time=False).schedule(
        ClusterView(0.0, Cluster.homogeneous(1, 4), running=running, pending=pending)
    )
    assert plan.starts == ()
    assert (
        plan.reason("longer")
        == "backfill holds GPUs for a job of project default (reserved to start in 100s)"
    )
