"""The ``scheduler`` lease: one control plane per database.

The reconcile loop acts only while it holds the ``scheduler`` lease (a :class:`Lease` row
locked with its token, renewed every pass, :func:`scheduler_lease_ttl` seconds long). A
plane that starts takes it before it serves or runs a pass (:func:`take_scheduler_lease`):
while another plane holds it, the start waits for it to lapse and is refused when the other
keeps renewing it. A holder that was a process of this machine that is gone (``kill -9``)
is taken over at once (:func:`take_lease`), so the same home's plane restarts at once; so is
one of an earlier boot of this host (or pid namespace) that was the last plane of the starting
plane's own home (:func:`~danlu.server.plane_owner.gone_from_home`: named in the home's lock,
which the starting plane holds), so that a plane restarts at once after a reboot too; one of
another machine of this host's name (a clone) is not judged by this machine's pids
(:mod:`~danlu.server.plane_owner`).

The lease also names the home of the plane that last held it (:attr:`Lease.home`, kept when
given back, :func:`plane_home`): the runs of a home's jobs are that home's executor's
(local processes under its supervisors, or the records of a Slurm or Ray plane), invisible
to a plane of another home, which would launch every running job again. A plane that takes
the lease where another home's jobs still hold GPUs gives it back (:func:`foreign_runs`); so
does one where the lease names no home (a database a danlu before revision 0028 ran) and no
running job's run is recorded under its own home, and a starting plane refuses such a database
before migrating it (:func:`refuse_foreign_before_upgrading`). A home lost for good is given up
by its operator (:data:`TAKE_OVER_FLAG`): its jobs' runs are taken for lost with it
(:func:`take_over_lost_runs`).

The lease's expiry is a wall-clock time (:mod:`danlu.server.services.locks`), the only
clock planes on several hosts have in common, and a step of a host's clock (an NTP step,
``date -s``) moves every expiry at once as that host sees them. A holder renews the lease
with its token whatever its expiry says, so a step of its own clock ahead loses it nothing,
and its next renewal undoes a step back. A plane that does not hold the lease does not take
it over on its clock's word alone (:class:`LeaseWatch`): it watches the lease's row on a
clock of its own that no one sets (:func:`~danlu.server.loops.steady_clock`), and takes the
lease over only once no one changed the row (its holder renews it every pass) for the
lease's TTL and :data:`LEASE_GRACE` more, its expiry past on the wall clock too, or for
:meth:`LeaseWatch.patience_for` seconds whatever its expiry (a dead holder's expiry a step
back put far off, or a host whose clock runs ahead wrote). The TTL is the holder's own
(:attr:`Lease.ttl`, written when it took the lease): planes sharing a database may run with
different ``DANLU_INTERVAL`` values. A step of a standby's clock ahead thus leaves a live
holder's lease alone, and a dead holder's is taken over within ``TTL + LEASE_GRACE``
seconds of watching it (of a start-up, too: a plane that finds a lease lapsed waits that
long before it takes it, unless its holder gave it back or was a process of this host that
is gone), at most :meth:`LeaseWatch.patience_for` seconds. The take is a compare-and-set
on the row as watched (token and expiry, :func:`take_over`): a holder that renewed meanwhile
keeps it. The holder that lost its lease (it hung past its TTL) finds another token on the
row at its next renewal (as a pass begins, after its poll, and in the transaction that
records its round), says so in its log and stops acting; its job locks were released with
the lease. A plane whose checks fail after it took the lease (a database
error) gives it back. A lease whose row names no TTL (written before revision 0034) is
judged by the watcher's own TTL, which assumes that the planes share ``DANLU_INTERVAL``.
"""

from __future__ import annotations

import contextlib
import logging
import math
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Engine, and_, inspect, select, text, update
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.orm import Session

from danlu.config import Settings
from danlu.core.errors import ConfigError
from danlu.executors.base import JOB_ID_RE
from danlu.executors.rundirs import RUNS_DIR
from danlu.executors.supervise import LAUNCH
from danlu.server.db import Database, Job, Lease, head_revision, make_engine
from danlu.server.db.migrate import known_older_revision
from danlu.server.loops import steady_clock
from danlu.server.plane_owner import HomeHolder, gone_from_home, same_plane

