"""Job states, the ONE table of allowed transitions, and the one function that changes state.

::

    PENDING ──> RUNNING ──> SUCCEEDED | FAILED | CANCELLED
       ^          │
       │          ├──> PREEMPTING ──> PENDING      (checkpointed, re-queued;
       │          │                 └──> SUCCEEDED   or finished before it stopped)
       │          └──> RESTARTING ──> PENDING      (after a failure, with backoff)
       └── CANCELLED from PENDING / PREEMPTING / RESTARTING too
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from danlu.core.errors import InvalidTransitionError


class JobState(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    PREEMPTING = "PREEMPTING"
    RESTARTING = "RESTARTING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})

TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.PENDING: frozenset({JobState.RUNNING, JobState.CANCELLED, JobState.FAILED}),
    JobState.RUNNING: frozenset(
        {
            JobState.SUCCEEDED,
            JobState.FAILED,
            JobState.CANCELLED,
            JobState.PREEMPTING,
            JobState.RESTARTING,
        }
    ),
    JobState.PREEMPTING: frozenset(
        {JobState.PENDING, JobState.SUCCEEDED, JobState.CANCELLED, JobState.FAILED}
    ),
    JobState.RESTARTING: frozenset({JobState.PENDING, JobState.CANCELLED, JobState.FAILED}),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
}
"""Every allowed edge. PENDING -> FAILED is for jobs rejected or out of retries while queued."""


@dataclass(frozen=True, slots=True)
class Event:
    """One state change of one job, with the reason."""

    job_id: str
    time: float
    old: JobState
    new: JobState
    reason: str


class HasState(Protocol):
    """Anything with an id and a mutable state (a core Job, a simulated job, a DB row)."""

    @property
    def id(self) -> str: ...

    state: JobState


def as_state(value: JobState | str) -> JobState:
    """``value`` as a :class:`JobState`: a state's name as text (``"RUNNING"``, as a
    database row or a JSON body holds it) is the state; anything else is an
    :class:`InvalidTransitionError` listing the states."""
    try:
        return JobState(value)
    except ValueError:
        states = ", ".join(JobState)
        raise InvalidTransitionError(
            f"{value!r} is not a job state; the states are {states}"
        ) from None


def check_transition(old: JobState | str, new: JobState | str) -> None:
    """Raise :class:`InvalidTransitionError` unless ``old -> new`` is in :data:`TRANSITIONS`
    (either given as a state or its name, :func:`as_state`)."""
    old, new = as_state(old), as_state(new)
    if new not in TRANSITIONS[old]:
        allowed = ", ".join(sorted(TRANSITIONS[old])) or "none (terminal)"
        raise InvalidTransitionError(f"{old} -> {new} is not allowed; from {old}: {allowed}")


def transition(job: HasState, new: JobState | str, reason: str, time: float) -> Event:
    """Change ``job.state`` to ``new`` if the table allows it and return the event.

    ``job.state`` is set to the :class:`JobState` (a state's name given as text is
    converted), so that ``job.state is JobState.RUNNING`` and ``job.state.terminal`` hold
    afterwards; the event's ``old`` and ``new`` are states too."""
    old, state = as_state(job.state), as_state(new)
    check_transition(old, state)
    job.state = state
    return Event(job.id, time, old, state, reason)


_MAX_BACKOFF_EXPONENT = 2100
"""Doublings past which any positive float overflows (2^-1074 * 2^2100 > 2^1024): a larger
exponent cannot change the capped delay, so ``restarts`` is clamped to it."""


def restart_backoff(
    restarts: int, base_seconds: float = 10.0, cap_seconds: float = 3600.0
) -> float:
    """Delay before the ``restarts``-th restart: ``T0 * 2^(n-1)``, capped.

    Any count is safe: the node-fault path passes an unbounded count of faults, and past the
    cap (or past what a float holds) the delay is ``cap_seconds``."""
    if restarts < 1:
        return 0.0
    exponent = min(restarts - 1, _MAX_BACKOFF_EXPONENT)
    try:
        delay = math.ldexp(base_seconds, exponent)
    except OverflowError:
        delay = math.copysign(math.inf, base_seconds)
    return float(min(cap_seconds, delay))
