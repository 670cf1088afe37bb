"""``/api/v1/events``: the cluster-wide feed of job state changes."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from danlu.core.values import MAX_INT
from danlu.server.routes.deps import Caller, State
from danlu.server.routes.schemas import FeedEventOut, feed_event_out
from danlu.server.services import events

router = APIRouter(tags=["events"])


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
    states; at most ``limit``, the oldest of them (``tail``: the newest, oldest first)."""
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
