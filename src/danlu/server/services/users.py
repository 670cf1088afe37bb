"""Users, API tokens (hashed at rest) and the admin bootstrap.

A token is ``dl_<prefix>_<secret>``: the 8-character prefix finds the row, and only
``sha256(token)`` is stored. :func:`issue_token` returns the plain token once.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import os
import re
import secrets
from enum import Enum
from pathlib import Path
from typing import Final, Literal

from sqlalchemy import Select, and_, delete, func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from danlu.core.errors import SpecError
from danlu.server.db.models import ApiToken, Project, User, UserEvent
from danlu.server.errors import ConflictError, NotFoundError, PermissionDenied
from danlu.server.services import user_events
from danlu.server.services.common import delete_some, lock_row, resolve_now
from danlu.server.services.projects import DEFAULT_PROJECT

ROLES = ("admin", "user")
ADMIN = "admin"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,62}\Z")
_OS_USER = re.compile(r"^[a-z_][a-z0-9_.-]{0,31}\Z")
_TOKEN = re.compile(r"^dl_([A-Za-z0-9]{8})_[A-Za-z0-9_-]{20,}\Z")
_RESERVED_FOR: Final = {
    "default": "a job's 'user: default' means whoever submits it",
    "all": "'--members all' means every user",
    "everyone": "'--members everyone' means every user",
    "me": "GET /users/me is the caller's own record, so a user named me could not be read",
}
RESERVED_NAMES: Final = tuple(_RESERVED_FOR)
"""Names no user may take, in any case: a job spec's ``user: default`` means the caller, the
CLI's ``--members all`` (or ``everyone``) opens a project to every user, and ``GET
/users/me`` is the caller (a user named ``me`` stored before it was reserved is kept: ``GET
/users`` lists it, ``PUT /users/me`` and the routes under ``/users/me/`` (events, tokens,
disable, enable) take it by its name, and ``GET /users/me`` with its own token shows it)."""


def hash_token(token: str) -> str:
    """The stored form of a token: hex sha256."""
    return hashlib.sha256(token.encode()).hexdigest()


def create_user(
    session: Session,
    name: str,
    role: str = "user",
    now: float | None = None,
    *,
    os_user: str | None = None,
    by: User | None = None,
) -> User:
    """Create a user; ``role`` is ``admin`` or ``user``; ``os_user`` the OS account its jobs
    run as with ``DANLU_RUN_AS=user`` (None: the one named like it); ``by``: the admin who
    does it, for the user's history (None: the control plane). A taken name is a
    ConflictError; a reserved one (:data:`RESERVED_NAMES`, in any case) a SpecError."""
    if not _NAME.match(name):
        raise SpecError("name", "use 1-63 letters, digits, '.', '_', '@' or '-'")
    why = _RESERVED_FOR.get(name.lower())
    if why is not None:
        raise SpecError(
            "name",
            f"{name!r} is reserved ({why}); the reserved names are "
            f"{', '.join(RESERVED_NAMES[:-1])} and {RESERVED_NAMES[-1]}, in any case: pick "
            "another",
        )
    if role not in ROLES:
        raise SpecError("role", f"{role!r} is not a role; use one of {', '.join(ROLES)}")
    t = resolve_now(now)
    user = User(name=name, role=role, created_at=t, os_user=checked_os_user(os_user))
    try:
        with session.begin_nested():
            session.add(user)
    except IntegrityError:
        raise ConflictError(f"a user named {name!r} already exists", field="name") from None
    account = f", os_user {user.os_user}" if user.os_user else ""
    user_events.record(session, user, user_events.CREATED, by, f"role {role}{account}", t)
    return user


def checked_os_user(os_user: str | None) -> str | None:
    """``os_user`` when it is an OS account name (``useradd``'s rules: a lower-case letter
    or ``_`` first, then lower-case letters, digits, ``_``, ``-`` or ``.``, at most 32), else
    a :class:`SpecError` naming ``os_user``; None stays None."""
    if os_user is not None and not _OS_USER.match(os_user):
        raise SpecError(
            "os_user",
            f"{os_user!r} is not an OS account name: start with a lower-case letter or '_', "
            "then lower-case letters, digits, '_', '-' or '.', at most 32",
        )
    return os_user


class _Kept(Enum):
    """The type of :data:`KEPT` (an enum of one, so that a type checker tells it apart)."""

    KEPT = "kept"


KEPT: Final = _Kept.KEPT
"""A field of :func:`update_user` left as it is (``None`` is a value: no quota, no account
of its own)."""


def update_user(
    session: Session,
    name: str,
    *,
    os_user: str | Literal[_Kept.KEPT] | None = KEPT,
    quota_gpus: float | Literal[_Kept.KEPT] | None = KEPT,
    role: str | Literal[_Kept.KEPT] = KEPT,
    by: User | None = None,
    now: float | None = None,
) -> User:
    """Change the user ``name``: ``role``, ``admin`` or ``user`` (else a :class:`SpecError`
    naming ``role``; demoting the last enabled admin is a :class:`ConflictError` naming
    ``role``, see :func:`check_another_admin`), ``os_user``, the OS account its jobs run as
    (None: the one named like the user), and ``quota_gpus``, the most GPUs its running jobs
    may hold at once, in all projects (None: no limit of its own; the jobs already running
    keep their GPUs); a field left :data:`KEPT` stays as it is. What changed is one
    ``changed`` event of the user's history, by ``by`` (nothing changed: none)."""
    user = get_user(session, name)
    changes: list[str] = []
    if role is not KEPT:
        user = _for_role(session, user, role)
        if role != user.role:
            changes.append(_change("role", user.role, role))
            user.role = role
    if os_user is not KEPT:
        account = checked_os_user(os_user)
        if account != user.os_user:
            changes.append(_change("os_user", user.os_user, account))
            user.os_user = account
    if quota_gpus is not KEPT:
        if quota_gpus is not None and not (math.isfinite(quota_gpus) and quota_gpus >= 0):
            raise SpecError("quota_gpus", "give a number of GPUs >= 0, or null for no quota")
        if quota_gpus != user.quota_gpus:
            changes.append(_change("quota_gpus", user.quota_gpus, quota_gpus))
            user.quota_gpus = quota_gpus
    session.flush()
    if changes:
        user_events.record(session, user, user_events.CHANGED, by, "; ".join(changes), now)
    return user


