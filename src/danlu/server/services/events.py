"""Job events: the history of every state change, the cluster-wide feed of them, and
replaying it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from danlu.core.errors import InvalidTransitionError, SpecError
from danlu.core.state import JobState, check_transition
from danlu.server.db.models import Job, JobEvent, Project, User
from danlu.server.services import users
from danlu.server.services.common import state_values
from danlu.server.services.settled import settled_only

MAX_EVENTS = 1000


def list_events(
    session: Session,
    job_id: str | None = None,
    *,
    after_id: int = 0,
    limit: int = 100,
    tail: bool = False,
) -> list[JobEvent]:
    """Events in order, for one job or all, with ``id > after_id`` (to follow a stream),
    settled (:func:`~danlu.server.services.settled.settled_id`: none above one an open
    transaction may still commit); at most ``limit``: the oldest such, or with ``tail`` the
    newest, in order too."""
    if not 1 <= limit <= MAX_EVENTS:
        raise SpecError("limit", f"must be between 1 and {MAX_EVENTS}")
    query = settled_only(session, select(JobEvent).where(JobEvent.id > after_id), JobEvent)
    if job_id is not None:
        query = query.where(JobEvent.job_id == job_id)
    order = JobEvent.id.desc() if tail else JobEvent.id
    rows = list(session.scalars(query.order_by(order).limit(limit)))
    if tail:
        rows.reverse()
    return rows


@dataclass(frozen=True, slots=True)
class FeedEvent:
    """One event of the cluster-wide feed, with its job's name, user and project."""

    event: JobEvent
    job_name: str
    user: str
    project: str


def feed(
    session: Session,
    *,
    viewer: User | None = None,
    since: float | None = None,
    after_id: int = 0,
    project: str | None = None,
    user: str | None = None,
    states: Iterable[str] | None = None,
    limit: int = 100,
    tail: bool = False,
) -> list[FeedEvent]:
    """The events of every job (a non-admin ``viewer``: of their own jobs) in the order they
    happened, with ``id > after_id`` and (``since``) a time not before it, of jobs of
    ``project`` and ``user``, that led to one of ``states``; at most ``limit``: the oldest
    such (follow a stream with the last id seen as ``after_id``: only settled events are
    returned, :func:`~danlu.server.services.settled.settled_id`, so none turns up later
    below it), or with ``tail`` the newest, in order too. A non-admin naming another
    ``user`` is refused (it read as that user having no events), and so is a ``user`` or
    ``project`` that does not exist (:func:`~danlu.server.services.users.check_listed_names`)."""
    users.check_own_listing(viewer, user, "jobs' events")
    users.check_listed_names(session, project, user)
    if not 1 <= limit <= MAX_EVENTS:
        raise SpecError("limit", f"must be between 1 and {MAX_EVENTS}")
    query = (
        select(JobEvent, Job.name, User.name, Project.name)
        .join(Job, Job.id == JobEvent.job_id)
        .join(User, User.id == Job.user_id)
        .join(Project, Project.id == Job.project_id)
        .where(JobEvent.id > after_id)
    )
    query = settled_only(session, query, JobEvent)
    if since is not None:
        query = query.where(JobEvent.time >= since)
    if project is not None:
        query = query.where(Project.name == project)
    if user is not None:
        query = query.where(User.name == user)
    if states is not None:
        query = query.where(JobEvent.new.in_(state_values(states)))
    if viewer is not None and not viewer.is_admin:
        query = query.where(Job.user_id == viewer.id)
    order = JobEvent.id.desc() if tail else JobEvent.id
    rows = list(session.execute(query.order_by(order).limit(limit)))
    if tail:
        rows.reverse()
    return [FeedEvent(event, name, owner, group) for event, name, owner, group in rows]


def replay(events: Iterable[JobEvent]) -> JobState | None:
    """The state that ``events`` (one job's, in order) lead to; checks that each event starts
    where the previous ended and is an edge of the table (InvalidTransitionError if not),
    or a change of the job's fields in an unfinished state, which it stays in
    (:mod:`~danlu.server.services.job_changes`)."""
    state: JobState | None = None
    for event in events:
        old = JobState(event.old) if event.old is not None else None
        new = JobState(event.new)
        if old != state:
            raise InvalidTransitionError(
                f"event {event.id} of job {event.job_id} starts at {old}, not at {state}"
            )
        if old is not None and new is old and not old.terminal:
            continue  # a change of its fields (changed by ...): no edge
        if old is None:
            if new is not JobState.PENDING:
                raise InvalidTransitionError(f"job {event.job_id} was created as {new}")
        else:
            check_transition(old, new)
        state = new
    return state