# how the lease names a plane (plane_owner.py; its callers import these four from here too)
from danlu.server.plane_owner import dead_here as dead_here
from danlu.server.plane_owner import describe_owner as describe_owner
from danlu.server.plane_owner import owner_id as owner_id
from danlu.server.plane_owner import plane_home as plane_home
from danlu.server.services import jobs, locks
from danlu.server.services.projects import HOLDING

log = logging.getLogger(__name__)
LEASE = "scheduler"
"""The name of the reconcile loop's lease."""

LEASE_GRACE = 2.0
"""Seconds a starting plane waits past the expiry of another plane's ``scheduler`` lease
before it concludes that the other renews it (alive): two hosts' clocks differ a little."""
LEASE_POLL = 0.5
"""Seconds between a starting plane's tries to take a lease another plane holds."""
LEASE_WAIT_CAP = 600.0
"""The least :meth:`LeaseWatch.patience_for`: the longest a plane waits for a lease whose expiry
lies far off (written by a host whose clock runs ahead, or before a step of this host's
clock back) to be renewed before it takes its holder for dead."""
LEASE_MIN_TTL = 10.0
"""The shortest ``scheduler`` lease (:func:`scheduler_lease_ttl`)."""
TAKE_OVER_FLAG = "--take-over-lost-home"
"""The ``danlu server`` flag that takes a database over from a home that is lost for good
(:func:`take_over_lost_runs`)."""
LOST_HOME_FIX = (
    f"If that home is lost for good (its host died, or its disk), start this plane once with "
    f"{TAKE_OVER_FLAG}: those jobs' runs are taken for lost with it, and the jobs resume from "
    "their last checkpoints on this plane's GPUs"
)
"""What a refusal of another home's running jobs (:func:`foreign_runs`) says when the home
that launched them cannot be started again."""
IN_USE_EXIT = 3
"""The exit status of ``danlu server`` refused because what it would use is another control
plane's (:class:`InUseByAnotherPlane`: its database, or its home); any other refused start-up
exits 2. docs/deploy.md's systemd unit names it in ``RestartPreventExitStatus=``: started
again every few seconds, such a plane was refused again, for ever."""
DATABASE_IN_USE_EXIT = IN_USE_EXIT
"""The exit status of ``danlu server`` refused because its database is another control
plane's (:class:`DatabaseInUse`): :data:`IN_USE_EXIT`."""


class InUseByAnotherPlane(ConfigError):
    """A start-up refused because what the plane would use is another control plane's (the
    database: :class:`DatabaseInUse`; the home:
    :class:`~danlu.server.main.HomeInUse`). Starting again changes nothing until an operator
    acts (stops that plane, or gives this one another database or home): ``danlu server``
    exits :data:`IN_USE_EXIT`, which a service manager is told not to restart."""

    exit_code = IN_USE_EXIT


class DatabaseInUse(InUseByAnotherPlane):
    """A start-up refused because the database is another control plane's: a live plane
    renews its ``scheduler`` lease (:func:`take_scheduler_lease`,
    :func:`wait_before_upgrading`), or its running jobs were launched from another home
    (:func:`foreign_runs`). Starting again changes nothing until an operator acts (stops that
    plane, gives this one another database, or :data:`TAKE_OVER_FLAG`): ``danlu server``
    exits :data:`DATABASE_IN_USE_EXIT`."""


EXECUTOR_STATE = "executor"
"""The directory of a home where its executor (local, Slurm or Ray) keeps its run records
(``{home}/executor/runs/JOB_ID/launch.json``)."""


def scheduler_lease_ttl(settings: Settings) -> float:
    """Seconds the ``scheduler`` lease lasts unless renewed: five passes, at least 10."""
    return max(LEASE_MIN_TTL, 5 * settings.interval)


@dataclass(frozen=True)
class Holder:
    """The ``scheduler`` lease as one read of it saw it."""

    token: str | None
    owner: str | None
    expires_at: float | None
    home: str | None
    ttl: float | None = None
    """The holder's lease's TTL as its row records it (:attr:`Lease.ttl`; None before
    revision 0034)."""

    def describe(self) -> str:
        """The holder for an operator: its process, host and home (when recorded)."""
        home = f", home {self.home}" if self.home else ""
        return f"{describe_owner(self.owner)}{home}"