def _for_role(session: Session, user: User, role: str) -> User:
    """``user`` read again, locked, to be given ``role``: a :class:`SpecError` naming
    ``role`` for no role; a :class:`ConflictError` naming ``role`` when it demotes the last
    enabled admin. The role ``user`` takes every admin's row first (:func:`lock_admins`), as
    a disable of an admin does: of two admins demoted at once, or one demoted while the
    other is disabled, the second waits for the first and sees it done (checked apart, each
    read the other as an enabled admin and both went through)."""
    if role not in ROLES:
        raise SpecError("role", f"{role!r} is not a role; use one of {', '.join(ROLES)}")
    if role != ADMIN:  # who is an admin now is read under the locks: the user's row may be
        lock_admins(session)  # promoted meanwhile
    user = lock_row(session, User, user.id)
    if user.is_admin and role != ADMIN and not user.disabled:
        check_another_admin(
            session,
            user,
            "made a plain user, no admin would be left to make admins or enable users; make "
            "another user an admin first (danlu user set NAME --role admin), or enable a "
            "disabled admin (danlu user enable NAME)",
            "role",
        )
    return user


def lock_admins(session: Session) -> None:
    """Lock every admin's row, in id order, until the transaction ends (PostgreSQL; SQLite's
    writers take turns): a change that may leave fewer enabled admins (a demote, a disable)
    takes them before it reads who is left (:func:`check_another_admin`), so that two such
    changes at once take turns and the second sees the first's."""
    admins = select(User.id).where(User.role == ADMIN).order_by(User.id).with_for_update()
    session.execute(admins).all()


def check_another_admin(session: Session, admin: User, why: str, field: str = "name") -> None:
    """:class:`ConflictError` naming ``field``, saying ``why`` (what would go wrong, what to
    do instead), unless an enabled admin other than ``admin`` is left; call it after
    :func:`lock_admins`."""
    others = select(func.count()).where(
        User.role == ADMIN, User.disabled_at.is_(None), User.id != admin.id
    )
    if not session.scalar(others):
        raise ConflictError(f"{admin.name!r} is the last enabled admin: {why}", field=field)


