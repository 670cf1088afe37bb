"""Job events: the history of every state change, and replaying it."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import select
from sqlalchemy.orm import Session

from danlu.core.errors import InvalidTransitionError, SpecError
from danlu.core.state import JobState, check_transition
from danlu.server.db.models import JobEvent

MAX_EVENTS = 1000


def list_events(
    session: Session,
    job_id: str | None = None,
    *,
    after_id: int = 0,
    limit: int = 100,
) -> list[JobEvent]:
    """Events in order, for one job or all, with ``id > after_id`` (to follow a stream)."""
    if not 1 <= limit <= MAX_EVENTS:
        raise SpecError("limit", f"must be between 1 and {MAX_EVENTS}")
    query = select(JobEvent).where(JobEvent.id > after_id)
    if job_id is not None:
        query = query.where(JobEvent.job_id == job_id)
    return list(session.scalars(query.order_by(JobEvent.id).limit(limit)))


def replay(events: Iterable[JobEvent]) -> JobState | None:
    """The state that ``events`` (one job's, in order) lead to; checks that each event starts
    where the previous ended and is an edge of the table (InvalidTransitionError if not)."""
    state: JobState | None = None
    for event in events:
        old = JobState(event.old) if event.old is not None else None
        new = JobState(event.new)
        if old != state:
            raise InvalidTransitionError(
                f"event {event.id} of job {event.job_id} starts at {old}, not at {state}"
            )
        if old is None:
            if new is not JobState.PENDING:
                raise InvalidTransitionError(f"job {event.job_id} was created as {new}")
        else:
            check_transition(old, new)
        state = new
    return state
