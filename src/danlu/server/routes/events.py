"""``/api/v1/events``: the cluster-wide feed of job state changes."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query

from danlu.core.values import MAX_INT
from danlu.server.routes.deps import Caller, State, single_valued
from danlu.server.routes.schemas import FeedEventOut, feed_event_out
from danlu.server.services import events

router = APIRouter(tags=["events"], dependencies=[Depends(single_valued)])


@router.get("/events", response_model=list[FeedEventOut], summary="Job events, all jobs")
def list_events(
    user: Caller,
    state: State,
    since: Annotated[float | None, Query(ge=0, allow_inf_nan=False)] = None,
    after_id: Annotated[int, Query(ge=0, le=MAX_INT)] = 0,
    project: Annotated[str | None, Query(max_length=64)] = None,
    owner: Annotated[str | None, Query(alias="user", max_length=64)] = None,
    states: Annotated[
        list[str] | None,
        Query(alias="state", description="the state a change led to; repeat for several"),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=events.MAX_EVENTS)] = 100,
    tail: bool = False,
) -> list[dict[str, Any]]:
    """State changes of every job (a non-admin: of their own jobs) in the order they
    happened, oldest first: from ``since`` (POSIX seconds), after event ``after_id`` (to
    follow the feed, pass the last id seen), of a project's or a user's jobs, into the given
    states; at most ``limit``, the oldest of them (``tail``: the newest, oldest first).

    Following the feed misses nothing: on PostgreSQL an event's id is taken when it is
    inserted, not when it commits, so an event could commit after one with a higher id had
    been returned, below the ``after_id`` a follower then asks from. So only settled events
    are returned: none above the lowest id an open transaction may still commit
    (:func:`~danlu.server.services.settled.settled_id`; each transaction writing events holds
    an advisory lock saying where its ids start). An event shows once every event before it
    has committed or rolled back: as soon as the scheduler's or an API call's transaction
    ends, later if a transaction that wrote an event stays open (it holds the feed back
    until it ends; ``pg_locks`` shows it). SQLite's writers take turns: its ids commit in
    order, and nothing is held back."""
    with state.db.read_session() as session:
        rows = events.feed(
            session,
            viewer=user,
            since=since,
            after_id=after_id,
            project=project,
            user=owner,
            states=states,
            limit=limit,
            tail=tail,
        )
        return [feed_event_out(row) for row in rows]
