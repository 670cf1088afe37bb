"""Webhooks: HTTP endpoints told of job state changes.

An admin registers an endpoint (:func:`create`) with the states it wants to hear of (by
default the ends: SUCCEEDED, FAILED, CANCELLED), and optionally one project or one user whose
jobs only count. Every state change of a matching job adds a :class:`WebhookDelivery` row in
the transaction that makes the change (:func:`enqueue`, called where job events are written),
so a message exists exactly when its change was committed. The sender
(:class:`danlu.server.webhook_sender.WebhookSender`) claims due rows with a token
(:func:`claim_due`: one at a time of each webhook), builds their messages
(:func:`outgoing`), posts them outside any transaction, and writes each outcome back only
while its token still matches (:func:`record`): delivered on a 2xx answer, else tried again
after a growing backoff (counted from the attempt's end) until :data:`MAX_ATTEMPTS` attempts
have failed. A webhook's URL is checked, and shown with its password hidden, as
:mod:`~danlu.server.services.webhook_urls` does.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import threading
import unicodedata
import weakref
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Engine,
    and_,
    delete,
    exists,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.orm import Session, aliased

from danlu.core.errors import SpecError
from danlu.core.state import JobState
from danlu.core.values import check_values, quoted
from danlu.server.db.models import Base, Job, Webhook, WebhookDelivery
from danlu.server.errors import NotFoundError
from danlu.server.loops import steady_clock
from danlu.server.services import locks
from danlu.server.services.common import IN_CHUNK, by_id, resolve_now
from danlu.server.services.projects import project_for_use
from danlu.server.services.users import get_user
from danlu.server.services.webhook_urls import check_url
from danlu.server.services.webhook_urls import hide_password as hide_password  # re-exported
from danlu.server.services.webhook_urls import shown_url as shown_url  # re-exported

DEFAULT_STATES = (JobState.SUCCEEDED.value, JobState.FAILED.value, JobState.CANCELLED.value)
"""The states a webhook hears of when it names none: a job's end."""
MAX_ATTEMPTS = 12
"""Attempts of one delivery before it is given up (the backoff, 10 s doubling up to an
hour, spreads them over about 3.4 hours)."""
FIRST_BACKOFF_SECONDS = 10.0
MAX_BACKOFF_SECONDS = 3600.0
MAX_WEBHOOKS = 100
"""Webhooks at most: each state change is checked against every one."""
KEEP_DONE_SECONDS = 7 * 86400.0
"""How long delivered and given-up rows stay (for ``GET /webhooks/{id}/deliveries``)."""
SIGNATURE_HEADER = "X-Danlu-Signature"
MAX_ERROR_LENGTH = 1000
"""Characters of an attempt's error kept (``last_error``)."""
_UNREADABLE = ("Cc", "Cs")
_DELIVERIES = Base.metadata.tables[WebhookDelivery.__tablename__]


def check_states(states: Sequence[str] | None) -> list[str]:
    """The job states named (in any case), in the state table's order (the default when
    ``states`` is None: left out). An empty list is refused: a webhook that hears of no
    state is a mistake, and taking it for the default told the endpoint of what it did not
    ask for."""
    if states is None:
        return list(DEFAULT_STATES)
    if not states:
        raise SpecError(
            "states",
            "names no job state: name one or more, or leave it out for the default "
            + ", ".join(DEFAULT_STATES),
        )
    known = [s.value for s in JobState]
    named = [str(state).upper() for state in states]  # any case, as GET /jobs?state= reads
    for index, state in enumerate(named):
        if state not in known:
            raise SpecError(
                f"states.{index}",
                f"{quoted(states[index])} is not a job state; one of {', '.join(known)}",
            )
    return [s for s in known if s in named]


def _named(session: Session, field: str, name: str | None) -> int | None:
    """The id of the project or user (``field``) called ``name`` (None for None); a
    :class:`SpecError` naming ``field`` for a name with NUL characters (PostgreSQL's text
    takes none) or one that names nothing. The ``default`` project is made when no job made
    it yet (it is made on first use, and is there for every job that names no project)."""
    if name is None:
        return None
    check_values(name, field)
    try:
        if field == "project":
            return project_for_use(session, name).id
        return get_user(session, name).id
    except NotFoundError:
        raise SpecError(field, f"{field} {quoted(name)} not found; add it first") from None


