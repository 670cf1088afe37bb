"""Disabling a user and enabling them again (``danlu user disable / enable``, ``POST
/users/{name}/disable`` and ``/enable``): a person who left is shut out in one step.

A disabled user stays in the store (their jobs' history and the usage report keep their
name), but their API tokens are refused, saying why (a running job's own token still reports
that job's metrics), no token is issued to them and no job is submitted in their name until
an admin enables them again. Their queued jobs stay PENDING and are not started: every
scheduling round withholds a disabled owner's jobs (:func:`~danlu.server.services.view.
build_snapshot`), whatever queued them (a submission before, a job that ran on and was
preempted or failed, a sweep's next trial, an admin's release), with the reason
:func:`~danlu.server.services.users.owner_disabled`; enabled again, the user's queued jobs
start as before. Withholding, not cancelling, keeps a disable undoable, and touches no job
the user held themselves.

Their running jobs run on (the reply counts them), unless the disable cancels the jobs too
(``cancel_jobs``): then every unfinished job of theirs is cancelled (a running one stopped
with its grace to checkpoint, as ``danlu cancel`` stops it) and their running sweeps end
CANCELLED. The last enabled admin cannot be disabled: no one would be left to enable anyone.

The user's row keeps who disabled them (``disabled_by``) and why (``disable_reason``, as
``usermod --expiredate`` comments or Slurm's ``sacctmgr`` reasons: optional, at most
:data:`MAX_DISABLE_REASON` characters, none a control character): ``danlu user ls``, the
user's JSON, the 401 their tokens get and their queued jobs' ``pending_reason`` show them.
Enabling clears both; the user's history (:mod:`~danlu.server.services.user_events`) keeps
each disable with them, and each enable with what it cleared, as the server's log does.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from sqlalchemy import ColumnElement, func, select, update
from sqlalchemy.orm import Session

from danlu.core.errors import SpecError
from danlu.core.state import JobState
from danlu.core.values import check_text, control_character, quoted
from danlu.server.db.models import Job, Sweep, User
from danlu.server.errors import ConflictError
from danlu.server.services import jobs, sweeps, user_events
from danlu.server.services.common import lock_row, resolve_now
from danlu.server.services.projects import HOLDING
from danlu.server.services.users import (
    check_another_admin,
    get_user,
    lock_admins,
    owner_disabled,
)

log = logging.getLogger(__name__)

QUEUED = (JobState.PENDING.value, JobState.RESTARTING.value)
"""The states of an unfinished job that holds no GPUs."""
MAX_DISABLE_REASON = 200
"""The most characters of an admin's reason for a disable: a line of ``danlu user ls``,
not a document (Slurm's reasons are as short)."""


@dataclass(frozen=True, slots=True)
class UserJobs:
    """A user just disabled or enabled, and what their unfinished jobs do now."""

    user: User
    queued: int
    """Their jobs that hold no GPUs (PENDING, RESTARTING, held or not): not started while
    the user is disabled; once enabled, scheduled as before."""
    running: int
    """Their jobs holding GPUs (RUNNING, PREEMPTING) that run on."""
    cancelled: int
    """Their queued jobs this disable cancelled (``cancel_jobs``)."""
    stopping: int
    """Their jobs holding GPUs being stopped, to end CANCELLED (``cancel_jobs``, or a cancel
    asked for before)."""


def enabled_again(name: str) -> str:
    """The ``pending_reason`` a queued job of ``name`` gets when its owner is enabled
    again, until the next round says what it waits for."""
    return f"owner {name} enabled again: waiting for the next round"


def checked_reason(reason: str | None) -> str | None:
    """``reason`` for a disable as stored: without the blanks around it, None for none or
    an empty one. :class:`SpecError` naming ``reason`` for one over
    :data:`MAX_DISABLE_REASON` characters or holding a control character (``danlu user
    ls`` prints it, where a line break or an ESC sequence would act on the terminal)."""
    if reason is None:
        return None
    check_text(reason, "reason", "a disable's reason")
    char = control_character(reason)
    if char is not None:
        raise SpecError(
            "reason",
            "must not contain control characters (line breaks, tabs, ESC sequences, "
            f"bidirectional overrides), got {char!r} in {quoted(reason)}: write it on one "
            "line, e.g. 'left the team'",
        )
    reason = reason.strip()
    if len(reason) > MAX_DISABLE_REASON:
        raise SpecError(
            "reason",
            f"is {len(reason)} characters long, more than the {MAX_DISABLE_REASON} a "
            "disable's reason may hold: say it shorter (e.g. 'left the team, see ticket 123')",
        )
    return reason or None


def disable(
    session: Session,
    name: str,
    by: User,
    *,
    reason: str | None = None,
    cancel_jobs: bool = False,
    now: float | None = None,
) -> UserJobs:
    """Disable the user ``name`` (``by``: the admin who does it; ``reason``: why, see
    :func:`checked_reason`, stored with ``by``'s name). Disabling a disabled user keeps the
    time it was first disabled; a ``reason`` given then replaces the one stored (and who
    gave it), none keeps it; with ``cancel_jobs`` it cancels what is left. A disable that
    changed the user's row or cancelled jobs is a ``disabled`` event of the user's history
    (one that changed nothing is none). :class:`ConflictError` naming ``name`` for the last
    enabled admin."""
    t = resolve_now(now)
    why = checked_reason(reason)
    found = get_user(session, name)
    before = _counted(session, found, 0).queued if cancel_jobs else 0
    if cancel_jobs:  # the sweeps first: no next trial is submitted (its row, then its jobs')
        running_sweeps = select(Sweep.id).where(
            Sweep.user_id == found.id, Sweep.state == sweeps.RUNNING
        )
        for sweep_id in list(session.scalars(running_sweeps.order_by(Sweep.seq))):
            sweeps.cancel(session, sweep_id, by, t)
    user = _locked(session, found)
    changed = not user.disabled or why is not None
    if changed:
        if not user.disabled:
            if user.is_admin:
                _check_another_admin(session, user)
            user.disabled_at = t
        user.disabled_by, user.disable_reason = by.name, why
        session.flush()
        log.info("user %s disabled by %s: %s", name, by.name, why or "no reason given")
    if cancel_jobs:
        _cancel_jobs(session, user, by, t)
        after = _counted(session, user, 0)
        done = replace(after, cancelled=max(0, before - after.queued))
        if changed or done.cancelled or done.stopping:
            jobs_said = (
                f"cancel_jobs: {done.cancelled} queued cancelled, {done.stopping} running "
                "being stopped"
            )
            detail = f"{why}; {jobs_said}" if why else jobs_said
            user_events.record(session, user, user_events.DISABLED, by, detail, t)
        return done
    if changed:
        user_events.record(session, user, user_events.DISABLED, by, why or "", t)
    # said at once, not only once a round has passed: their rows change (a version each),
    # so a round that read them before this commits starts none of them
    said = owner_disabled(name, user.disable_reason)
    _set_queued_reason(session, user, Job.held_at.is_(None), said)
    return _counted(session, user, 0)


def enable(
    session: Session, name: str, now: float | None = None, *, by: User | None = None
) -> UserJobs:
    """Enable the user ``name`` again (``by``: the admin who does it, for the log and the
    user's history): their tokens work again (those revoked meanwhile stay revoked) and
    their queued jobs are scheduled as before; who disabled them and why is cleared off the
    row, and kept in the ``enabled`` event. Enabling an enabled user changes nothing."""
    t = resolve_now(now)
    user = _locked(session, get_user(session, name))
    if user.disabled:
        said = Job.pending_reason == owner_disabled(name, user.disable_reason)
        was = [f"by {user.disabled_by}"] if user.disabled_by else []
        was += [user.disable_reason] if user.disable_reason else []
        detail = f"was disabled {': '.join(was)}" if was else ""
        user_events.record(session, user, user_events.ENABLED, by, detail, t)
        log.info(
            "user %s enabled by %s (disabled by %s: %s)",
            name,
            by.name if by is not None else "an admin",
            user.disabled_by or "an admin",
            user.disable_reason or "no reason given",
        )
        user.disabled_at = user.disabled_by = user.disable_reason = None
        session.flush()
        _set_queued_reason(session, user, said, enabled_again(name))
    return _counted(session, user, 0)


def _locked(session: Session, user: User) -> User:
    """``user``'s row read again and locked until the transaction ends; an admin's after
    every admin's row, in id order (:func:`~danlu.server.services.users.lock_admins`), so
    that two admins disabling (or demoting) each other at once take turns (the second then
    sees that the first is disabled), never both."""
    if user.is_admin:
        lock_admins(session)
    return lock_row(session, User, user.id)


def _check_another_admin(session: Session, admin: User) -> None:
    """:class:`ConflictError` naming ``name`` unless an enabled admin other than ``admin``
    is left."""
    check_another_admin(
        session,
        admin,
        "with them disabled no one could enable anyone again; add another admin first "
        "(danlu user add NAME --admin, or danlu user set NAME --role admin), or enable a "
        "disabled one (danlu user enable NAME)",
    )


def _set_queued_reason(
    session: Session, user: User, which: ColumnElement[bool], reason: str
) -> None:
    """Write ``reason`` to ``user``'s PENDING jobs that wait for no dependency (those that
    do name the job they wait for) and match ``which``, bumping each one's version."""
    session.execute(
        update(Job)
        .where(
            Job.user_id == user.id,
            Job.state == JobState.PENDING.value,
            Job.waiting_on.is_(None),
            which,
        )
        .values(pending_reason=reason, version=Job.version + 1)
        .execution_options(synchronize_session=False)
    )


def _cancel_jobs(session: Session, user: User, by: User, t: float) -> None:
    """Cancel every unfinished job of ``user``: a queued one ends CANCELLED now, a running
    one is stopped by the reconcile loop."""
    reason = f"cancelled: user {user.name} was disabled by {by.name}"
    unfinished = select(Job).where(Job.user_id == user.id, Job.state.in_([*QUEUED, *HOLDING]))
    for job in list(session.scalars(unfinished.order_by(Job.seq))):
        try:
            jobs.cancel_job(session, job.id, by, reason, t)
        except ConflictError:
            if not JobState(job.state).terminal:  # read again under its lock: not ended
                raise


def _counted(session: Session, user: User, cancelled: int) -> UserJobs:
    """:class:`UserJobs` of ``user`` as its jobs stand now."""
    stopping = Job.cancel_requested_at.is_not(None)
    query = (
        select(Job.state, stopping, func.count())
        .where(Job.user_id == user.id, Job.state.in_([*QUEUED, *HOLDING]))
        .group_by(Job.state, stopping)
    )
    queued = running = stopped = 0
    for state, asked, count in session.execute(query):
        if state in QUEUED:
            queued += count
        elif asked:
            stopped += count
        else:
            running += count
    return UserJobs(user, queued, running, cancelled, stopped)