def read_holder(session: Session) -> Holder:
    """The lease's row, read afresh (the identity map's copy predates the locks' Core
    updates)."""
    row = session.execute(
        select(
            Lease.lock_token, Lease.lock_owner, Lease.lock_expires_at, Lease.home, Lease.ttl
        ).where(Lease.id == LEASE)
    ).one_or_none()
    return Holder(*row) if row is not None else Holder(None, None, None, None)


def take_lease(
    session: Session,
    token: str,
    owner: str,
    ttl: float,
    t: float,
    watch: LeaseWatch,
    steady: float,
    where: str = "reconcile",
    last: HomeHolder | None = None,
) -> locks.LeaseTake:
    """Renew or take the ``scheduler`` lease with ``token`` (read at ``t``, the wall clock,
    and ``steady``, the clock of ``watch``). Another token's lease is taken only when it was
    given back, when its holder was a process of this host that is gone (``kill -9``: a
    restart on the same home must not wait its TTL out), or one of an earlier boot of it (or
    pid namespace) that was ``last``, the plane that held the starting plane's home before it
    (:func:`~danlu.server.plane_owner.gone_from_home`: a restart after a reboot), or when
    ``watch`` finds its holder dead (:meth:`LeaseWatch.lapsed`), never because its expiry has
    passed on this host's clock alone (a step of it ahead would take a live holder's lease);
    the holder's job locks are released with it (:func:`take_over`). ``where``: what the log
    names. Commits."""
    locks.ensure_lease(session, LEASE)
    if LEASE in locks.extend(session, Lease, [LEASE], token, ttl, t):
        watch.forget()
        return locks.LeaseTake.RENEWED
    holder = read_holder(session)
    if holder.token is None:
        why = ""
    elif dead_here(holder.owner):
        why = "dead"
    elif gone_from_home(holder.owner, holder.home, last):
        why = "left"
    elif watch.lapsed(holder, t, steady):
        why = "far" if holder.expires_at is not None and holder.expires_at >= t else "lapsed"
    else:
        return locks.LeaseTake.HELD
    if not take_over(session, holder, token, owner, ttl, t):
        return locks.LeaseTake.HELD  # renewed, or taken by another plane, meanwhile
    watch.forget()
    if why == "dead":
        log.info("%s: took the lease over from %s (no longer running)", where, holder.owner)
    elif why == "left":
        log.info(
            "%s: took the lease over from %s, the last plane of this home, which holds its "
            "lock no more (this host rebooted, or its container restarted, since)",
            where,
            holder.owner,
        )
    elif why == "far":
        log_unrenewed(holder, t, where, watch.patience_for(holder))
    elif why == "lapsed":
        log.warning(
            "%s: took the scheduler lease over from %s: no one renewed it for %.0f s (its "
            "TTL and %.0f s more) and it has expired: that plane is gone",
            where,
            holder.describe(),
            watch.holder_ttl(holder) + LEASE_GRACE,
            LEASE_GRACE,
        )
    return locks.LeaseTake.TAKEN


def take_over(
    session: Session, holder: Holder, token: str, owner: str, ttl: float, t: float
) -> bool:
    """Take the ``scheduler`` lease with ``token`` if its row is still as ``holder`` (its
    token and expiry) says, given back or its holder known to act no more, for ``ttl``
    seconds (recorded on the row: :attr:`Lease.ttl`), and release the job locks of the
    holder's process (they would block this plane until they expire); whether it was still
    ``holder``'s to take (a holder that renewed it meanwhile keeps it). Commits, or rolls
    back when it was not."""
    same = and_(
        Lease.id == LEASE,
        Lease.lock_token.is_(None) if holder.token is None else Lease.lock_token == holder.token,
        Lease.lock_expires_at.is_(None)
        if holder.expires_at is None
        else Lease.lock_expires_at == holder.expires_at,
    )
    values = {"lock_token": token, "lock_expires_at": t + ttl, "lock_owner": owner, "ttl": ttl}
    try:
        taken = session.execute(
            update(Lease).where(same).values(**values).execution_options(synchronize_session=False)
        )
        if int(getattr(taken, "rowcount", 0) or 0) != 1:
            session.rollback()
            return False
        if holder.token is not None and holder.owner is not None:
            session.execute(
                update(Job)
                .where(Job.lock_owner == holder.owner)
                .values(lock_token=None, lock_expires_at=None, lock_owner=None)
                .execution_options(synchronize_session=False)
            )
        session.commit()
    except BaseException:
        session.rollback()  # neither the lease nor the job locks: nothing half taken
        raise
    return True


