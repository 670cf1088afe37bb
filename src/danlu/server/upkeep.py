"""The queue's own rules, applied by every pass of the reconcile loop before it schedules:
cordons and drains scheduled for now (:func:`close_nodes`), deadlines and time limits
(:func:`expire`), dependencies (:func:`judge_dependencies`) and sweeps
(:func:`advance_sweeps`). Each works one job or sweep per transaction, so that a request
changing one of them meanwhile costs only that one (it is judged again next pass). And the
check, as a plane begins to lead, for jobs whose recorded times lie ahead of its clock
(:func:`warn_times_ahead`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from sqlalchemy import func, or_, select
from sqlalchemy.exc import SQLAlchemyError

from danlu.core.errors import DanluError
from danlu.core.state import JobState
from danlu.server.db import Database, Job, Node
from danlu.server.services import dependencies, jobs, nodes, sweeps
from danlu.server.services.common import shown_time

log = logging.getLogger(__name__)
MAX_DEPENDENCY_CHAIN = 16
"""How many links of a chain of dependent jobs one pass cancels at most (the rest follow in
the next passes)."""


AHEAD_SLACK = 60.0
"""Seconds a job's recorded time may lie ahead of the clock before :func:`warn_times_ahead`
takes it for a sign of a step of the clock back (hosts' clocks differ a little)."""


def warn_times_ahead(db: Database, t: float) -> int:
    """Log, as a WARNING, the jobs whose submission, start or end lies more than
    :data:`AHEAD_SLACK` seconds after ``t``: the wall clock was set back while no control
    plane ran (a step a running plane sees moves the runs' starts and backoffs with it), or
    a host whose clock runs ahead wrote them. Their run times and GPU-hours count from those
    times (a run started "in an hour" has run no time for an hour), and nothing is
    rewritten: the operator is told how many, by how much, and which. Returns how many."""
    columns = (Job.submitted_at, Job.started_at, Job.finished_at)
    ahead = or_(*(column > t + AHEAD_SLACK for column in columns))
    with db.read_session() as session:
        count = session.scalar(select(func.count()).select_from(Job).where(ahead)) or 0
        if not count:
            return 0
        latest = max(
            session.scalar(select(func.max(column)).where(column > t + AHEAD_SLACK)) or t
            for column in columns
        )
        shown = list(session.scalars(select(Job.id).where(ahead).order_by(Job.seq).limit(3)))
    more = f" and {count - len(shown)} more" if count > len(shown) else ""
    log.warning(
        "jobs with times recorded up to %.0f s after this host's clock: %d (%s%s). The "
        "clock was set back while no control plane ran, or a host whose clock runs ahead "
        "wrote them; their run times and GPU-hours count from those times (nothing is "
        "rewritten). Check the clocks (NTP) of the hosts that run control planes",
        latest - t,
        count,
        ", ".join(shown),
        more,
    )
    return int(count)


@dataclass
class Upkeep:
    """What one pass's rules did (job ids); the reconcile loop's report extends it."""

    expired: list[str] = field(default_factory=list)
    """Jobs cancelled because their deadline passed."""
    timed_out: list[str] = field(default_factory=list)
    """Jobs cancelled because they held GPUs for their ``time_limit``."""
    ready: list[str] = field(default_factory=list)
    """Waiting jobs whose dependencies are all met now (scheduled from this pass on)."""
    abandoned: list[str] = field(default_factory=list)
    """Waiting jobs cancelled because a dependency can never be met."""
    trials: list[str] = field(default_factory=list)
    """Sweep trials submitted."""
    stopped_early: list[str] = field(default_factory=list)
    """Sweep trials the median rule stopped."""
    closed_nodes: list[str] = field(default_factory=list)
    """Nodes whose scheduled cordon or drain took effect (names)."""
    opened_nodes: list[str] = field(default_factory=list)
    """Nodes uncordoned because their cordon or drain ended (``--until``: names)."""
    errors: list[str] = field(default_factory=list)
    """What the pass met and went on from (``"STEP JOB: why"``): logged by the loop
    (:class:`~danlu.server.loops.PassErrors`) and counted in ``danlu_reconcile_errors_total``."""


def _failed(out: Upkeep, step: str, subject: str, exc: Exception) -> None:
    """A rule's failure on one job or sweep (``subject``) that is no error of the store's (a
    bug, a stored row this code cannot read): said in ``out.errors`` (the loop logs it, at
    most hourly while it recurs), and the pass goes on with the others (it is tried again
    next pass). It ended every pass before the plan: no job of the cluster started again.
    A store's error is raised (it ends the pass, as any step's)."""
    if isinstance(exc, SQLAlchemyError):
        raise exc
    out.errors.append(f"{step} {subject}: {type(exc).__name__}: {exc}")


def close_nodes(db: Database, t: float, out: Upkeep) -> None:
    """Apply the cordons and drains scheduled for ``t`` or before (the round that follows
    sees the nodes closed and preempts a drained node's jobs), then open the nodes whose
    cordon or drain ended (:func:`~danlu.server.services.nodes.open_due`: the round that
    follows schedules onto them), each said in the log once committed, with its reason: the
    start and the end of a maintenance window, which an operator looks for there."""
    said: list[tuple[str, bool, str, float | None]] = []
    with db.session() as session:
        closed = nodes.close_due(session, t)
        if closed:
            session.flush()
            rows = session.execute(
                select(Node.name, Node.draining, Node.cordon_reason, Node.open_at)
                .where(Node.name.in_(closed))
                .order_by(Node.name)
            )
            said = [
                (str(name), bool(draining), str(reason), open_at)
                for name, draining, reason, open_at in rows
            ]
        opened = nodes.open_due(session, t)
        out.closed_nodes += closed
        out.opened_nodes += [node.name for node in opened]
    for name, draining, reason, open_at in said:
        log.info(
            "node %s: its scheduled %s took effect (%s)%s%s",
            name,
            "drain" if draining else "cordon",
            reason,
            "; its preemptible jobs are preempted by checkpoint" if draining else "",
            "" if open_at is None else f"; it ends at {shown_time(open_at)} (--until)",
        )
    for node in opened:
        log.info(
            "node %s: its %s ended at %s (--until): uncordoned, open to new work again "
            "(it was %s%s)",
            node.name,
            "drain" if node.state == "draining" else "cordon",
            shown_time(node.at),
            node.state,
            f": {node.reason}" if node.reason else "",
        )


def expire(db: Database, t: float, out: Upkeep) -> None:
    """Cancel the jobs whose deadline has passed or that used their time limit: a queued one
    ends now, a running one is stopped by the pass (SIGTERM with its preemption grace, to
    checkpoint). Called after the pass has settled the exits it saw: a run that ended before
    its limit ends as it exited. A job is reported only when this call cancelled it: not
    one whose cancellation was asked meanwhile (by its user, or by its deadline when its
    time limit is used up too), which cancelling again leaves as it was."""
    with db.read_session() as session:
        past_deadline = jobs.expired(session, t)
        over_time = jobs.over_time(session, t)
    for due, done in ((past_deadline, out.expired), (over_time, out.timed_out)):
        for job_id, reason in due:
            try:
                with db.session() as session:
                    job = jobs.cancel_job(session, job_id, reason=reason, now=t)
                    ours = job.state == JobState.CANCELLED.value or (
                        job.cancel_requested_at == t and job.cancel_reason == reason
                    )
            except DanluError as exc:  # finished or cancelled meanwhile
                log.debug("reconcile: cancelling %s (%s): %s", job_id, reason, exc)
                continue
            except Exception as exc:
                _failed(out, "expire", job_id, exc)
                continue
            if ours:
                done.append(job_id)


def judge_dependencies(db: Database, t: float, out: Upkeep) -> None:
    """Release the waiting jobs with nothing left to wait for, cancel those that can never
    run, again while cancellations ripple down a chain (bounded)."""
    for _ in range(MAX_DEPENDENCY_CHAIN):
        with db.read_session() as session:
            due = dependencies.due(session)
        cancelled = False
        for job_id, verdict in due:
            try:
                with db.session() as session:
                    if verdict.never is None:
                        recorded = dependencies.record(session, job_id, verdict)
                        if recorded and verdict.waiting_on is None:
                            out.ready.append(job_id)
                        continue
                    jobs.cancel_job(session, job_id, reason=verdict.never, now=t)
            except DanluError as exc:
                log.debug("reconcile: dependencies of %s: %s", job_id, exc)
                continue
            except Exception as exc:
                _failed(out, "dependencies", job_id, exc)
                continue
            out.abandoned.append(job_id)
            cancelled = True
        if not cancelled:
            return


def advance_sweeps(db: Database, t: float, out: Upkeep) -> None:
    """One step of every RUNNING sweep (:func:`~danlu.server.services.sweeps.advance`)."""
    with db.read_session() as session:
        running = sweeps.running_ids(session)
    for sweep_id in running:
        try:
            with db.session() as session:
                stopped, submitted = sweeps.advance(session, sweep_id, t)
        except DanluError as exc:
            log.debug("reconcile: sweep %s: %s", sweep_id, exc)
            continue
        except Exception as exc:
            _failed(out, "sweep", sweep_id, exc)
            continue
        out.stopped_early += stopped
        out.trials += submitted
