"""The danlu policy's running-job inputs on their own
(:mod:`danlu.sched.policies.danlu_running`): holds, growth permissions and rank keys."""

from __future__ import annotations

import math

import numpy as np

from danlu.core.cluster import Allocation
from danlu.sched.policies.danlu import DanluPolicy
from danlu.sched.policies.danlu_place import MOVES, PROMOTED
from danlu.sched.policies.danlu_running import RunningKnobs, running_entry, running_ranks
from danlu.sched.view import JobRequest, JobStatus

KNOBS = RunningKnobs(
    min_hold=200.0,
    move_slack=5.0,
    max_moves=20,
    new_job_seconds=600.0,
    starve_hold=1800.0,
    packed_sync=True,
    aging=7200.0,
    width=3.0,
    rank_hysteresis=0.5,
    move_budget=0,
    grow_after=60.0,
)


def running(
    job_id: str,
    gpus: int,
    last_start: float,
    *,
    expected: float | None = None,
    marks: dict[str, float] | None = None,
    submit: float = 0.0,
) -> JobStatus:
    request = JobRequest(
        id=job_id, submit_time=submit, gpus=gpus, expected_duration=expected, seq=int(submit)
    )
    return JobStatus(
        request=request,
        allocation=Allocation.whole_gpus([(0, i) for i in range(gpus)]),
        last_start=last_start,
        marks=marks or {},
    )


def test_the_policy_builds_its_running_knobs_from_its_own() -> None:
    policy = DanluPolicy(min_hold=321.0, move_budget=7, width=2.5, grow_after=11.0)
    knobs = policy._running_knobs()
    assert (knobs.min_hold, knobs.move_budget, knobs.width, knobs.grow_after) == (
        321.0,
        7,
        2.5,
        11.0,
    )


def test_an_unmeasured_job_keeps_its_gpus_for_the_rest_of_its_expected_time() -> None:
    job = running("a", 2, last_start=100.0, expected=1000.0, marks={MOVES: 5.0})
    entry = running_entry(job, now=400.0, gpn=4, knobs=KNOBS)
    assert entry.hold == 200.0 * (1.0 + 5.0 / 5.0)  # each move lengthens the hold
    assert not entry.stuck
    assert entry.options is not None and len(entry.options) == 1
    (keep,) = entry.options
    assert (keep.gpus, keep.seconds, keep.keep) == (2, 700.0, True)


def test_ranks_hold_the_recent_the_stuck_and_the_promoted() -> None:
    now = 10_000.0
    jobs = [
        running("recent", 1, last_start=now - 50.0, expected=5000.0),
        running("free", 1, last_start=now - 5000.0, expected=9000.0),
        running("stuck", 1, last_start=now - 5000.0, marks={MOVES: 20.0}),
        running("promoted", 2, last_start=now - 5000.0, marks={PROMOTED: now - 100.0}),
    ]
    runs = [running_entry(job, now, 4, KNOBS) for job in jobs]
    ranks = running_ranks(runs, now, total=8, knobs=KNOBS)
    assert ranks.held.tolist() == [True, False, True, True]
    # held and past grow_after: may grow; the recent one is within grow_after
    assert ranks.may_grow.tolist() == [False, False, True, True]
    assert ranks.promoted_gpus == (2, 2)
    # submitted at 0: the recent job waited 9,950 s, the others (run 5,000 s) 5,000 s
    assert np.allclose(ranks.weight, [1.0 + 9950.0 / 7200.0] + [1.0 + 5000.0 / 7200.0] * 3)
    # the free job: 4,000 s left, 1 GPU of 8, ranked half as long, over its weight
    weight = 1.0 + 5000.0 / 7200.0
    assert math.isclose(float(ranks.keys[1]), 4000.0 * (1.0 + 3.0 / 8.0) * 0.5 / weight)


def test_the_move_budget_holds_all_but_the_last_ranked() -> None:
    now = 10_000.0
    jobs = [
        running(f"j{i}", 1, last_start=0.0, expected=20_000.0 + 1000.0 * i, submit=float(i))
        for i in range(4)
    ]
    runs = [running_entry(job, now, 4, KNOBS) for job in jobs]
    knobs = RunningKnobs(**{**KNOBS.__dict__, "move_budget": 1})
    held = running_ranks(runs, now, total=8, knobs=knobs).held
    assert held.tolist() == [True, True, True, False]  # the longest stays open to a move