def recorded_here(home: Path, job_ids: Iterable[str]) -> bool:
    """True if the executor of ``home`` (any kind: each keeps its run records under
    ``{home}/executor/runs``) has the launch record of a run of one of ``job_ids``."""
    runs = home / EXECUTOR_STATE / RUNS_DIR
    return any(
        JOB_ID_RE.fullmatch(job_id) and (runs / job_id / LAUNCH).is_file() for job_id in job_ids
    )


def foreign_runs(session: Session, home: str, home_dir: Path) -> str | None:
    """Why the plane of ``home`` (:func:`plane_home`; its directory ``home_dir``), which has
    just taken the lease, must not act: jobs still hold GPUs and the lease's last holder was
    a plane of another home (:attr:`Lease.home`), or the lease names none (a database a danlu
    before revision 0028 ran, which did not record it) and none of those jobs' runs is
    recorded under ``home_dir`` (:func:`recorded_here`: the plane that launched them was of
    another home). Their runs were launched by that home's executor, may still be alive, and
    are not this plane's executor's to see: polled, each would be unknown and launched again
    (two runs of one job, a cancel stopping one). ``None`` when it may act."""
    previous = read_holder(session).home
    if same_plane(previous, home):
        return None
    holding = select(Job.id).where(Job.state.in_(HOLDING))
    return _foreign_refusal(previous, home, home_dir, list(session.scalars(holding)))


def _foreign_refusal(
    previous: str | None, home: str, home_dir: Path, holding: list[str]
) -> str | None:
    """:func:`foreign_runs`' verdict, given the home the lease names (``previous``) and the
    ids of the jobs that hold GPUs (``holding``)."""
    if same_plane(previous, home) or not holding:
        return None
    if previous is None and recorded_here(home_dir, holding):
        return None
    shown = sorted(holding)[:3]
    more = f" and {len(holding) - len(shown)} more" if len(holding) > len(shown) else ""
    running = f"the database's running jobs ({', '.join(shown)}{more})"
    if previous is None:
        return (
            f"{running} were launched by a control plane whose home the database does not name "
            f"(an older danlu ran it), and none of their runs is recorded under this plane's "
            f"home ({home}), so they were launched from another home: their runs may still be "
            "alive, and this plane cannot see them, so it would run those jobs a second time. "
            "Start danlu on the home that launched them to let them finish or cancel them, "
            "and stop it before starting this one; or give this one another database "
            f"(--database-url, DANLU_DATABASE_URL). {LOST_HOME_FIX}"
        )
    return (
        f"{running} were launched by the control "
        f"plane of home {previous}; their runs may still be alive, and this plane (home "
        f"{home}) cannot see them, so it would run those jobs a second time. Start danlu on "
        "that home again to let them finish or cancel them, and stop it before starting "
        "this one; or give this one another database (--database-url, DANLU_DATABASE_URL). "
        f"{LOST_HOME_FIX}"
    )


def _older_revision(engine: Engine) -> str | None:
    """The database's revision when it is one this danlu knows, older than its newest
    (:func:`~danlu.server.db.migrate.known_older_revision`); ``None`` for an empty database,
    one at the newest revision, or one danlu cannot read (the upgrade says why). An
    unreachable database (:class:`OperationalError`) is raised as it is."""
    try:
        return known_older_revision(engine)
    except OperationalError:
        raise
    except DBAPIError:
        return None