def create(
    session: Session,
    url: str,
    creator: str,
    *,
    states: Sequence[str] | None = None,
    project: str | None = None,
    user: str | None = None,
    now: float | None = None,
) -> Webhook:
    """Register an endpoint (the caller checked that an admin asks); its ``secret`` is new."""
    if (session.scalar(select(func.count()).select_from(Webhook)) or 0) >= MAX_WEBHOOKS:
        raise SpecError(  # no field of the body is at fault: the count is
            "",
            f"there are {MAX_WEBHOOKS} webhooks already, the most a control plane keeps (each "
            "job state change is checked against every one); remove one first "
            "(danlu webhook rm ID, DELETE /webhooks/{id})",
        )
    hook = Webhook(
        id=secrets.token_hex(6),
        url=check_url(url),
        secret=secrets.token_hex(32),
        states=check_states(states),
        project_id=_named(session, "project", project),
        user_id=_named(session, "user", user),
        created_at=resolve_now(now),
        created_by=creator,
    )
    session.add(hook)
    session.flush()
    return hook


def list_webhooks(session: Session) -> list[Webhook]:
    """Every webhook, oldest first."""
    return list(session.scalars(select(Webhook).order_by(Webhook.seq)))


def get(session: Session, webhook_id: str) -> Webhook:
    """The webhook with id ``webhook_id`` or a unique prefix of 4+ of its characters, as a
    job's or a sweep's (:func:`~danlu.server.services.common.by_id`): NotFoundError naming
    it, ConflictError naming the webhooks an ambiguous prefix matched."""
    return by_id(session, Webhook, "webhook", webhook_id)


def remove(session: Session, webhook_id: str) -> None:
    """Delete a webhook and its deliveries, sent or not."""
    hook = get(session, webhook_id)
    session.execute(delete(WebhookDelivery).where(WebhookDelivery.webhook_seq == hook.seq))
    session.delete(hook)
    session.flush()


def ping(session: Session, webhook_id: str, now: float | None = None) -> WebhookDelivery:
    """Queue a ``ping`` message to the webhook (to check the endpoint and its secret)."""
    t = resolve_now(now)
    hook = get(session, webhook_id)
    if not _kept(session, [hook.seq]):  # removed meanwhile
        raise NotFoundError("webhook", hook.id)
    delivery = WebhookDelivery(
        webhook_seq=hook.seq, kind="ping", payload={}, created_at=t, next_attempt_at=t
    )
    session.add(delivery)
    session.flush()
    return delivery


@dataclass(frozen=True)
class Counts:
    """One webhook's deliveries by outcome, and its last failure."""

    pending: int = 0
    delivered: int = 0
    failed: int = 0
    last_error: str | None = None


def counts(session: Session) -> dict[int, Counts]:
    """Each webhook's deliveries kept (pending, delivered, given up), by ``Webhook.seq``."""
    rows = session.execute(
        select(
            WebhookDelivery.webhook_seq,
            WebhookDelivery.done_at.is_(None),
            WebhookDelivery.delivered,
            func.count(),
        ).group_by(
            WebhookDelivery.webhook_seq,
            WebhookDelivery.done_at.is_(None),
            WebhookDelivery.delivered,
        )
    ).all()
    tally: dict[int, dict[str, int]] = {}
    for seq, open_, delivered, count in rows:
        key = "pending" if open_ else "delivered" if delivered else "failed"
        tally.setdefault(seq, {})[key] = int(count)
    errors = dict(
        session.execute(
            select(WebhookDelivery.webhook_seq, WebhookDelivery.last_error).where(
                WebhookDelivery.id.in_(
                    select(func.max(WebhookDelivery.id))
                    .where(WebhookDelivery.last_error.is_not(None))
                    .group_by(WebhookDelivery.webhook_seq)
                )
            )
        ).all()
    )
    return {
        seq: Counts(**tally.get(seq, {}), last_error=errors.get(seq))
        for seq in set(tally) | set(errors)
    }


def deliveries(session: Session, webhook_id: str, limit: int = 100) -> list[WebhookDelivery]:
    """The webhook's deliveries kept, newest first."""
    hook = get(session, webhook_id)
    query = select(WebhookDelivery).where(WebhookDelivery.webhook_seq == hook.seq)
    return list(session.scalars(query.order_by(WebhookDelivery.id.desc()).limit(limit)))


# -- the outbox: written with the job events --------------------------------------------------