def _change(field: str, old: object, new: object) -> str:
    """One field's change as a ``changed`` event says it: ``quota_gpus none -> 8``."""
    return f"{field} {user_events.shown_value(old)} -> {user_events.shown_value(new)}"


def set_os_user(
    session: Session, name: str, os_user: str | None, *, by: User | None = None
) -> User:
    """Set the OS account ``name``'s jobs run as (None: the one named like the user)."""
    return update_user(session, name, os_user=os_user, by=by)


def set_quota(
    session: Session, name: str, quota_gpus: float | None, *, by: User | None = None
) -> User:
    """Set the most GPUs ``name``'s running jobs may hold at once, in all projects (None: no
    limit of its own); the jobs already running keep their GPUs."""
    return update_user(session, name, quota_gpus=quota_gpus, by=by)


def get_user(session: Session, name: str) -> User:
    """The user called ``name`` or :class:`NotFoundError`."""
    user = session.scalar(select(User).where(User.name == name))
    if user is None:
        raise NotFoundError("user", name, "name")
    return user


def list_users(session: Session) -> list[User]:
    """All users by name."""
    return list(session.scalars(select(User).order_by(User.name)))


def issue_token(
    session: Session,
    user: User,
    name: str = "",
    now: float | None = None,
    *,
    job_id: str | None = None,
    capped: bool = True,
    by: User | None = None,
) -> str:
    """Create an API token for ``user``; return the plain token (never stored).

    With ``job_id`` it is the token of that job's new run: it may only report the job's
    metrics (see :attr:`ApiToken.job_id`), and the tokens of the job's earlier runs are
    revoked. Without, :class:`ConflictError` when the user is disabled or holds
    :data:`MAX_LIVE_TOKENS` live tokens already, unless ``capped`` is false (the admin
    bootstrap: a server start is never refused); and a ``token_issued`` event of the
    user's history, by ``by`` (the user, or an admin; None: the control plane)."""
    t = resolve_now(now)
    if job_id is None and capped:
        _check_token_room(session, user)
    if job_id is not None:
        earlier = select(ApiToken).where(ApiToken.job_id == job_id, ApiToken.revoked_at.is_(None))
        for row in session.scalars(earlier):
            row.revoked_at = t
    prefix = secrets.token_hex(4)
    token = f"dl_{prefix}_{secrets.token_urlsafe(32)}"
    row = ApiToken(
        user_id=user.id,
        name=name[:64],
        prefix=prefix,
        token_hash=hash_token(token),
        created_at=t,
        job_id=job_id,
    )
    session.add(row)
    session.flush()
    if job_id is None:  # a job run's own token is no one's doing: one a run
        detail = f"token {user_events.token_text(row)}"
        user_events.record(session, user, user_events.TOKEN_ISSUED, by, detail, t)
    return token


MAX_LIVE_TOKENS = 100
"""The most live tokens a user may hold, job runs' not counted (there is one a running job,
revoked when the run ends): a script that issues a token per call fills no table."""


def _check_token_room(session: Session, user: User) -> None:
    """:class:`ConflictError` when ``user`` is disabled (its token would be refused), or
    holds :data:`MAX_LIVE_TOKENS` live tokens of its own already. The user's row is locked
    first (PostgreSQL), so two issues at once cannot both take the last place, and read
    again: a disable committed meanwhile is seen."""
    session.execute(select(User.id).where(User.id == user.id).with_for_update())
    session.refresh(user, ["disabled_at"])
    check_enabled(user, "be given a token")
    live = session.scalar(
        select(func.count())
        .select_from(ApiToken)
        .where(
            ApiToken.user_id == user.id,
            ApiToken.job_id.is_(None),
            ApiToken.revoked_at.is_(None),
        )
    )
    if (live or 0) >= MAX_LIVE_TOKENS:
        raise ConflictError(
            f"user {user.name!r} holds {MAX_LIVE_TOKENS} live API tokens, the most one may "
            f"hold: revoke one first (`danlu user tokens {user.name}` lists them, `danlu user "
            f"revoke {user.name} PREFIX` revokes one; DELETE /api/v1/users/{user.name}/tokens/"
            "PREFIX over the API)"
        )