def refuse_foreign_before_upgrading(db_url: str, settings: Settings) -> None:
    """Refuse, before it is migrated, a database at an older revision of this danlu whose
    running jobs another home launched (:func:`foreign_runs`, read with the columns every
    revision has, and the lease's home where the revision has it: 0028 on): the start-up
    would be refused once it took the lease anyway, and the migration would have left the
    database to this danlu alone, an older danlu on the home that launched the jobs (the one
    to start again) refusing it as newer. A :class:`ConfigError` saying the database was left
    as it was; a database that is empty, at this danlu's newest revision or not readable
    is left to the upgrade and the lease."""
    engine = make_engine(db_url)
    shown = engine.url.render_as_string(hide_password=True)
    try:
        revision = _older_revision(engine)
        if revision is None:
            return
        columns = {column["name"] for column in inspect(engine).get_columns("leases")}
        with engine.connect() as conn:
            previous = (
                conn.execute(
                    text("SELECT home FROM leases WHERE id = :name"), {"name": LEASE}
                ).scalar_one_or_none()
                if "home" in columns  # the column came with 0028
                else None
            )
            states = {f"state{i}": state for i, state in enumerate(HOLDING)}
            marks = ", ".join(f":{name}" for name in states)
            query = text(f"SELECT id FROM jobs WHERE state IN ({marks})")
            holding = [str(job_id) for job_id in conn.execute(query, states).scalars()]
    finally:
        engine.dispose()
    home_dir = Path(settings.home).resolve()
    refusal = _foreign_refusal(previous, plane_home(settings), home_dir, holding)
    if refusal is not None:
        raise DatabaseInUse(
            f"cannot use the database {shown}, left at revision {revision} (not migrated): "
            f"{refusal}"
        )


def record_home(session: Session, token: str, home: str) -> None:
    """Name ``home`` the lease's holder (it holds it with ``token``). Commits."""
    locks.update_if_token(session, Lease, LEASE, token, {"home": home})
    session.commit()


def take_over_lost_runs(session: Session, token: str, home: str, t: float) -> list[str]:
    """Take the database over for the plane of ``home`` (it holds the lease with ``token``)
    from the home that launched its running jobs, which its operator gave up as lost
    (:data:`TAKE_OVER_FLAG`): each job that holds GPUs is re-queued as a run lost with its
    node (RUNNING -> PREEMPTING -> PENDING, no restart counted; a job whose cancellation was
    asked ends CANCELLED), so that it resumes from its last checkpoint here, its run charged
    up to ``t`` (no one saw when it ended), and ``home`` is recorded as the lease's. The ids
    of the jobs re-queued. Commits."""
    lost = read_holder(session).home or "a home the database does not name"
    reason = (
        f"its run was lost with the home that launched it ({lost}), taken over by {home} "
        f"({TAKE_OVER_FLAG})"
    )
    taken = []
    for job in session.scalars(select(Job).where(Job.state.in_(HOLDING)).order_by(Job.id)):
        jobs.requeue_lost_run(session, job, reason, t)  # a run waiting for its launch: no GPU time
        taken.append(job.id)
    record_home(session, token, home)
    return taken


def _steady_for(
    clock: Callable[[], float], steady: Callable[[], float] | None
) -> Callable[[], float]:
    """The clock a wait is measured on: ``steady`` when given, else
    :func:`~danlu.server.loops.steady_clock` for the wall clock, or ``clock`` itself when it
    is a caller's own (a test's), which then counts as both."""
    if steady is not None:
        return steady
    return steady_clock if clock is time.time else clock