def enqueue(session: Session, events: Sequence[Mapping[str, Any]]) -> int:
    """Add a delivery for each pair of a state change in ``events`` (rows of
    :class:`~danlu.server.db.models.JobEvent`'s columns: ``job_id``, ``time``, ``old``,
    ``new``, ``reason``; with ``project_id`` and ``user_id`` when the caller has them, else
    they are read when a webhook needs them) and a webhook it matches, in the caller's
    transaction; returns how many. One small query when there are no webhooks."""
    if not events:
        return 0
    hooks = session.execute(
        select(Webhook.seq, Webhook.states, Webhook.project_id, Webhook.user_id)
    ).all()
    wanted = [h for h in hooks if any(e["new"] in h.states for e in events)]
    if wanted:
        there = _kept(session, [hook.seq for hook in wanted])
        wanted = [hook for hook in wanted if hook.seq in there]
    if not wanted:
        return 0
    owners: dict[str, tuple[int, int]] = {}
    for event in events:
        if "project_id" in event:
            owners[str(event["job_id"])] = (event["project_id"], event["user_id"])
    if any(h.project_id is not None or h.user_id is not None for h in wanted):
        ids = sorted({str(e["job_id"]) for e in events} - set(owners))
        for start in range(0, len(ids), IN_CHUNK):
            query = select(Job.id, Job.project_id, Job.user_id).where(
                Job.id.in_(ids[start : start + IN_CHUNK])
            )
            owners.update((i, (p, u)) for i, p, u in session.execute(query).all())
    rows = []
    for event in events:
        project_id, user_id = owners.get(str(event["job_id"]), (None, None))
        for hook in wanted:
            if event["new"] not in hook.states:
                continue
            if hook.project_id is not None and hook.project_id != project_id:
                continue
            if hook.user_id is not None and hook.user_id != user_id:
                continue
            rows.append(
                {
                    "webhook_seq": hook.seq,
                    "kind": "job.state",
                    "job_id": event["job_id"],
                    "payload": {
                        key: event[key] for key in ("job_id", "time", "old", "new", "reason")
                    },
                    "created_at": event["time"],
                    "attempts": 0,
                    "next_attempt_at": event["time"],
                    "delivered": False,
                }
            )
    if rows:
        session.connection().execute(insert(_DELIVERIES), rows)
    return len(rows)


def _kept(session: Session, seqs: Sequence[int]) -> set[int]:
    """Those of the webhooks ``seqs`` that are still there, on PostgreSQL with their rows
    locked ``FOR KEY SHARE`` until the transaction ends, as the foreign key of a delivery
    inserted for them locks them: a webhook removed (:func:`remove`) after :func:`enqueue`
    (or :func:`ping`) read it, before the delivery was inserted, made the insert fail its
    foreign key, and with it the transaction it was part of (a job's state change: a
    cancel, a submission, a whole reconcile round). A removal under way now waits for this
    transaction (its cascade then deletes these deliveries), or committed before: the
    webhook is left out. SQLite serialises writers: nothing can come in between there."""
    if session.get_bind().dialect.name != "postgresql":
        return set(seqs)
    query = select(Webhook.seq).where(Webhook.seq.in_(list(seqs))).order_by(Webhook.seq)
    return set(session.scalars(query.with_for_update(read=True, key_share=True)))


# -- the sender's steps ---------------------------------------------------------------------


class ClaimWatch:
    """The claims another sender holds on the deliveries due to be posted next, each with
    when this process first found it, on a clock that no one sets (``steady``; by default
    :func:`~danlu.server.loops.steady_clock`), as the ``scheduler`` lease is watched
    (:class:`~danlu.server.plane_lease.LeaseWatch`). A claim's expiry is a wall-clock time
    another host wrote: a step of this host's clock ahead made a live claim look expired,
    one back made it look further ahead than any is taken for, and the delivery another
    plane was posting was posted a second time. A claim is never renewed, and its post ends
    within its TTL (the sender's ``timeout`` and the writes of its outcome), which unlocks it
    or, failed, claims it anew with another token: one found unchanged for its TTL has a
    sender that died or hung past it, whatever the wall clocks say (:meth:`lapsed`).
    Thread-safe: the senders of one process on one database share one
    (:func:`claim_watch`)."""

    def __init__(self, steady: Callable[[], float] | None = None) -> None:
        self._steady = steady
        self._seen: dict[int, tuple[str, float]] = {}
        """Delivery id -> (its claim's token, when it was first found so, steady)."""
        self._lock = threading.Lock()

    def lapsed(self, session: Session, now: float, ttl: float) -> list[tuple[int, str]]:
        """The claims (delivery id, token) of the deliveries claimable at ``now`` but for
        their claim (:func:`_claimable`) that were found unchanged for ``ttl`` seconds of
        the watch's clock; a claim found for the first time, or with another token than
        before, is timed from now. A read."""
        query = select(WebhookDelivery.id, WebhookDelivery.lock_token).where(
            *_claimable(now), WebhookDelivery.lock_token.is_not(None)
        )
        rows = session.execute(query).all()
        steady = (self._steady or steady_clock)()
        with self._lock:
            seen: dict[int, tuple[str, float]] = {}
            for delivery_id, token in rows:
                before = self._seen.get(delivery_id)
                since = before[1] if before is not None and before[0] == token else steady
                seen[delivery_id] = (str(token), since)
            self._seen = seen
        return [(i, token) for i, (token, since) in seen.items() if steady - since >= ttl]