def disabled_message(user: User) -> str:
    """Why the tokens of the disabled ``user`` are refused (by whom and why, where
    recorded), and what undoes it."""
    how = [f"by {user.disabled_by}"] if user.disabled_by else []
    how += [user.disable_reason] if user.disable_reason else []
    said = f" ({': '.join(how)})" if how else ""
    return (
        f"user {user.name!r} is disabled{said}: their API tokens are refused until an admin "
        f"enables them again (danlu user enable {user.name})"
    )


def owner_disabled(name: str, reason: str | None = None) -> str:
    """The ``pending_reason`` of a queued job whose owner ``name`` is disabled, ``reason``
    the admin's (:attr:`User.disable_reason`, if any): the scheduler passes it by
    (:mod:`danlu.server.services.view`) until the owner is enabled."""
    why = f" ({reason})" if reason else ""
    return (
        f"owner {name} is disabled{why}: not started until an admin enables them (danlu user "
        f"enable {name})"
    )


def check_enabled(user: User, doing: str, field: str = "name") -> None:
    """:class:`ConflictError` naming ``field`` when ``user`` is disabled and so may not
    ``doing`` (``be given a token``, ``own a new job``)."""
    if user.disabled:
        raise ConflictError(
            f"user {user.name!r} is disabled and cannot {doing}; enable them first (danlu "
            f"user enable {user.name}, POST /users/{user.name}/enable)",
            field=field,
        )


def disabled_reasons(session: Session) -> dict[str, str]:
    """The disabled users by name, each with the ``pending_reason`` of their queued jobs
    (:func:`owner_disabled`; none in most stores: one small query a round)."""
    query = select(User.name, User.disable_reason).where(User.disabled_at.is_not(None))
    return {name: owner_disabled(name, reason) for name, reason in session.execute(query)}


def disabled_query() -> Select[int]:
    """The query of the disabled users' ids (for a subquery)."""
    return select(User.id).where(User.disabled_at.is_not(None))


def disabled_ids(session: Session) -> frozenset[int]:
    """The ids of the disabled users."""
    return frozenset(session.scalars(disabled_query()))


def refused(row: ApiToken) -> bool:
    """Whether the live token ``row`` is refused all the same: its user is disabled. A
    job run's token is not (it may only report its job's metrics, and the run goes on
    until it ends or is cancelled: its reports are its progress)."""
    return row.job_id is None and row.user.disabled


def usable_token(session: Session, token: str | None) -> bool:
    """Whether ``token`` authenticates a request now: live (:func:`find_token`) and not
    :func:`refused`."""
    row = find_token(session, token)
    return row is not None and not refused(row)


def authenticate(session: Session, token: str | None, now: float | None = None) -> User | None:
    """The user owning ``token``, or ``None`` for a missing, malformed, unknown or revoked
    token. Sets the token's ``last_used_at`` in ``session`` (a write session's caller
    commits it)."""
    row = find_token(session, token)
    if row is None:
        return None
    row.last_used_at = resolve_now(now)
    return row.user


def find_token(session: Session, token: str | None) -> ApiToken | None:
    """The live token row of ``token`` (its user and its job scope), or ``None`` for a
    missing, malformed, unknown or revoked token. A read: it changes nothing (a request's
    use is stored by :func:`touch_token`)."""
    if not token:
        return None
    match = _TOKEN.match(token)
    if match is None:
        return None
    digest = hash_token(token)
    for row in session.scalars(select(ApiToken).where(ApiToken.prefix == match.group(1))):
        if row.revoked_at is None and hmac.compare_digest(row.token_hash, digest):
            return row
    return None


TOKEN_USE_RESOLUTION = 60.0
"""Seconds: a token's ``last_used_at`` is stored again only once it is this old (not one
write per request)."""


def use_is_due(last_used_at: float | None, now: float) -> bool:
    """Whether a use of a token at ``now`` is worth storing over ``last_used_at``."""
    return last_used_at is None or now - last_used_at >= TOKEN_USE_RESOLUTION


def touch_token(session: Session, token_id: int, now: float | None = None) -> bool:
    """Store a use of the token row ``token_id`` at ``now`` unless one at most
    :data:`TOKEN_USE_RESOLUTION` seconds older is stored already (one conditional
    ``UPDATE``: concurrent requests write it once). True when it was written."""
    t = resolve_now(now)
    stale = or_(ApiToken.last_used_at.is_(None), ApiToken.last_used_at <= t - TOKEN_USE_RESOLUTION)
    result = session.execute(
        update(ApiToken).where(ApiToken.id == token_id, stale).values(last_used_at=t)
    )
    return bool(getattr(result, "rowcount", 0))