def take_scheduler_lease(
    db: Database,
    settings: Settings,
    *,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    steady: Callable[[], float] | None = None,
    watch: LeaseWatch | None = None,
    take_over_lost_home: bool = False,
    last: HomeHolder | None = None,
) -> str:
    """Take the database's ``scheduler`` lease for a control plane that starts (before it
    serves or runs a pass): one control plane per database. Returns the lease's token, for
    the plane's loop (:meth:`~danlu.server.reconcile.Reconciler.hold_lease`).

    A lease another plane holds is watched (``watch``, on ``steady``: see
    :func:`_steady_for`; give the one :func:`wait_before_upgrading` used, so that the wait
    before the upgrade counts) until it is found dead (:meth:`LeaseWatch.lapsed`: no one
    renewed it for its TTL and :data:`LEASE_GRACE` more, its expiry past, or for
    :meth:`LeaseWatch.patience_for` seconds whatever its expiry) and taken over then; while its
    holder renews it, the start is refused once :meth:`LeaseWatch.renewal_wait` seconds have
    passed. A lease given back, or whose holder was a process
    of this host that is gone (the same home's plane, ``kill -9``'d; or ``last``, the plane
    that held this home before, of an earlier boot of this host:
    :func:`~danlu.server.plane_owner.gone_from_home`), is taken at once. A
    database whose running jobs were launched from another home is refused too
    (:func:`foreign_runs`), unless ``take_over_lost_home`` (:data:`TAKE_OVER_FLAG`: its
    operator gave that home up as lost), which re-queues those jobs to resume here
    (:func:`take_over_lost_runs`); a start-up that fails after taking the lease gives it
    back. Raises :class:`ConfigError` naming the holder, or that home, and the fix."""
    token = secrets.token_hex(16)
    owner = owner_id()
    ttl = scheduler_lease_ttl(settings)
    home = plane_home(settings)
    shown = db.engine.url.render_as_string(hide_password=True)
    read_steady = _steady_for(clock, steady)
    watch = watch if watch is not None else LeaseWatch(ttl)
    deadline: float | None = None
    first: Holder | None = None
    while True:
        t, now = clock(), read_steady()
        refusal = None
        with db.session() as session:
            took = take_lease(
                session, token, owner, ttl, t, watch, now, f"the database {shown}", last
            )
            if took is locks.LeaseTake.HELD:
                holder = read_holder(session)
            else:
                try:
                    refusal = foreign_runs(session, home, Path(settings.home).resolve())
                    if refusal is None:
                        record_home(session, token, home)
                        return token
                    if take_over_lost_home:
                        _took_over(take_over_lost_runs(session, token, home, t), shown)
                        return token
                except BaseException:  # not left held by a start-up that failed
                    session.rollback()
                    with contextlib.suppress(Exception):
                        locks.release_if_token(session, Lease, [LEASE], token)
                    raise
                locks.release_if_token(session, Lease, [LEASE], token)
        if refusal is not None:
            raise DatabaseInUse(f"cannot use the database {shown}: {refusal}")
        if deadline is None:
            first = holder
            deadline = now + watch.renewal_wait(holder, t)
            log.warning(
                "another control plane (%s) holds the scheduler lease of the database %s; "
                "waiting up to %.0f s for it to lapse",
                holder.describe(),
                shown,
                max(deadline - now, watch.holder_ttl(holder) + LEASE_GRACE),
            )
        if now >= deadline and holder != first:  # renewed (or taken) meanwhile: alive
            raise DatabaseInUse(
                f"another control plane uses the database {shown}: {holder.describe()} holds "
                "its scheduler lease and keeps renewing it (one control plane per database); "
                "stop that one, or give this one another database (--database-url, "
                "DANLU_DATABASE_URL)"
            )
        sleep(_poll_after(now, deadline))


def _poll_after(now: float, deadline: float) -> float:
    """How long a wait for another plane's lease sleeps before it reads the lease again:
    :data:`LEASE_POLL`, less to wake at ``deadline`` (when a renewal refuses the start)
    while that is ahead; past it (the lease not renewed, waited for to lapse) the poll's
    whole interval, not a read of the store every few milliseconds."""
    return min(LEASE_POLL, deadline - now) if now < deadline else LEASE_POLL


def _took_over(taken: list[str], shown: str) -> None:
    """Say what :func:`take_over_lost_runs` did to the database ``shown``."""
    listed = ", ".join(taken[:10]) + (f" and {len(taken) - 10} more" if len(taken) > 10 else "")
    log.warning(
        "%s: took the database %s over from the home given up as lost: %d job(s) whose "
        "runs were lost with it re-queued to resume from their last checkpoints here (%s)",
        TAKE_OVER_FLAG,
        shown,
        len(taken),
        listed,
    )


