"""``priority`` with aging never starts a job that its own preemption pass would stop at once.

The case: a low-priority job that had waited long enough ranked ahead of a slightly
higher one in the (aged) queue; the queue pass started it, the next round's preemption pass
(base priorities only) preempted it for the higher one, the control plane deferred that start
while the victim drained, and once the victim was back in the queue the queue pass started
it again: two jobs preempting each other for ever, the higher one never starting. These
tests play rounds as the control plane applies plans (:func:`play`) and check that the
higher job starts and runs to its end, with no preemption, and that aging still starts the
old job where the higher one could not use the GPUs anyway.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from danlu.core.cluster import Allocation, Cluster, GpuType, Node
from danlu.core.units import GiB
from danlu.sched.policies.base import Policy
from danlu.sched.policies.priority import PriorityPolicy
from danlu.sched.registry import make_policy
from danlu.sched.view import ClusterView, JobRequest, JobStatus

ROUND = 5.0
"""Seconds between two rounds of :func:`play`."""
HOUR = 3600.0


@dataclass
class Played:
    """What :func:`play` saw: ``(round, job id)`` of each start and preemption it applied, and
    the jobs that ran to their end."""

    starts: list[tuple[int, str]] = field(default_factory=list)
    preempts: list[tuple[int, str]] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)

    def started(self) -> list[str]:
        return [job for _, job in self.starts]


def _gpus(alloc: Allocation) -> set[tuple[int, int]]:
    return {(share.node, share.gpu) for share in alloc.shares}


def play(
    policy: Policy,
    cluster: Cluster,
    jobs: Sequence[JobRequest],
    lengths: dict[str, int],
    *,
    running: Sequence[JobStatus] = (),
    now: float,
    rounds: int,
    drain_rounds: int,
) -> Played:
    """Run ``rounds`` scheduling rounds, ``ROUND`` s apart from ``now``, applying each plan as
    the control plane does (``server/services/record.py``).

    A preempted job drains (stays on its GPUs, in :attr:`ClusterView.draining`) for
    ``drain_rounds`` rounds, then is pending again. A start placed on a GPU that a draining
    job (one preempted in this very round included) still holds is deferred: the job stays
    pending and the next round plans again; a job back in the queue keeps its service, run
    time and policy marks (:attr:`Plan.marks`). A job named in ``lengths`` ends once one run
    of it has lasted that many rounds (a preempted job starts its work over, as the review's
    ``sleep`` jobs did); ``running``: jobs already running at ``now``."""
    waiting: dict[str, JobStatus] = {req.id: JobStatus(req) for req in jobs}
    on: dict[str, JobStatus] = {job.id: job for job in running}
    draining: dict[str, tuple[JobStatus, int]] = {}
    """Draining jobs and the round they are pending again."""
    played = Played()
    for rnd in range(rounds):
        t = now + rnd * ROUND
        for job_id, (job, until) in list(draining.items()):
            if rnd >= until:  # it exited: back in the queue with what it had attained
                del draining[job_id]
                waiting[job_id] = JobStatus(
                    job.request,
                    attained_service=job.attained_at(t),
                    run_time=job.run_time_at(t),
                    last_start=job.last_start,
                    preemptions=job.preemptions + 1,
                    marks=job.marks,
                )
        for job_id, job in list(on.items()):
            if job_id in lengths and t - (job.last_start or now) >= lengths[job_id] * ROUND:
                del on[job_id]
                played.finished.append(job_id)
        view = ClusterView(
            t,
            cluster,
            running=(*on.values(), *(job for job, _ in draining.values())),
            pending=tuple(sorted(waiting.values(), key=lambda job: job.request.seq)),
            draining=frozenset(draining),
        )
        plan = policy.schedule(view)
        for victim in plan.preempts:
            job = on.pop(victim.job_id)
            marked = replace(job, marks={**job.marks, **plan.marks.get(victim.job_id, {})})
            draining[victim.job_id] = (marked, rnd + 1 + drain_rounds)
            played.preempts.append((rnd, victim.job_id))
        held = {gpu for job, _ in draining.values() for gpu in _gpus(job.allocation)}
        for start in plan.starts:
            if _gpus(start.allocation) & held:
                continue  # deferred until the GPUs are free: planned again next round
            job = waiting.pop(start.job_id)
            status = JobStatus(
                job.request,
                start.allocation,
                attained_service=job.attained_service,
                run_time=job.run_time,
                last_start=t,
                preemptions=job.preemptions,
                marks={**job.marks, **plan.marks.get(start.job_id, {})},
            )
            on[start.job_id] = status
            played.starts.append((rnd, start.job_id))
    return played


def job(job_id: str, seq: int, gpus: int, submit: float, priority: int, **kw: Any) -> JobRequest:
    return JobRequest(id=job_id, submit_time=submit, gpus=gpus, priority=priority, seq=seq, **kw)


FOUR = Cluster.homogeneous(1, 4)


@pytest.mark.parametrize("drain_rounds", [0, 1], ids=["exits-at-once", "drains-a-round"])
@pytest.mark.parametrize(
    "options",
    [{}, {"aging_per_hour": 3600.0}, {"reserve": True}, {"backfill": False}],
    ids=["defaults", "fast-aging", "reserve", "strict-order"],
)
def test_an_aged_low_job_does_not_start_where_a_higher_one_would_preempt_it(
    options: dict[str, Any], drain_rounds: int
) -> None:
    """The review's case: ``low`` (priority 0) waited 3 h, ``high`` (priority 1) 1 h, both
    ask for the whole cluster; aged, ``low`` comes first in the queue, but ``high`` would
    preempt it. ``high`` starts, runs to its end, then ``low``; nothing is preempted."""
    aging = options.get("aging_per_hour", 1.0)
    gap = 2.0 / aging * HOUR  # low ahead in the aged queue by one priority step
    low = job("low", 1, 4, 0.0, 0)
    high = job("high", 2, 4, gap, 1)
    played = play(
        PriorityPolicy(**options),
        FOUR,
        (low, high),
        {"low": 3, "high": 3},
        now=gap + HOUR * 1.0 / aging,
        rounds=12,
        drain_rounds=drain_rounds,
    )
    assert played.preempts == []
    assert played.started() == ["high", "low"]
    assert played.finished == ["high", "low"]


@pytest.mark.parametrize("drain_rounds", [0, 1], ids=["exits-at-once", "drains-a-round"])
def test_the_live_scenario_converges(drain_rounds: int) -> None:
    """``s_prio.py``'s case on 4 GPUs, ``aging_per_hour=3600``: a 4-GPU blocker at priority
    10 runs, L0 (priority 0) comes at t=1 and H3 (priority 3) at t=6, both for 4 GPUs; the
    blocker ends. H3 starts, then L0."""
    policy = PriorityPolicy(aging_per_hour=3600.0)
    blocker = JobStatus(
        job("blocker", 0, 4, 0.0, 10),
        Allocation.whole_gpus([(0, g) for g in range(4)]),
        last_start=0.0,
    )
    played = play(
        policy,
        FOUR,
        (job("L0", 1, 4, 1.0, 0), job("H3", 2, 4, 6.0, 3)),
        {"blocker": 2, "L0": 2, "H3": 2},
        running=(blocker,),
        now=7.0,
        rounds=12,
        drain_rounds=drain_rounds,
    )
    assert played.preempts == []
    assert played.started() == ["H3", "L0"]
    assert played.finished == ["blocker", "H3", "L0"]


def test_a_narrow_aged_job_does_not_take_gpus_a_higher_one_needs() -> None:
    """``low`` asks for 1 GPU of 4, ``high`` for all 4: starting ``low`` first would leave
    ``high`` 3 GPUs, and the next round would preempt ``low`` for it."""
    low = job("low", 1, 1, 0.0, 0)
    high = job("high", 2, 4, 2 * HOUR, 1)
    played = play(
        PriorityPolicy(),
        FOUR,
        (low, high),
        {"low": 3, "high": 3},
        now=3 * HOUR,
        rounds=10,
        drain_rounds=0,
    )
    assert played.preempts == []
    assert played.started() == ["high", "low"]


SMALL = GpuType("small", 16 * GiB)
BIG = GpuType("big", 80 * GiB)
MIXED = Cluster((Node("b", 2, BIG), Node("s", 2, SMALL)))


@pytest.mark.parametrize(
    "high",
    [
        job("high", 2, 2, 2 * HOUR, 1, gpu_types=frozenset({"big"})),
        job("high", 2, 8, 2 * HOUR, 1),
        job("high", 2, 3, 2 * HOUR, 1),
    ],
    ids=["other-gpu-type", "wider-than-the-cluster", "wider-than-the-free-gpus"],
)
def test_aging_still_starts_the_old_job_where_the_higher_one_cannot_start(
    high: JobRequest,
) -> None:
    """A non-preemptible job holds the big GPUs; ``low`` (priority 0, aged ahead) fits on the
    small ones, ``high`` (priority 1) cannot use them (it wants big GPUs, or more GPUs than
    the cluster has, or than the small ones with ``low``'s): ``low`` starts and keeps
    running."""
    pinned = JobStatus(
        job("pinned", 0, 2, 0.0, 5, preemptible=False),
        Allocation.whole_gpus([(0, 0), (0, 1)]),
        last_start=0.0,
    )
    played = play(
        PriorityPolicy(),
        MIXED,
        (job("low", 1, 2, 0.0, 0), high),
        {"low": 4},
        running=(pinned,),
        now=3 * HOUR,
        rounds=6,
        drain_rounds=0,
    )
    assert played.starts[0] == (0, "low")
    assert played.preempts == []
    assert played.finished == ["low"]


def test_a_non_preemptible_aged_job_still_goes_first() -> None:
    """Aging orders the queue: an old job that may not be preempted starts ahead of a newer
    one of higher priority, which waits for it to end."""
    low = job("low", 1, 4, 0.0, 0, preemptible=False)
    high = job("high", 2, 4, 2 * HOUR, 1)
    played = play(
        PriorityPolicy(),
        FOUR,
        (low, high),
        {"low": 2, "high": 2},
        now=3 * HOUR,
        rounds=8,
        drain_rounds=0,
    )
    assert played.preempts == []
    assert played.started() == ["low", "high"]


def test_a_higher_job_still_preempts_a_lower_running_one() -> None:
    """What the fix leaves alone: a job of higher base priority preempts a lower running
    one, and starts once that one has drained."""
    low = JobStatus(
        job("low", 1, 4, 0.0, 0), Allocation.whole_gpus([(0, g) for g in range(4)]), last_start=0.0
    )
    played = play(
        PriorityPolicy(),
        FOUR,
        (job("high", 2, 4, 10.0, 1),),
        {"high": 2},
        running=(low,),
        now=20.0,
        rounds=8,
        drain_rounds=1,
    )
    assert played.preempts == [(0, "low")]
    assert played.started() == ["high", "low"]


@pytest.mark.parametrize("drain_rounds", [0, 1], ids=["exits-at-once", "drains-a-round"])
@pytest.mark.parametrize("name", ["tiresias", "value-density"])
def test_the_other_ranked_policies_converge_on_the_same_pattern(
    name: str, drain_rounds: int
) -> None:
    """``tiresias`` and ``value-density`` rank waiting and running jobs by one key in one
    round (no separate queue pass), so the review's pattern runs both jobs to their ends
    with no preemption (their own orders: arrival within Tiresias' first queue, value
    density)."""
    played = play(
        make_policy(name),
        FOUR,
        (
            job("low", 1, 4, 0.0, 0, expected_duration=15.0),
            job("high", 2, 4, 2 * HOUR, 1, expected_duration=15.0),
        ),
        {"low": 3, "high": 3},
        now=3 * HOUR,
        rounds=10,
        drain_rounds=drain_rounds,
    )
    assert played.preempts == []
    assert sorted(played.finished) == ["high", "low"]