def delete_job_token(session: Session, job_id: str, token: str) -> None:
    """Delete ``token``, issued to a run of job ``job_id`` that never started (the executor
    refused its launch for now): a launch refused pass after pass would leave a row a pass."""
    session.execute(
        delete(ApiToken).where(ApiToken.token_hash == hash_token(token), ApiToken.job_id == job_id)
    )


def revoke_job_tokens(session: Session, job_id: str, now: float | None = None) -> None:
    """Revoke the live tokens issued to runs of job ``job_id`` (its run has ended: its
    ``DANLU_TOKEN`` reports nothing more)."""
    t = resolve_now(now)
    session.execute(
        update(ApiToken)
        .where(ApiToken.job_id == job_id, ApiToken.revoked_at.is_(None))
        .values(revoked_at=t)
    )


def live_tokens(session: Session, user: User) -> list[ApiToken]:
    """``user``'s tokens not revoked (its own and its job runs'), oldest first."""
    query = select(ApiToken).where(ApiToken.user_id == user.id, ApiToken.revoked_at.is_(None))
    return list(session.scalars(query.order_by(ApiToken.created_at, ApiToken.id)))


_GIVEN_PREFIX = re.compile(r"dl_([A-Za-z0-9]{8})_?")


def token_prefix(given: str) -> str:
    """The public prefix of a token as a revocation names it: ``PREFIX``, or the token's
    own start, ``dl_PREFIX`` or ``dl_PREFIX_`` (what a user copies from the token)."""
    match = _GIVEN_PREFIX.fullmatch(given)
    return match.group(1) if match else given


def revoke_tokens(
    session: Session,
    user: User,
    now: float | None = None,
    *,
    prefix: str | None = None,
    by: User | None = None,
) -> int:
    """Revoke every live token of ``user`` (with ``prefix``: the one whose public prefix it
    is, the ``dl_PREFIX_...`` part, given as :func:`token_prefix` reads it); return how
    many, each named in a ``token_revoked`` event of the user's history, by ``by``. Raises
    :class:`NotFoundError` when ``prefix`` names no live token of the user."""
    t = resolve_now(now)
    user_events.hold(session, user)  # the user's row before the tokens', as an issue takes
    wanted = None if prefix is None else token_prefix(prefix)
    rows = [row for row in live_tokens(session, user) if wanted in (None, row.prefix)]
    if prefix is not None and not rows:
        raise NotFoundError("token", prefix, "prefix")
    for row in rows:
        row.revoked_at = t
    session.flush()
    if rows:
        detail = user_events.tokens_text(rows, every=prefix is None)
        user_events.record(session, user, user_events.TOKEN_REVOKED, by, detail, t)
    return len(rows)


KEEP_REVOKED_SECONDS = 30 * 86_400.0
"""How long a revoked token's row stays (:func:`purge_revoked_tokens`): a month to look up
in the store when it was last used (a leak's inquiry), then it goes. A revoked token
authenticates nothing and no reply lists it; kept for good, one row a job run would pile up."""


def purge_revoked_tokens(session: Session, now: float | None, limit: int) -> int:
    """Delete at most ``limit`` tokens revoked more than :data:`KEEP_REVOKED_SECONDS` before
    ``now``; returns how many (``limit``: call again, there may be more)."""
    cutoff = resolve_now(now) - KEEP_REVOKED_SECONDS
    return delete_some(session, ApiToken, ApiToken.revoked_at < cutoff, limit)


def purge_token_events(session: Session, now: float | None, limit: int) -> int:
    """Delete at most ``limit`` token events of the users' histories that outlived their
    tokens: a ``token_revoked`` event more than :data:`KEEP_REVOKED_SECONDS` before ``now``
    (the tokens it revoked are gone: :func:`purge_revoked_tokens`), a ``token_issued`` one
    as old whose token's row is gone too (the row and its issue share their time: a token
    live or revoked lately keeps its issue however old); returns how many (``limit``: call
    again, there may be more). The other events of a user stay for good; these would grow
    without end, two a cycle of a script that issues a token and revokes it in a loop."""
    cutoff = resolve_now(now) - KEEP_REVOKED_SECONDS
    token_row = select(ApiToken.id).where(
        ApiToken.user_id == UserEvent.user_id, ApiToken.created_at == UserEvent.time
    )
    gone = or_(UserEvent.kind == user_events.TOKEN_REVOKED, ~token_row.exists())
    token_event = UserEvent.kind.in_((user_events.TOKEN_ISSUED, user_events.TOKEN_REVOKED))
    return delete_some(session, UserEvent, and_(token_event, UserEvent.time < cutoff, gone), limit)