class LeaseWatch:
    """Watches the ``scheduler`` lease another plane holds, on a clock of the watcher's that
    no one sets (:func:`~danlu.server.loops.steady_clock`): a live holder changes the
    lease's row at every renewal (its expiry, every pass), so a row no one changed for the
    lease's TTL has a holder that did not renew it in time, whatever the hosts' wall clocks
    say. :meth:`lapsed` takes the holder for dead once the row stayed unchanged for its TTL
    (:meth:`holder_ttl`) and :data:`LEASE_GRACE` more with its expiry past on the watcher's
    wall clock, or for :meth:`patience_for` whatever its expiry (a dead holder's expiry a
    step of the clock back, or a host whose clock runs ahead, put far off). Its expiry alone
    is no sign: a step of the watcher's clock ahead makes a live holder's lease look expired.
    A plane renews its lease every ``DANLU_INTERVAL`` seconds, and its lease lasts five of
    them (:func:`scheduler_lease_ttl`), recorded on the row when it took it
    (:attr:`Lease.ttl`): the watcher measures the holder by that TTL, not its own (a standby
    of a shorter interval took a live holder of a longer one for dead), and waits twice it
    for an unexpired lease where that is longer than :data:`LEASE_WAIT_CAP`, so that a live
    holder of a long interval is not taken for dead. A row that records no TTL (written
    before revision 0034) is measured by the watcher's own :attr:`ttl`."""

    def __init__(self, ttl: float = LEASE_MIN_TTL) -> None:
        self._seen: tuple[tuple[str | None, str | None, float | None], float] | None = None
        self.ttl = ttl
        """This plane's own lease's TTL (:func:`scheduler_lease_ttl`): the holder's where
        its row records none."""
        self.patience = self.patience_of(ttl)
        """:meth:`patience_for` a holder whose row records no TTL."""

    @staticmethod
    def patience_of(ttl: float) -> float:
        """Seconds a row of a lease of ``ttl`` must stay unchanged for its holder to be taken
        for dead, whatever its expiry: :data:`LEASE_WAIT_CAP`, or twice ``ttl`` where that is
        longer."""
        return max(LEASE_WAIT_CAP, 2 * ttl)

    def holder_ttl(self, holder: Holder) -> float:
        """The TTL ``holder``'s lease is measured by: the one its row records, else (a row
        written before revision 0034, or a value no plane writes: not a positive, finite
        number) this plane's own :attr:`ttl`."""
        ttl = holder.ttl
        if ttl is None or not math.isfinite(ttl) or ttl <= 0:
            return self.ttl
        return float(ttl)

    def patience_for(self, holder: Holder) -> float:
        """Seconds ``holder``'s row must stay unchanged for it to be taken for dead whatever
        its expiry (:meth:`patience_of` its :meth:`holder_ttl`)."""
        return self.patience_of(self.holder_ttl(holder))

    def unchanged_for(self, holder: Holder, steady: float) -> float:
        """Seconds (of the watch's clock; ``steady``: now) for which the lease's row has been
        ``holder`` (its token, owner and expiry), 0 when it changed since the last look."""
        seen = (holder.token, holder.owner, holder.expires_at)
        if self._seen is None or self._seen[0] != seen:
            self._seen = (seen, steady)
            return 0.0
        return steady - self._seen[1]

    def lapsed(self, holder: Holder, t: float, steady: float) -> bool:
        """Whether ``holder`` (read at ``t`` on the wall clock, ``steady`` on the watch's) is
        dead: the row unchanged for its :meth:`holder_ttl` and :data:`LEASE_GRACE` more and
        its expiry before ``t``, or unchanged for :meth:`patience_for` it."""
        unchanged = self.unchanged_for(holder, steady)
        expired = holder.expires_at is None or holder.expires_at < t
        return unchanged >= self.patience_for(holder) or (
            expired and unchanged >= self.holder_ttl(holder) + LEASE_GRACE
        )

    def renewal_wait(self, holder: Holder, t: float) -> float:
        """Seconds after a first look at ``holder`` (at ``t`` on the wall clock) after which
        a row renewed meanwhile is taken for a live holder's (its expiry then, at most
        :meth:`patience_for` it, and :data:`LEASE_GRACE` more); a row no one changes is
        waited for until :meth:`lapsed` finds it dead."""
        remaining = holder.expires_at - t if holder.expires_at is not None else 0.0
        return min(self.patience_for(holder), max(remaining, 0.0)) + LEASE_GRACE

    def forget(self) -> None:
        """Drop what was seen (this plane holds the lease)."""
        self._seen = None


