"""The job state machine: one transition table, one function, backoff."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from danlu.core.errors import InvalidTransitionError
from danlu.core.job import Job
from danlu.core.spec import parse_spec
from danlu.core.state import (
    TERMINAL_STATES,
    TRANSITIONS,
    JobState,
    check_transition,
    restart_backoff,
    transition,
)

S = JobState
EXPECTED_EDGES = {
    (S.PENDING, S.RUNNING),
    (S.PENDING, S.CANCELLED),
    (S.PENDING, S.FAILED),
    (S.RUNNING, S.SUCCEEDED),
    (S.RUNNING, S.FAILED),
    (S.RUNNING, S.CANCELLED),
    (S.RUNNING, S.PREEMPTING),
    (S.RUNNING, S.RESTARTING),
    (S.PREEMPTING, S.PENDING),
    (S.PREEMPTING, S.SUCCEEDED),  # finished before it stopped for the preemption
    (S.PREEMPTING, S.CANCELLED),
    (S.PREEMPTING, S.FAILED),
    (S.RESTARTING, S.PENDING),
    (S.RESTARTING, S.CANCELLED),
    (S.RESTARTING, S.FAILED),
}


@dataclass
class Thing:
    id: str
    state: JobState


def test_table_is_the_documented_one() -> None:
    assert set(TRANSITIONS) == set(JobState)
    table = {(a, b) for a, targets in TRANSITIONS.items() for b in targets}
    assert table == EXPECTED_EDGES


@pytest.mark.parametrize(("old", "new"), sorted(EXPECTED_EDGES))
def test_every_allowed_edge_works(old: JobState, new: JobState) -> None:
    thing = Thing("j1", old)
    event = transition(thing, new, "because", 12.5)
    assert thing.state is new
    assert (event.job_id, event.time, event.old, event.new, event.reason) == (
        "j1",
        12.5,
        old,
        new,
        "because",
    )


@pytest.mark.parametrize(
    ("old", "new"),
    [p for p in itertools.product(JobState, JobState) if p not in EXPECTED_EDGES],
)
def test_every_other_pair_raises(old: JobState, new: JobState) -> None:
    thing = Thing("j1", old)
    with pytest.raises(InvalidTransitionError, match=f"{old} -> {new}"):
        transition(thing, new, "nope", 0.0)
    assert thing.state is old  # unchanged


def test_terminal_states_have_no_exits() -> None:
    assert {s for s in JobState if s.terminal} == TERMINAL_STATES
    assert {S.SUCCEEDED, S.FAILED, S.CANCELLED} == TERMINAL_STATES
    for state in TERMINAL_STATES:
        assert TRANSITIONS[state] == frozenset()
        for new in JobState:
            with pytest.raises(InvalidTransitionError, match="terminal"):
                check_transition(state, new)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.sampled_from(list(JobState)), max_size=30))
def test_random_attempts_never_leave_the_table(attempts: list[JobState]) -> None:
    thing = Thing("j", S.PENDING)
    for new in attempts:
        old = thing.state
        try:
            event = transition(thing, new, "r", 0.0)
        except InvalidTransitionError:
            assert new not in TRANSITIONS[old]
            assert thing.state is old
        else:
            assert new in TRANSITIONS[old]
            assert (event.old, event.new) == (old, new)
            assert thing.state is new
        if old.terminal:
            assert thing.state is old


def test_job_move_records_events_and_times() -> None:
    job = Job("j", parse_spec({"name": "j"}), submit_time=100.0)
    job.move(S.RUNNING, "scheduled", 110.0)
    job.move(S.PREEMPTING, "outranked", 120.0)
    job.move(S.PENDING, "re-queued", 121.0)
    job.move(S.RUNNING, "scheduled", 130.0)
    assert job.start_time == 110.0  # the first start, not the latest
    assert job.jct is None
    job.move(S.SUCCEEDED, "done", 150.0)
    assert job.end_time == 150.0 and job.jct == 50.0
    assert [(e.old, e.new) for e in job.events] == [
        (S.PENDING, S.RUNNING),
        (S.RUNNING, S.PREEMPTING),
        (S.PREEMPTING, S.PENDING),
        (S.PENDING, S.RUNNING),
        (S.RUNNING, S.SUCCEEDED),
    ]
    with pytest.raises(InvalidTransitionError):
        job.move(S.RUNNING, "again", 160.0)
    assert len(job.events) == 5


@pytest.mark.parametrize(
    ("n", "expected"), [(0, 0.0), (-1, 0.0), (1, 10.0), (2, 20.0), (3, 40.0), (9, 2560.0)]
)
def test_restart_backoff_doubles(n: int, expected: float) -> None:
    assert restart_backoff(n) == expected


def test_restart_backoff_is_capped_and_configurable() -> None:
    assert restart_backoff(10) == 3600.0  # 10 * 2^9 = 5120 > cap
    assert restart_backoff(200) == 3600.0  # no overflow
    assert restart_backoff(3, base_seconds=5.0, cap_seconds=100.0) == 20.0
    assert restart_backoff(6, base_seconds=5.0, cap_seconds=100.0) == 100.0
    values = [restart_backoff(n, 1.0, 1e9) for n in range(1, 20)]
    assert all(b == 2 * a for a, b in itertools.pairwise(values))


@pytest.mark.parametrize("n", [1025, 1026, 2000, 10**6, 10**30])
def test_restart_backoff_is_the_cap_for_any_count(n: int) -> None:
    # the node-fault path passes an unbounded count: 10 * 2**1024 overflowed a float
    assert restart_backoff(n) == 3600.0
    assert restart_backoff(n, cap_seconds=math.inf) == math.inf  # no cap: as large as it gets
    tiny = restart_backoff(n, base_seconds=5e-324, cap_seconds=1e300)
    assert tiny == (1e300 if n > 2000 else math.ldexp(5e-324, n - 1))