def _write_secret(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` with mode 0600 atomically (never world-readable)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _written_token(path: Path) -> str:
    """The token ``path`` holds, stripped; ``""`` when it holds no text (bytes that are not
    UTF-8: a damaged or overwritten file is a stale one, replaced as a missing one is; it
    stopped the server's start with a ``UnicodeDecodeError``)."""
    try:
        return path.read_text(encoding="utf-8").strip()
    except UnicodeDecodeError:
        return ""


BOOTSTRAP = "bootstrap"
"""The name of the admin tokens :func:`bootstrap_admin` writes to ``admin.token``."""


def bootstrap_admin(session: Session, token_path: Path, now: float | None = None) -> str | None:
    """First start: create the ``admin`` user and write a token to ``token_path`` (0600).

    Idempotent: when the file already holds a valid admin token nothing changes and ``None``
    is returned; when the admin exists but the file is missing or stale (a revoked or
    unknown token, or no text at all: bytes that are not UTF-8), a new token is
    issued and written, and the admin's earlier bootstrap tokens are revoked (deleting the
    file and restarting is how a leaked one is replaced; the tokens made for the admin by
    hand stay). Returns the new plain token when one was issued. Commits (the token must be
    valid before the file names it).
    """
    admin = session.scalar(select(User).where(User.name == ADMIN))
    if admin is None:
        admin = create_user(session, ADMIN, "admin", now)
    else:
        if token_path.exists():
            current = _written_token(token_path)
            user = authenticate(session, current, now)
            if user is not None and user.id == admin.id:
                session.commit()
                return None
        stale = select(ApiToken).where(
            ApiToken.user_id == admin.id,
            ApiToken.name == BOOTSTRAP,
            ApiToken.job_id.is_(None),
            ApiToken.revoked_at.is_(None),
        )
        rows = list(session.scalars(stale.order_by(ApiToken.id)))
        for row in rows:
            row.revoked_at = resolve_now(now)
        if rows:
            detail = user_events.tokens_text(rows, every=False)
            user_events.record(session, admin, user_events.TOKEN_REVOKED, None, detail, now)
    token = issue_token(session, admin, BOOTSTRAP, now, capped=False)
    session.commit()
    _write_secret(token_path, token)
    return token


def check_own_listing(viewer: User | None, user: str | None, what: str) -> None:
    """Refuse (:class:`PermissionDenied`, 403) a non-admin ``viewer`` naming another ``user``
    in a listing of ``what`` (``jobs``, ``events``): they see only their own, so it read as
    that user having none."""
    if viewer is not None and not viewer.is_admin and user is not None and user != viewer.name:
        raise PermissionDenied(
            f"{viewer.name!r} may list only their own {what}, not those of {user!r} (an "
            "admin may list anyone's); leave user out or give your own name",
            field="user",
        )


def check_listed_names(session: Session, project: str | None, user: str | None) -> None:
    """Refuse (:class:`NotFoundError`, 404, naming the parameter) a listing filtered by a
    ``user`` or ``project`` that does not exist: it read as one that has nothing, so that a
    typo in a name (``?user=alcie``) looked like "no jobs". The ``default`` project, made
    on first use, is there before any job made it. Call it after
    :func:`check_own_listing`: a non-admin naming another user learns nothing of who
    exists."""
    if user is not None and session.scalar(select(User.id).where(User.name == user)) is None:
        raise NotFoundError("user", user, "user", "danlu user ls, GET /users, lists them")
    if project is None or project == DEFAULT_PROJECT:
        return
    if session.scalar(select(Project.id).where(Project.name == project)) is None:
        raise NotFoundError(
            "project", project, "project", "danlu project ls, GET /projects, lists them"
        )