def log_unrenewed(holder: Holder, t: float, where: str, waited: float = LEASE_WAIT_CAP) -> None:
    """Log that ``holder``'s lease (of ``where``) is taken over (or, before an upgrade, let
    be): no one renewed it (:class:`LeaseWatch`) though its expiry lay far ahead at ``t``."""
    log.warning(
        "%s: no one renewed the scheduler lease %s holds in %.0f s, though it was to last "
        "%.0f s more (written before this host's clock was set back, or by a host whose "
        "clock runs that much ahead): that plane is gone, and its lease is taken over",
        where,
        holder.describe(),
        waited,
        (holder.expires_at or t) - t,
    )


def wait_before_upgrading(
    db_url: str,
    *,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    steady: Callable[[], float] | None = None,
    watch: LeaseWatch | None = None,
    last: HomeHolder | None = None,
) -> None:
    """Refuse to let a starting plane migrate a database another plane uses: a database at
    an older revision of this danlu whose ``scheduler`` lease is held (not given back, its
    holder not a process of this host that is gone, nor ``last`` of an earlier boot:
    :func:`~danlu.server.plane_owner.gone_from_home`) is used by a plane of an older danlu,
    which could not start on it again once migrated. Watches the lease as
    :func:`take_scheduler_lease` does (``watch``: give that one the same, so that a dead
    holder is waited for once), goes on once its holder is found dead
    (:meth:`LeaseWatch.lapsed`), and raises :class:`ConfigError` naming the holder and the
    fix while it is renewed. Reads the lease's columns of revision 0001, which every
    revision has, its home (:attr:`Lease.home`) where the database's revision has it (0028
    on) and its holder's TTL (:attr:`Lease.ttl`) where it has that (0034 on). Call before
    :func:`~danlu.server.db.upgrade_database`."""
    engine = make_engine(db_url)
    shown = engine.url.render_as_string(hide_password=True)
    read_steady = _steady_for(clock, steady)
    watch = watch if watch is not None else LeaseWatch()
    deadline: float | None = None
    first: Holder | None = None
    try:
        revision = _older_revision(engine)
        if revision is None:
            return
        columns = {column["name"] for column in inspect(engine).get_columns("leases")}
        ttl = "ttl" if "ttl" in columns else "NULL AS ttl"  # the column came with 0034
        home = "home" if "home" in columns else "NULL AS home"  # the column came with 0028
        query = text(
            f"SELECT lock_token, lock_owner, lock_expires_at, {ttl}, {home} FROM leases "
            "WHERE id = :name"
        )
        while True:
            t, now = clock(), read_steady()
            with engine.connect() as conn:
                row = conn.execute(query, {"name": LEASE}).one_or_none()
            if row is None or row.lock_token is None or row.lock_expires_at is None:
                return
            if dead_here(row.lock_owner) or gone_from_home(row.lock_owner, row.home, last):
                return
            holder = Holder(row.lock_token, row.lock_owner, row.lock_expires_at, None, row.ttl)
            if watch.lapsed(holder, t, now):
                if row.lock_expires_at >= t:
                    log_unrenewed(
                        holder, t, f"upgrading the database {shown}", watch.patience_for(holder)
                    )
                return
            if deadline is None:
                first = holder
                deadline = now + watch.renewal_wait(holder, t)
            if now >= deadline and holder != first:  # renewed meanwhile: alive
                raise DatabaseInUse(
                    f"another control plane ({describe_owner(row.lock_owner)}) uses the "
                    f"database {shown}, at revision {revision}, and keeps renewing its "
                    f"scheduler lease; this danlu would migrate the database to revision "
                    f"{head_revision()}, and that plane's older danlu could not start on it "
                    "again. Stop that plane first, then start this one (one control plane "
                    "per database); or give this one another database (--database-url, "
                    "DANLU_DATABASE_URL)"
                )
            sleep(_poll_after(now, deadline))
    finally:
        engine.dispose()


def release_scheduler_lease(db: Database, token: str) -> None:
    """Give the ``scheduler`` lease back if ``token`` holds it (its home stays recorded)."""
    with db.session() as session:
        locks.release_if_token(session, Lease, [LEASE], token)
