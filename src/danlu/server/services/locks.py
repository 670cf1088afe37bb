"""dstack-style row locks: claim rows with a token, work outside the transaction, write back
only while the token still matches.

``claim`` takes ``SELECT ... FOR UPDATE SKIP LOCKED`` row locks on PostgreSQL, so concurrent
claimers never wait on each other and never get the same row; on SQLite (one writer at a time,
transactions begin IMMEDIATE) a compare-and-set ``UPDATE`` does the same. A lock whose
``lock_expires_at`` has passed can be claimed again: a dead worker's rows are picked up, and
its stale token can no longer write back.

The expiries are wall-clock times, the only clock that planes on several hosts sharing one
database have in common, so a step of a host's wall clock (an NTP step, ``date -s``) moves
them all at once, as that host sees them. A step forward makes every lock look expired to
that host: only the lease holder's reconcile loop claims job rows (one pass at a time), so
its own job locks are claimed by no one else; the ``scheduler`` lease is renewed with its
token whatever its expiry says (:func:`extend`), and another plane takes it over only once
no one renewed it for its TTL as watched on that plane's steady clock, never on its expiry
alone (:func:`~danlu.server.plane_lease.take_lease`), so a standby whose clock stepped ahead
neither leads nor claims job rows beside the live holder; and a webhook sender never claims
the deliveries it is posting itself (``posting`` of
:func:`~danlu.server.services.webhooks.claim_due`), nor one another sender claimed until it
found that claim unchanged for the claim's TTL on its own steady clock
(:class:`~danlu.server.services.webhooks.ClaimWatch`), whatever its expiry says: a step of
either host's clock, ahead or back, neither posts a delivery twice nor holds a dead
sender's claims back the step's length. The ``scheduler`` lease is judged by its holder's
renewals likewise (:class:`~danlu.server.plane_lease.LeaseWatch`), and the job locks of a
holder found dead are released with it (:func:`~danlu.server.plane_lease.take_over`).

Each helper here runs and COMMITS its own short transaction: call it on a session with no
pending work of its own.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, and_, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from danlu.server.db.models import Job, Lease, WebhookDelivery
from danlu.server.services.common import resolve_now

Locked = TypeVar("Locked", Job, Lease, WebhookDelivery)
Key = Any


def free(model: type[Locked], now: float) -> ColumnElement[bool]:
    """The rows of ``model`` unlocked at ``now``: never locked, given back, or their lock
    expired."""
    return or_(model.lock_expires_at.is_(None), model.lock_expires_at < now)


def claim(
    session: Session,
    model: type[Locked],
    ids: Iterable[Key],
    token: str,
    ttl: float,
    now: float | None = None,
    owner: str | None = None,
) -> list[Key]:
    """Lock the rows of ``ids`` that are unlocked (or whose lock expired) with ``token`` for
    ``ttl`` seconds; return the ids claimed (sorted). Commits."""
    return claim_where(session, model, [model.id.in_(list(ids))], token, ttl, now, owner)


def claim_where(
    session: Session,
    model: type[Locked],
    conditions: Sequence[ColumnElement[bool]],
    token: str,
    ttl: float,
    now: float | None = None,
    owner: str | None = None,
    limit: int | None = None,
    order_by: Sequence[Any] = (),
    unlocked: ColumnElement[bool] | None = None,
) -> list[Key]:
    """Like :func:`claim` for up to ``limit`` rows matching ``conditions`` (a fetcher).
    ``unlocked``: the rows the claimer may take, in place of those :func:`free` at ``now``
    (a webhook sender judges another's claims on its steady clock, not on their expiry:
    :func:`~danlu.server.services.webhooks.claim_due`). Commits."""
    t = resolve_now(now)
    where = and_(*conditions, free(model, t) if unlocked is None else unlocked)
    values = {"lock_token": token, "lock_expires_at": t + ttl, "lock_owner": owner}
    if session.get_bind().dialect.name == "postgresql":
        query = select(model.id).where(where).order_by(*order_by, model.id)
        if limit is not None:
            query = query.limit(limit)
        got = list(session.scalars(query.with_for_update(skip_locked=True)))
        if got:
            _update(session, model, model.id.in_(got), values)
    else:
        if limit is not None:
            query = select(model.id).where(where).order_by(*order_by, model.id).limit(limit)
            where = model.id.in_(query.scalar_subquery())
        _update(session, model, where, values)
        got = list(session.scalars(select(model.id).where(*conditions, model.lock_token == token)))
    session.commit()
    return sorted(got)


def _update(
    session: Session, model: type[Locked], where: ColumnElement[bool], values: Mapping[str, Any]
) -> int:
    # Core UPDATE (no ORM version check): lock columns are not part of the optimistic version.
    result = session.execute(
        update(model).where(where).values(**values).execution_options(synchronize_session=False)
    )
    return int(getattr(result, "rowcount", 0) or 0)


def extend(
    session: Session,
    model: type[Locked],
    ids: Iterable[Key],
    token: str,
    ttl: float,
    now: float | None = None,
) -> list[Key]:
    """Heartbeat: push the expiry of rows still held with ``token``; return those ids.
    Commits."""
    t = resolve_now(now)
    ids = list(ids)
    _update(
        session,
        model,
        and_(model.id.in_(ids), model.lock_token == token),
        {"lock_expires_at": t + ttl},
    )
    held = list(
        session.scalars(select(model.id).where(model.id.in_(ids), model.lock_token == token))
    )
    session.commit()
    return sorted(held)


def release_if_token(session: Session, model: type[Locked], ids: Iterable[Key], token: str) -> int:
    """Unlock the rows of ``ids`` still held with ``token``; return how many. Commits."""
    count = _update(
        session,
        model,
        and_(model.id.in_(list(ids)), model.lock_token == token),
        {"lock_token": None, "lock_expires_at": None, "lock_owner": None},
    )
    session.commit()
    return count


def holds(session: Session, model: type[Locked], key: Key, token: str) -> bool:
    """True if row ``key`` is locked with ``token`` (inside the caller's transaction; on
    PostgreSQL the row is also locked ``FOR UPDATE`` until it ends, so a write-back guarded by
    this check cannot race a re-claim)."""
    query = select(model.lock_token).where(model.id == key)
    if session.get_bind().dialect.name == "postgresql":
        query = query.with_for_update()
    return session.scalar(query) == token


def update_if_token(
    session: Session, model: type[Locked], key: Key, token: str, values: Mapping[str, Any]
) -> bool:
    """Write ``values`` to row ``key`` only if it is still locked with ``token`` (part of the
    caller's transaction: does not commit). False means the lock was lost: drop the result."""
    return _update(session, model, and_(model.id == key, model.lock_token == token), values) == 1


class LeaseTake(enum.Enum):
    """What :func:`take_lease` did."""

    RENEWED = "renewed"
    """The lease was this token's already: its expiry was pushed."""
    TAKEN = "taken"
    """The lease was free (or its holder's had expired): it is this token's now."""
    HELD = "held"
    """Another token holds the lease (unexpired): nothing changed."""


def ensure_lease(session: Session, name: str) -> None:
    """Make the named singleton lease's row if there is none yet (free). Commits."""
    if session.get(Lease, name) is None:
        try:
            with session.begin_nested():
                session.add(Lease(id=name))
        except IntegrityError:
            pass  # another process created it first
        session.commit()


def take_lease(
    session: Session,
    name: str,
    token: str,
    ttl: float,
    now: float | None = None,
    owner: str | None = None,
) -> LeaseTake:
    """Take (or renew, with the same token) the named singleton lease, saying which: one
    whose expiry has passed on this host's clock is taken (the ``scheduler`` lease is taken
    over by its holder's renewals instead: :func:`~danlu.server.plane_lease.take_lease`).
    Commits."""
    ensure_lease(session, name)
    if name in extend(session, Lease, [name], token, ttl, now):
        return LeaseTake.RENEWED
    if name in claim(session, Lease, [name], token, ttl, now, owner):
        return LeaseTake.TAKEN
    return LeaseTake.HELD


def acquire_lease(
    session: Session,
    name: str,
    token: str,
    ttl: float,
    now: float | None = None,
    owner: str | None = None,
) -> bool:
    """Take (or renew, with the same token) the named singleton lease; whether this token
    holds it. Commits."""
    return take_lease(session, name, token, ttl, now, owner) is not LeaseTake.HELD