_WATCHES: weakref.WeakKeyDictionary[Engine, ClaimWatch] = weakref.WeakKeyDictionary()
_WATCHES_LOCK = threading.Lock()


def claim_watch(session: Session) -> ClaimWatch:
    """This process's :class:`ClaimWatch` of the database ``session`` is bound to (made at
    its first use): what a sender watched is kept from one pass to the next."""
    bind = session.get_bind()
    engine = bind if isinstance(bind, Engine) else bind.engine
    with _WATCHES_LOCK:
        watch = _WATCHES.get(engine)
        if watch is None:
            watch = _WATCHES[engine] = ClaimWatch()
        return watch


def _unclaimed(lapsed: Sequence[tuple[int, str]]) -> ColumnElement[bool]:
    """The deliveries a claimer may claim: unlocked, or locked still with the token of a
    claim its watch found lapsed (:meth:`ClaimWatch.lapsed`; a compare-and-set, so that a
    claim made anew since the watch read it is not taken)."""
    taken_over = [
        and_(WebhookDelivery.id == delivery_id, WebhookDelivery.lock_token == token)
        for delivery_id, token in lapsed
    ]
    return or_(WebhookDelivery.lock_token.is_(None), *taken_over)


def _claimable(now: float, posting: Collection[int] = ()) -> list[ColumnElement[bool]]:
    """A delivery the sender may post at ``now``: due (not done, its attempt time reached),
    none of its job's earlier deliveries to its webhook still undone (one waiting for its
    next attempt holds back the later ones of its job, which would otherwise tell the
    endpoint of a job's later state before its earlier one), and its webhook's first such
    one (the lowest id), so that one post at a time goes to a webhook, whichever sender
    makes it: while it is locked (posted), no other delivery of its webhook is claimable.
    An endpoint that never answers holds one sender thread, and delays its own deliveries
    only."""
    earlier = aliased(WebhookDelivery)
    behind = exists().where(
        earlier.webhook_seq == WebhookDelivery.webhook_seq,
        earlier.job_id == WebhookDelivery.job_id,  # a ping (no job) waits for none
        earlier.id < WebhookDelivery.id,
        earlier.done_at.is_(None),
    )
    ready = [WebhookDelivery.done_at.is_(None), WebhookDelivery.next_attempt_at <= now, ~behind]
    first = select(func.min(WebhookDelivery.id)).where(*ready).group_by(WebhookDelivery.webhook_seq)
    claimable = [*ready, WebhookDelivery.id.in_(first.scalar_subquery())]
    if posting:  # still its webhook's first: none of that webhook is claimed
        claimable.append(WebhookDelivery.id.not_in(sorted(posting)))
    return claimable


def any_due(
    session: Session,
    now: float,
    ttl: float | None = None,
    posting: Collection[int] = (),
    watch: ClaimWatch | None = None,
) -> bool:
    """Whether a delivery can be claimed (:func:`claim_due` with the same ``ttl``,
    ``posting`` and ``watch``) at ``now``: a read, so that the sender claims, a write, only
    then. Without ``ttl`` only an unlocked delivery counts."""
    lapsed = [] if ttl is None else (watch or claim_watch(session)).lapsed(session, now, ttl)
    query = select(WebhookDelivery.id).where(*_claimable(now, posting), _unclaimed(lapsed))
    return session.scalar(query.limit(1)) is not None


