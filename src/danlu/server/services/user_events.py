"""A user's history (``GET /users/{name}/events``, ``danlu user show NAME``): what happened
to their account, one :class:`~danlu.server.db.models.UserEvent` row a change, written in
the change's own transaction (so a change rolled back leaves none).

The kinds (:data:`KINDS`): ``created``; ``changed`` (its role, the OS account its jobs
run as, its GPU quota: old and new, a change that changes nothing told of not at all);
``disabled`` (by which admin, why, and the jobs cancelled with it; a disable again that
gives a reason, or cancels jobs, is one more); ``enabled`` (who had disabled them and why,
which the enable clears off the row); ``token_issued`` and ``token_revoked`` (each token by
its public prefix and label, never its secret). ``actor`` is the name of the user who did
it, null for the control plane itself (its first start making the admin, a start writing
``admin.token`` afresh). A job run's own token (one a run, revoked when the run ends) is no
user's doing and is not told of; a revoke of all a user's tokens counts the job runs' too.

Kept for good, as job events are, but the token events: ``DANLU_RETENTION_DAYS`` deletes
what finished jobs left behind (their files, metric records), never the history of a job or
a user; the history is what an admin asks after months later (who disabled her, and why; who
made him an admin). The token events go with the tokens they name
(:func:`~danlu.server.services.users.purge_token_events`): a ``token_revoked`` event 30 days
on, as the revoked tokens' rows (a leak's inquiry has that month), a ``token_issued`` one
once its token's row is gone (a live token keeps its issue however old). A script that
issues a token and revokes it in a loop adds two events a cycle: kept for good, they grew
without end (150 bytes a cycle on SQLite, 300 on PostgreSQL, indexes counted: a token a
minute, 80 and 160 MB a year), where the other events come a few a user, from admins'
changes only; trimmed so, they are a month's worth at most.

Events of one user take ids in the order they commit: :func:`record` locks the user's row
(on PostgreSQL; SQLite's writers take turns) before it inserts, until the transaction ends,
so reading on after the last id seen (``after_id``) misses none.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from sqlalchemy import select
from sqlalchemy.orm import Session

from danlu.server.db.models import ApiToken, User, UserEvent
from danlu.server.services import history
from danlu.server.services.common import resolve_now

CREATED: Final = "created"
CHANGED: Final = "changed"
DISABLED: Final = "disabled"
ENABLED: Final = "enabled"
TOKEN_ISSUED: Final = "token_issued"
TOKEN_REVOKED: Final = "token_revoked"
KINDS: Final = (CREATED, CHANGED, DISABLED, ENABLED, TOKEN_ISSUED, TOKEN_REVOKED)

MAX_EVENTS: Final = history.MAX_EVENTS
"""The most events one read returns."""
TOKENS_NAMED: Final = 10
"""The most tokens a revocation's event names one by one (then ``and N more``)."""


def hold(session: Session, user: User) -> None:
    """Lock ``user``'s row until the transaction ends (``FOR NO KEY UPDATE``: a job
    submitted in their name meanwhile is not held up), so that their events commit in the
    order of their ids. SQLite renders no lock: its writers are serialised anyway."""
    query = select(User.id).where(User.id == user.id).with_for_update(key_share=True)
    session.execute(query).all()


def record(
    session: Session,
    user: User,
    kind: str,
    actor: User | None,
    detail: str = "",
    now: float | None = None,
) -> UserEvent:
    """Add the event ``kind`` (one of :data:`KINDS`) of ``user``, done by ``actor`` (None:
    the control plane), ``detail`` saying what changed."""
    if kind not in KINDS:
        raise ValueError(f"{kind!r} is not a user event's kind; one of {', '.join(KINDS)}")
    hold(session, user)
    event = UserEvent(
        user_id=user.id,
        time=resolve_now(now),
        kind=kind,
        actor=None if actor is None else actor.name,
        detail=detail,
    )
    session.add(event)
    session.flush()
    return event


def list_user_events(
    session: Session, user: User, *, after_id: int = 0, limit: int = 100, tail: bool = False
) -> list[UserEvent]:
    """``user``'s events with ``id > after_id``, oldest first; at most ``limit``: the oldest
    such, or with ``tail`` the newest (in order too)."""
    query = select(UserEvent).where(UserEvent.user_id == user.id)
    return history.page(session, query, UserEvent.id, after_id=after_id, limit=limit, tail=tail)


def token_text(token: ApiToken) -> str:
    """A token as an event names it: its public prefix and its label, or its job for a job
    run's (``1a2b3c4d (laptop)``); never its secret."""
    label = f"job {token.job_id}" if token.job_id is not None else token.name
    return token.prefix + (f" ({label})" if label else "")


def tokens_text(tokens: Sequence[ApiToken], every: bool) -> str:
    """The tokens a revocation revoked, as its event names them (:data:`TOKENS_NAMED` at
    most); ``every``: it revoked all the user's live tokens."""
    named = ", ".join(token_text(t) for t in tokens[:TOKENS_NAMED])
    more = len(tokens) - TOKENS_NAMED
    named += f" and {more} more" if more > 0 else ""
    if not every:
        return f"token {named}"
    return f"all live tokens ({len(tokens)}): {named}"


def shown_value(value: object) -> str:
    """A field's value in a ``changed`` event: ``none`` for None, a number as ``%g``."""
    if value is None:
        return "none"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)