def claim_due(
    session: Session,
    token: str,
    ttl: float,
    now: float,
    limit: int,
    owner: str | None = None,
    posting: Collection[int] = (),
    watch: ClaimWatch | None = None,
) -> list[int]:
    """Lock up to ``limit`` due deliveries with ``token``, the first due one of each webhook
    whose first due one is not locked already (:func:`_claimable`), those due longest first.
    Commits. Claim with a new token each time: a delivery still locked with an earlier
    token of the same sender (being posted) must not come back as claimed. ``posting``: the
    deliveries the sender is posting, never claimed again (nor any of their webhooks'),
    whatever their lock's expiry says: the sender's clock stepped ahead past it mid-post,
    and the delivery was posted a second time beside the first. Another sender's claim is
    taken over only once ``watch`` (by default this process's, :func:`claim_watch`) found
    it unchanged for ``ttl`` seconds of its steady clock (:class:`ClaimWatch`), never on
    its wall-clock expiry, which a step of either host's clock moves: a sender whose clock
    stepped posted what another was posting. Every plane's claims are taken for the same
    ``ttl`` (planes sharing a database share their settings)."""
    lapsed = (watch or claim_watch(session)).lapsed(session, now, ttl)
    return locks.claim_where(
        session,
        WebhookDelivery,
        _claimable(now, posting),
        token,
        ttl,
        now,
        owner,
        limit=limit,
        order_by=[WebhookDelivery.next_attempt_at],
        unlocked=_unclaimed(lapsed),
    )


@dataclass(frozen=True)
class Outgoing:
    """One claimed delivery, ready to post: ``body`` is signed in ``headers``."""

    delivery_id: int
    url: str
    body: bytes
    headers: dict[str, str]


def sign(secret: str, body: bytes) -> str:
    """The ``X-Danlu-Signature`` value of ``body``: ``sha256=`` and the hex HMAC-SHA256 of
    the raw body under the webhook's secret (check it with :func:`hmac.compare_digest`)."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def outgoing(session: Session, delivery_ids: Sequence[int], now: float) -> list[Outgoing]:
    """The messages of the claimed deliveries: ``{"type", "delivery", "webhook", "time"}``
    and, for a state change, the ``event`` and the ``job`` as it is now (id, name, project,
    user, state, exit code, restarts, times)."""
    query = (
        select(WebhookDelivery, Webhook)
        .join(Webhook, Webhook.seq == WebhookDelivery.webhook_seq)
        .where(WebhookDelivery.id.in_(list(delivery_ids)))
        .order_by(WebhookDelivery.id)
    )
    pairs = session.execute(query).all()
    job_ids = sorted({d.job_id for d, _ in pairs if d.job_id is not None})
    jobs = {j.id: j for j in session.scalars(select(Job).where(Job.id.in_(job_ids)))}
    out = []
    for delivery, hook in pairs:
        message: dict[str, Any] = {
            "type": delivery.kind,
            "delivery": delivery.id,
            "webhook": hook.id,
            "time": now,
        }
        if delivery.kind == "job.state":
            message["event"] = delivery.payload
            job = jobs.get(delivery.job_id or "")
            message["job"] = None if job is None else job_summary(job)
        body = json.dumps(message, separators=(",", ":")).encode()
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "danlu-webhooks",
            "X-Danlu-Event": delivery.kind,
            "X-Danlu-Delivery": str(delivery.id),
            SIGNATURE_HEADER: sign(hook.secret, body),
        }
        out.append(Outgoing(delivery.id, hook.url, body, headers))
    return out


def job_summary(job: Job) -> dict[str, Any]:
    """What a message tells of its job."""
    return {
        "id": job.id,
        "name": job.name,
        "project": job.project.name,
        "user": job.user.name,
        "state": job.state,
        "exit_code": job.exit_code,
        "restarts": job.restarts,
        "preemptions": job.preemptions,
        "submitted_at": job.submitted_at,
        "started_at": job.started_at,
        "finished_at": job.finished_at,
        "sweep_id": job.sweep_id,
    }


def backoff(attempts: int) -> float:
    """Seconds before the next attempt after ``attempts`` failed ones."""
    return min(MAX_BACKOFF_SECONDS, FIRST_BACKOFF_SECONDS * 2.0 ** max(0, attempts - 1))


def record(
    session: Session,
    delivery_id: int,
    token: str,
    now: float,
    *,
    status_code: int | None,
    error: str | None,
) -> bool:
    """Write one attempt's outcome while the delivery is still locked with ``token``
    (False, nothing written, when the lock was lost); unlocks it. A 2xx ``status_code``
    without ``error`` delivers it; anything else schedules the next attempt :func:`backoff`
    seconds after ``now``, or gives up after :data:`MAX_ATTEMPTS`. ``now`` is when the
    attempt ENDED: a post that took its whole timeout must not use up the backoff."""
    attempts = session.scalar(
        select(WebhookDelivery.attempts).where(WebhookDelivery.id == delivery_id)
    )
    if attempts is None:
        return False  # its webhook was removed meanwhile
    attempts += 1
    ok = error is None and status_code is not None and 200 <= status_code < 300
    values: dict[str, Any] = {
        "attempts": attempts,
        "status_code": status_code,
        "lock_token": None,
        "lock_expires_at": None,
        "lock_owner": None,
    }
    if ok:
        values |= {"delivered": True, "done_at": now, "last_error": None}
    else:
        values["last_error"] = readable((error or f"HTTP {status_code}")[:MAX_ERROR_LENGTH])
        if attempts >= MAX_ATTEMPTS:
            values["done_at"] = now
        else:
            values["next_attempt_at"] = now + backoff(attempts)
    return locks.update_if_token(session, WebhookDelivery, delivery_id, token, values)


def readable(text: str) -> str:
    """``text`` as an error message the store takes and a terminal shows as it is: tabs and
    line breaks become spaces, other control characters (NUL: PostgreSQL's text refuses it,
    and the write of a whole batch of outcomes failed) and lone surrogates become U+FFFD.
    An endpoint's error body is the endpoint's to choose."""
    if text.isprintable():
        return text
    return "".join(
        " " if c in "\t\n\r\v\f" else "\ufffd" if unicodedata.category(c) in _UNREADABLE else c
        for c in text
    )


def purge(session: Session, now: float) -> int:
    """Delete the deliveries done more than :data:`KEEP_DONE_SECONDS` ago; returns how many."""
    result = session.execute(
        delete(WebhookDelivery).where(WebhookDelivery.done_at < now - KEEP_DONE_SECONDS)
    )
    return int(getattr(result, "rowcount", 0) or 0)


def shift_retries(session: Session, step: float, before: float) -> int:
    """Move the next attempt of the deliveries waiting for one at ``before`` (the last
    reading of the wall clock before it jumped by ``step`` seconds:
    :class:`~danlu.server.loops.ClockSteps`) with the jump, as the jobs' backoffs are
    (:func:`~danlu.server.services.job_reasons.shift_clocks`): a clock set back an hour held
    every pending retry back an hour more, one stepped ahead sent them at once. A delivery
    made after ``before`` (its ``created_at`` on the clock as it is now) is due when it was
    made and is left alone; so is a retry scheduled on the clock as it is after a step
    ahead (:func:`scheduled_at` ``step`` or more past ``before``): the sender and the
    reconcile loop are two threads, and a post that ended after the step, before the loop
    found it, counted its backoff on the new clock already; moved again, it waited the
    step's length more. (After a step back, the times of before and after it overlap: a
    retry scheduled after a step back shorter than its backoff is moved too, and tried
    that much early.) Returns the deliveries moved."""
    query = select(
        WebhookDelivery.id,
        WebhookDelivery.created_at,
        WebhookDelivery.attempts,
        WebhookDelivery.next_attempt_at,
    ).where(
        WebhookDelivery.done_at.is_(None),
        WebhookDelivery.created_at <= before,
        WebhookDelivery.next_attempt_at > before,
    )
    due: dict[int, list[int]] = {}  # by the attempts they were read with
    for delivery_id, created_at, attempts, next_attempt_at in session.execute(query):
        if step < 0 or scheduled_at(created_at, attempts, next_attempt_at) < before + step:
            due.setdefault(attempts, []).append(delivery_id)
    moved = 0
    for attempts, ids in due.items():
        for start in range(0, len(ids), IN_CHUNK):
            result = session.execute(
                update(WebhookDelivery)
                .where(
                    WebhookDelivery.id.in_(ids[start : start + IN_CHUNK]),
                    # an attempt's outcome written since the read set a new time
                    WebhookDelivery.attempts == attempts,
                    WebhookDelivery.done_at.is_(None),
                )
                .values(next_attempt_at=WebhookDelivery.next_attempt_at + step)
                .execution_options(synchronize_session=False)
            )
            moved += int(getattr(result, "rowcount", 0) or 0)
    return moved


def scheduled_at(created_at: float, attempts: int, next_attempt_at: float) -> float:
    """When a delivery's next attempt was set: when it was made (no attempt yet), else when
    its last attempt ended (:func:`record` set it :func:`backoff` seconds after that)."""
    return created_at if attempts == 0 else next_attempt_at - backoff(attempts)
