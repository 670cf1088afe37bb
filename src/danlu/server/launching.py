"""The reconcile loop's launch step (:class:`LaunchStep`, a part of
:class:`~danlu.server.reconcile.Reconciler`), and the row locks every step takes.

A pass launches the jobs its round started and those recorded as started but never
launched. Each launch is made with the job's row locked with the loop's token; the launch
itself (process I/O) is made outside any transaction. A launch that fails for the node's
reasons (a full disk), or that the cluster refuses as its partition takes no job (Slurm's
partition drained), re-queues its job with no restart counted; one the executor cannot make
as it cannot reach its cluster (Slurm's controller down) leaves the job its GPUs, its
``pending_reason`` saying so until a launch goes through; one that no launch can be
made of fails its job; any other failure of one job's launch is reported, and the pass goes
on with the next job. Each run is ``(job id, attempt)`` and the executor refuses a second
run of a job id while one runs, so nothing runs twice: a launch that finds the job's earlier
run still running asks that run to stop (:meth:`LaunchStep._stop_previous`) and is made a
pass later.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from sqlalchemy import func, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from danlu.config import Settings
from danlu.core.cluster import Cluster
from danlu.core.errors import DanluError, SpecError
from danlu.core.spec import is_checkpoint_location
from danlu.core.state import JobState
from danlu.executors import (
    ExecStatus,
    Executor,
    ExecutorError,
    ExecutorUnavailableError,
    GpusBusyError,
    GpuSlot,
    Handle,
    JobAlreadyRunningError,
    JobLaunch,
    NodeLaunchError,
    Outcome,
    PartitionClosedError,
    RunState,
    StopReason,
    UnknownHandleError,
    is_node_fault,
)
from danlu.executors.accounts import os_account
from danlu.server.db import Database, Job, JobEvent
from danlu.server.run_as import give_to
from danlu.server.run_exits import storable
from danlu.server.services import jobs, locks, nodes, users
from danlu.server.services.admission import relative_file_url
from danlu.server.services.job_reasons import (
    PARTITION_CLOSED,
    UNREACHED,
    WAITING_FOR_RUNS,
    busy_reason,
)
from danlu.server.services.projects import HOLDING
from danlu.server.services.view import lost_gpus, to_allocation

LATE_LAUNCH = 1.0
"""Seconds after the decision past which a started job's launch moves its ``last_start``
(:meth:`LaunchStep._record_launches`); a launch in the deciding pass is not."""

if TYPE_CHECKING:
    from danlu.server.reconcile import RoundReport


class Launched(NamedTuple):
    """A launch the executor took in the launch step (:meth:`LaunchStep._record_launches`)."""

    job_id: str
    attempt: int
    late: bool
    """Made :data:`LATE_LAUNCH` seconds or more after the decision (a moved job's new run
    never is)."""


log = logging.getLogger("danlu.server.reconcile")
"""The reconcile loop's logger: the launch step is a part of it."""


class LaunchStep:
    """The launch step of the reconcile loop, and the row locks of its steps (a mixin of
    :class:`~danlu.server.reconcile.Reconciler`, which sets these attributes)."""

    db: Database
    executor: Executor
    settings: Settings
    token: str
    ttl: float
    owner: str
    checkpoints: Path
    preempt_grace: float

    # -- the row locks ------------------------------------------------------------------------

    def _claim(self, ids: list[str], t: float) -> set[str]:
        if not ids:
            return set()
        with self.db.session() as session:
            return set(locks.claim(session, Job, ids, self.token, self.ttl, t, self.owner))

    def _release(self, ids: set[str]) -> None:
        if ids:
            with self.db.session() as session:
                locks.release_if_token(session, Job, ids, self.token)

    def _held(self, session: Session, job_id: str, attempt: int) -> Job | None:
        """The job, while its run ``attempt`` still holds GPUs and this loop holds its row
        lock; else None (a cancel, another pass or a later attempt got there first)."""
        job = session.scalar(select(Job).where(Job.id == job_id))
        if job is None or job.attempt != attempt or job.state not in HOLDING:
            return None
        return job if locks.holds(session, Job, job_id, self.token) else None

    def _settle(
        self,
        job_id: str,
        attempt: int,
        status: ExecStatus | None,
        t: float,
        report: RoundReport,
        blamed: str | None = None,
        moved: bool = False,
        ran: bool = True,
    ) -> None:
        """Record the exit of run ``attempt`` (the poll step's, in the reconciler)."""
        raise NotImplementedError

    def _left_run(self, job_id: str, moved: int | None) -> ExecStatus | None:
        """How the run ``moved`` (a job's ``moved_from``: the run a move left) ended, once
        :meth:`_stop_previous` found no earlier run running; None when there is none or the
        executor no longer knows it (forgotten, or replaced by a later run). An
        :class:`ExecutorError` when the executor cannot say now."""
        if moved is None:
            return None
        try:
            status = self.executor.poll(Handle(job_id, moved))
        except UnknownHandleError:
            return None
        return None if status.running else status

    def _judge_move(
        self, job_id: str, attempt: int, moved: int, t: float, report: RoundReport
    ) -> bool:
        """Judge how the run a move left (attempt ``moved``) ended, before the launch of the
        new run ``attempt`` replaces the executor's record of it. One that finished the
        job's work (exit 0) within its grace ends the job SUCCEEDED; one that failed (or ran
        out of memory) counts as a failure of the job's run, as the poll counts one
        (RESTARTING with backoff, or FAILED out of restarts); one that stopped for the move
        (checkpointed, or killed at the end of its grace), was lost with its node, or that
        the executor no longer knows leaves the new run to launch. True when it may launch
        now (``moved_from`` cleared); False when the job was settled, the old run still
        runs (it is asked to stop, as a refused launch would), or it cannot be told now."""
        try:
            status: ExecStatus | None = self.executor.poll(Handle(job_id, moved))
        except UnknownHandleError:
            status = None
        except ExecutorError as exc:
            report.errors.append(f"launch {job_id}: cannot poll the run it was moved from: {exc}")
            return False
        if status is not None and status.running:
            self._stop_previous(job_id, attempt, report)
            return False
        if status is not None and status.outcome is not Outcome.PREEMPTED and not status.node_lost:
            self._settle(job_id, attempt, status, t, report, moved=True)
            return False
        try:
            with self.db.session() as session:
                job = self._held(session, job_id, attempt)
                if job is None or job.moved_from != moved:
                    return False
                job.moved_from = None
        except DanluError as exc:
            report.errors.append(f"launch {job_id}: {exc}")
            return False
        return True

    # -- the launch step ----------------------------------------------------------------------

    def _launch(self, ids: list[str], t: float, report: RoundReport) -> None:
        """Launch ``ids`` (their rows locked with this loop's token meanwhile), then record
        the launches that went through. One that ends the step early (a store error as a
        later job's launch is prepared) still has the launches made before it recorded:
        their processes run."""
        claimed = self._claim(ids, t)
        went: set[str] = set()  # the nodes of the launches that went through
        taken: list[Launched] = []
        try:
            for job_id in ids:
                if job_id in claimed:
                    went |= self._launch_one(job_id, t, report, taken)
        finally:
            try:
                self._record_launches(taken, went, t, report)  # while the rows are this loop's
            finally:
                self._release(claimed)

    def _launch_one(
        self,
        job_id: str,
        t: float,
        report: RoundReport,
        taken: list[Launched],
        moved_now: bool = False,
    ) -> set[str]:
        """Launch ``job_id``'s current run; the names of its nodes when it went through (and
        the launch added to ``taken``, for :meth:`_record_launches`). ``moved_now``: the
        job's move was judged just before (its run follows one it left)."""
        attempt = 0
        decided: float | None = None
        try:
            with self.db.session() as session:
                job = session.scalar(select(Job).where(Job.id == job_id))
                if (
                    job is None
                    or job.state != JobState.RUNNING.value
                    or job.cancel_requested_at is not None
                    or not locks.holds(session, Job, job_id, self.token)
                ):
                    return set()
                if gone := lost_gpus(job.allocation, self.executor.inventory()):
                    # placed on a view the executor's nodes no longer match: never a launch
                    # on what is left of the allocation
                    jobs.requeue_lost(session, job, gone, t)
                    report.settled.append(job_id)
                    return set()
                attempt, moved, decided = job.attempt, job.moved_from, job.last_start
                if moved is None:
                    launch = self.job_launch(session, job)
                    names = {str(share["node"]) for share in job.allocation or ()}
        except SpecError as exc:  # (InvalidLaunchError too) no launch can be made of the job
            self._fail_unlaunchable(job_id, exc, t, report)
            return set()
        except DanluError as exc:
            report.errors.append(f"launch {job_id}: {exc}")
            return set()
        except OSError as exc:  # its checkpoint directory: one job's files, not the pass
            self._unprepared(job_id, attempt, exc, t, report)
            return set()
        if moved is not None:  # how the run a move left ended counts first
            judged = self._judge_move(job_id, attempt, moved, t, report)
            return self._launch_one(job_id, t, report, taken, moved_now=True) if judged else set()
        try:
            self.executor.submit(launch)  # process I/O: outside any transaction
            report.launched.append(job_id)
            late = not moved_now and decided is not None and t - decided >= LATE_LAUNCH
            taken.append(Launched(job_id, attempt, late))
            return names
        except JobAlreadyRunningError:  # its previous run still exits: launched a pass later
            self._discard_token(job_id, launch.token, report)
            self._stop_previous(job_id, attempt, report)
        except GpusBusyError as exc:  # another job's run still holds one of its GPUs: next pass
            self._discard_token(job_id, launch.token, report)
            self._note_busy(job_id, attempt, exc, report)
        except ExecutorUnavailableError as exc:  # e.g. Slurm's controller down: next pass
            log.warning("reconcile: cannot launch %s now: %s", job_id, exc)
            report.errors.append(f"launch {job_id}: {exc}")
            self._discard_token(job_id, launch.token, report)
            self._note_unreached(job_id, attempt, str(exc), report)
        except SpecError as exc:  # (InvalidLaunchError) the same launch is refused again
            log.warning("reconcile: the executor refuses the launch of %s: %s", job_id, exc)
            self._discard_token(job_id, launch.token, report)
            self._fail_unlaunchable(job_id, exc, t, report)
        except (ExecutorError, OSError) as exc:  # OSError: one job's files, not the pass
            if isinstance(exc, PartitionClosedError):  # no node's fault: none blamed
                log.warning("reconcile: %s not launched, %s: %s", job_id, PARTITION_CLOSED, exc)
                error, cause = str(exc), PARTITION_CLOSED
                self._requeue_unlaunched(job_id, attempt, error, t, report, (), cause=cause)
                return set()
            if is_node_fault(exc):
                log.warning("reconcile: the node could not launch %s: %s", job_id, exc)
                blamed = exc.nodes if isinstance(exc, NodeLaunchError) else None
                self._requeue_unlaunched(job_id, attempt, str(exc), t, report, blamed)
                return set()
            log.warning("reconcile: launch of %s failed: %s", job_id, exc)
            failed = ExecStatus(
                state=RunState.EXITED,
                outcome=Outcome.FAILED,
                message=f"launch failed: {exc}",
            )
            self._settle(job_id, attempt, failed, t, report, ran=False)  # never ran
        return set()

    def _record_launches(
        self, taken: list[Launched], went: set[str], t: float, report: RoundReport
    ) -> None:
        """Record the launches the executor took, in one transaction, while this loop holds
        the jobs' rows (a row whose lock was lost is left alone): each job's
        ``launched_attempt`` (a run of it the executor no longer knows is then counted as
        a failure by the poll, not launched again for free as one never launched), and the
        launch failures in a row of ``went``, the nodes launched on, start over. A launch
        made ``t`` passes after the decision (``late``: it waited for GPUs a moved or
        preempted job's run still held, or for a control plane that stopped before the
        launch) moves the job's ``last_start`` to ``t``: its GPU-hours, its time limit and
        the policy's hold begin when its process does. A moved job's new run keeps the
        decision's time (its earlier stretch ended then). A store that fails now leaves
        these unrecorded until the next poll finds them running (:meth:`_record_running`)."""
        if not taken and not went:
            return
        try:
            with self.db.session() as session:
                for launch in taken:
                    # a Core UPDATE under the row lock's token: the job's version (and the
                    # policy's memo of it) stays
                    values = {"launched_attempt": launch.attempt}
                    held = locks.update_if_token(session, Job, launch.job_id, self.token, values)
                    if not held or not launch.late:
                        continue
                    job = self._held(session, launch.job_id, launch.attempt)
                    if job is not None and job.last_start is not None and job.last_start < t:
                        job.last_start = t
                if taken:  # launched: no longer waiting for an unreachable cluster
                    self._clear_unreached(session, [launch.job_id for launch in taken])
                if went and not self.executor.start_seen_at_poll:
                    # an executor that learns of a start only at a poll (Ray: the actor may
                    # fail to start on its node after the submit) has the count started
                    # over by the poll that sees the run started (PollStep._note_started)
                    nodes.launched(session, went)
        except (DanluError, SQLAlchemyError) as exc:  # the launches went through anyway
            report.errors.append(f"launch: cannot record the launches: {exc}")

    def _record_running(self, runs: list[tuple[str, int]], report: RoundReport) -> None:
        """Record as launched the runs ``(job id, attempt)`` the executor reports running
        whose launch the store lacks (:meth:`_record_launches` failed with the store, or
        the pass ended before it): charged no energy, counted in no usage, and, vanished,
        launched again for free, such a run was taken for one never launched for as long
        as it ran. A Core UPDATE while this loop holds the row and the run is the job's
        current one: the job's version stays. A store that fails now leaves them for the
        next pass."""
        if not runs:
            return
        try:
            with self.db.session() as session:
                for job_id, attempt in runs:
                    session.execute(
                        update(Job)
                        .where(
                            Job.id == job_id,
                            Job.lock_token == self.token,
                            Job.attempt == attempt,
                        )
                        .values(launched_attempt=attempt)
                        .execution_options(synchronize_session=False)
                    )
                self._clear_unreached(session, [job_id for job_id, _ in runs])
        except (DanluError, SQLAlchemyError) as exc:
            report.errors.append(f"poll: cannot record the launches of running runs: {exc}")

    def _note_unreached(self, job_id: str, attempt: int, error: str, report: RoundReport) -> None:
        """Say in the ``pending_reason`` of ``job_id`` (RUNNING, its run ``attempt`` not
        launched) that the executor cannot reach its cluster (``error``: Slurm's controller
        down), so nothing was submitted: placed by the scheduler, the job keeps its GPUs and
        its launch is tried at every pass, but without this it read as running on them
        (``danlu show``, ``danlu why``, the API) while nothing ran. Cleared once a launch goes
        through (:meth:`_clear_unreached`). A Core UPDATE while this loop holds the row, made
        only when the reason changes, that leaves the job's version (a reason is advice, not
        state), and never over a held job's reason (who held it). A store that fails now
        leaves it for the next pass."""
        reason = storable(
            f"{UNREACHED} ({error}): it keeps its GPUs and is launched once the cluster answers"
        )
        try:
            with self.db.session() as session:
                self._write_wait(session, job_id, attempt, reason)
        except (DanluError, SQLAlchemyError) as exc:  # advice only: never the pass's end
            report.errors.append(f"launch {job_id}: cannot record why it waits: {exc}")

    def _note_busy(
        self, job_id: str, attempt: int, error: GpusBusyError, report: RoundReport
    ) -> None:
        """Say in the ``pending_reason`` of ``job_id`` (RUNNING, its run ``attempt`` not
        launched) which other jobs' runs still hold its GPUs, as the executor's refusal names
        them (:func:`~danlu.server.services.job_reasons.busy_reason`): a run a move left is
        recorded on no GPU in the store, so ``danlu why`` could name it from nothing else.
        Written, left and cleared as :meth:`_note_unreached`'s reason; nothing when the
        executor named no holder."""
        if not error.holders:
            return
        try:
            names = [node.name for node in self.executor.inventory().nodes]
            holders = {
                held: [f"{names[n] if 0 <= n < len(names) else n}:{gpu}" for n, gpu in gpus]
                for held, gpus in error.holders.items()
            }
            with self.db.session() as session:
                job = session.scalar(select(Job).where(Job.id == job_id))
                reason = None if job is None else busy_reason(session, job, holders)
                if reason is not None:
                    self._write_wait(session, job_id, attempt, storable(reason))
        except (DanluError, SQLAlchemyError) as exc:  # advice only: never the pass's end
            report.errors.append(f"launch {job_id}: cannot record why it waits: {exc}")

    def _write_wait(self, session: Session, job_id: str, attempt: int, reason: str) -> None:
        """Set ``reason`` as the ``pending_reason`` of ``job_id`` while this loop holds its
        row, its run ``attempt`` is its current one, it is RUNNING and not held (a hold's
        reason names who held it), and the reason differs: a Core UPDATE that leaves the
        job's version (a reason is advice, not state)."""
        session.execute(
            update(Job)
            .where(
                Job.id == job_id,
                Job.lock_token == self.token,
                Job.attempt == attempt,
                Job.state == JobState.RUNNING.value,
                Job.held_at.is_(None),
                Job.pending_reason.is_distinct_from(reason),
            )
            .values(pending_reason=reason)
            .execution_options(synchronize_session=False)
        )

    def _clear_unreached(self, session: Session, job_ids: list[str]) -> None:
        """Clear the reason :meth:`_note_unreached` or :meth:`_note_busy` gave ``job_ids``,
        launched now (rows this loop holds), in ``session``'s transaction; another reason (a
        hold's) stays."""
        noted = Job.pending_reason.startswith(UNREACHED, autoescape=True) | (
            Job.pending_reason.startswith(WAITING_FOR_RUNS, autoescape=True)
        )
        session.execute(
            update(Job)
            .where(Job.id.in_(job_ids), Job.lock_token == self.token, noted)
            .values(pending_reason=None)
            .execution_options(synchronize_session=False)
        )

    def _discard_token(self, job_id: str, token: str | None, report: RoundReport) -> None:
        """Delete the token issued for a launch of ``job_id`` the executor refused for now
        (nothing started with it): the next pass issues the launch its own, and a launch
        refused pass after pass would leave a token row a pass. A store that fails now
        leaves this one row (revoked with the job's next token or its end)."""
        if token is None:
            return
        try:
            with self.db.session() as session:
                users.delete_job_token(session, job_id, token)
        except (DanluError, SQLAlchemyError) as exc:  # best effort: never the pass's end
            report.errors.append(f"launch {job_id}: cannot delete its unused token: {exc}")

    def _unprepared(
        self, job_id: str, attempt: int, exc: OSError, t: float, report: RoundReport
    ) -> None:
        """The control plane could not make ``job_id``'s checkpoint directory (a full or
        read-only file system, a failed chown, no permission): the job is re-queued with no
        restart counted and no node blamed (the directory is the control plane's, not the
        job's node's), the reason in its events and ``danlu explain``, and tried again after
        a backoff that doubles with each such failure. Its GPUs go to other jobs meanwhile:
        left RUNNING, it held them, said "running" and was tried every pass for as long as
        the directory could not be made. An error that is not a fault of the machine's
        (:func:`~danlu.executors.is_node_fault`: a permission, a file in the way) is an
        administrator's to fix: it is reported too (logged, counted)."""
        error = f"cannot make its checkpoint directory: {exc}"
        log.warning("reconcile: %s %s", job_id, error)
        if not is_node_fault(exc):
            report.errors.append(f"launch {job_id}: {error}")
        cause = jobs.CHECKPOINT_DIR_FAULT
        self._requeue_unlaunched(job_id, attempt, str(exc), t, report, blamed=(), cause=cause)

    def _requeue_unlaunched(
        self,
        job_id: str,
        attempt: int,
        error: str,
        t: float,
        report: RoundReport,
        blamed: tuple[str, ...] | None = None,
        cause: str = jobs.NODE_FAULT,
        most: int = 0,
    ) -> None:
        """Re-queue a job the node could not launch (a full disk): no restart counted. The
        failure counts against ``blamed`` (None: all the job's nodes), which are cordoned once
        ``settings.node_launch_failures`` launches in a row failed there. ``cause``: how
        the job's reason begins (:func:`~danlu.server.services.jobs.requeue_unlaunched`).
        ``most`` (0: no bound): the job's ``most``-th re-queue of ``cause`` fails it instead
        (:meth:`_fail_unlaunched_again`), its nodes counted all the same."""
        try:
            with self.db.session() as session:
                job = self._held(session, job_id, attempt)
                if job is None:
                    return
                names = {str(share["node"]) for share in job.allocation or ()}
                if blamed is not None:
                    names &= set(blamed)
                if not most or not self._fail_unlaunched_again(
                    session, job, error, t, cause, most, names
                ):
                    jobs.requeue_unlaunched(session, job, error, t, cause=cause)
                limit = self.settings.node_launch_failures
                closed = nodes.launch_failed(session, names, error, limit, t)
            report.settled.append(job_id)
        except DanluError as exc:  # the launch step's: counted under step="launch"
            report.errors.append(f"launch {job_id}: cannot re-queue it: {exc}")
            return
        self._note_cordoned(closed, report)

    @staticmethod
    def _fail_unlaunched_again(
        session: Session,
        job: Job,
        error: str,
        t: float,
        cause: str,
        most: int,
        names: set[str],
    ) -> bool:
        """Fail ``job`` (RUNNING, no cancel asked) with a reason naming ``names`` and
        ``error`` when it was re-queued ``most - 1`` times before for launches that failed
        with ``cause`` (its events' reasons say so); True when it did. Else (fewer, or a job
        stopping or cancelled: :func:`~danlu.server.services.jobs.requeue_unlaunched` settles
        that one) False."""
        if job.state != JobState.RUNNING.value or job.cancel_requested_at is not None:
            return False
        earlier = session.scalar(
            select(func.count())
            .select_from(JobEvent)
            .where(
                JobEvent.job_id == job.id,
                JobEvent.new == JobState.RESTARTING.value,
                JobEvent.reason.startswith(f"{cause}: ", autoescape=True),
            )
        )
        tries = int(earlier or 0) + 1
        if tries < most:
            return False
        where = ", ".join(sorted(names)) or "its nodes"
        reason = (
            f"{tries} of its runs could not be launched for their nodes' reasons, with no "
            f"restart counted; given up (the last on {where}: {error})"
        )
        users.revoke_job_tokens(session, job.id, t)  # the token of the run that never started
        jobs.change_state(session, job, JobState.FAILED, reason, t)
        return True

    def _note_cordoned(self, closed: list[str], report: RoundReport) -> None:
        """Log and report the nodes ``closed`` (cordoned after failed launches)."""
        limit = self.settings.node_launch_failures
        for name in closed:
            log.warning("reconcile: node %s cordoned: %d launches failed in a row", name, limit)
            report.cordoned.append(name)

    def _fail_unlaunchable(
        self, job_id: str, error: SpecError, t: float, report: RoundReport
    ) -> None:
        """Fail a job no launch can be made of (a spec an older version accepted that the
        executor refuses, a launch the executor refuses as invalid: the local executor's
        ``workdir`` that is not a directory of its host): retrying cannot help, and it would
        hold its GPUs for good, or fail again at each of its restarts."""
        try:
            with self.db.session() as session:
                job = session.scalar(select(Job).where(Job.id == job_id))
                if job is None or job.state != JobState.RUNNING.value:
                    return
                if not locks.holds(session, Job, job_id, self.token):
                    return
                # a run never launched: its wait for GPUs another run held is charged nothing
                until = job.last_start if jobs.waits_for_launch(job) else None
                reason = f"cannot be launched: {error}"
                jobs.change_state(session, job, JobState.FAILED, reason, t, ran_until=until)
            report.settled.append(job_id)
        except DanluError as exc:
            report.errors.append(f"launch {job_id}: {exc}")

    def _stop_previous(
        self, job_id: str, attempt: int, report: RoundReport, *, cancel: bool = False
    ) -> bool:
        """Ask the run of an earlier attempt of ``job_id`` that still runs to stop, unless it
        has been asked already: a move whose stop request failed (the executor was briefly
        unreachable) would otherwise keep its old run, and the GPUs recorded free, for good.
        The newest earlier attempt the executor knows is that run. ``cancel``: the job is
        being cancelled, so the run is cancelled (also one stopping for a preemption), with
        the job's grace to checkpoint as a preemption has; else it is preempted with the
        preemption grace. True when no earlier run runs (it
        exited, or the executor knows none): the job may be settled or launched. False when
        one still runs (asked to stop, now or before: it holds its GPUs until it exits) or
        the executor could not be asked (it may still run, unasked)."""
        for earlier in range(attempt - 1, 0, -1):
            handle = Handle(job_id, earlier)
            try:
                status = self.executor.poll(handle)
                if not status.running:
                    return True
                if cancel and status.stop_reason is not StopReason.CANCEL:
                    self.executor.cancel(handle, self.preempt_grace)
                    report.stopped.append(job_id)
                elif not cancel and status.stop_reason is None:
                    self.executor.preempt(handle, self.preempt_grace)
                    report.preempted.append(job_id)
            except UnknownHandleError:
                continue
            except ExecutorError as exc:
                report.errors.append(f"stop {handle.key}: {exc}")
            return False
        return True

    def job_launch(self, session: Session, job: Job) -> JobLaunch:
        """The launch of ``job``'s current attempt, with the job environment of DESIGN.md
        (a fresh API token of the job's user is issued in ``session``; a launch the executor
        refuses for now deletes it: :meth:`_discard_token`). With
        ``DANLU_RUN_AS=user`` it runs as its user's OS account, which owns its checkpoint
        directory; an account this host lacks is an :class:`InvalidLaunchError`. An
        :class:`OSError` when that directory cannot be made or given to the account."""
        spec = jobs.job_spec(job)
        account = os_account(job.user.account) if self.settings.run_as == "user" else None
        cluster = self.executor.inventory()
        allocation = to_allocation(job.allocation, cluster)
        slots = JobLaunch.slots(allocation, shared_memory=bool(job.gpu_memory_per_gpu) or None)
        checkpoint = spec.checkpoint_dir
        if (
            checkpoint is None
            or not is_checkpoint_location(checkpoint)
            or relative_file_url(checkpoint)
        ):
            # The job's own directory; a spec stored before locations were checked that
            # names a relative path gets it too, as it always did, and so does one stored
            # before a file:// URL of a relative path was refused (admission's
            # relative_file_url). A location of the spec's is the job's: the control plane
            # neither creates nor reads it.
            own = self.checkpoints / job.id  # job ids are validated names
            own.mkdir(parents=True, exist_ok=True, mode=0o700)
            if account is not None:
                give_to(own, account)
            checkpoint = str(own)
        token = users.issue_token(session, job.user, f"job {job.id}#{job.attempt}", job_id=job.id)
        return JobLaunch(
            job_id=job.id,
            argv=tuple(spec.command),
            env=dict(spec.env),
            gpus=slots,
            shell=spec.shell,
            workdir=spec.workdir,
            preempt_grace=spec.preempt_grace,
            checkpoint_dir=checkpoint,
            restart_count=job.restarts,
            batch_size=job.batch_size,
            micro_batch_limit=job.micro_batch_limit,
            token=token,
            attempt=job.attempt,
            run_as=account.name if account is not None else None,
            # the precision the memory estimate was made for; fp32, the spec's default
            # (a stored spec holds it whether or not the user named it), is danlu.train's
            precision=None if spec.training.precision == "fp32" else spec.training.precision,
            gpu_context_bytes=planned_context_bytes(cluster, slots),
        )


def planned_context_bytes(cluster: Cluster, slots: Sequence[GpuSlot]) -> int | None:
    """The CUDA context, in bytes, that the memory estimate allows for on the GPUs of the
    memory-capped ``slots`` (``DANLU_GPU_CONTEXT_BYTES``, :attr:`JobLaunch.gpu_context_bytes`):
    their node's GPU type of ``cluster`` as the estimate plans it
    (``danlu.server.routes.estimation``: :func:`~danlu.estimate.memory.gpus.gpu_for_memory` of
    the type's name and memory, a type the GPU table lacks with the figure of a GPU of unknown
    capability), which is not always the type the device's name reads as (a Slurm node's
    ``DANLU_SLURM_GPU_TYPE``, a Ray node's accelerator type); the largest over several
    nodes. None without a capped slot (no ``DANLU_GPU_MEMORY_LIMIT``), or on a type the table
    lacks of unknown memory (no estimate plans it)."""
    from danlu.estimate.memory.gpus import gpu_for_memory

    figures: list[int] = []
    for node in sorted({slot.node for slot in slots if slot.memory is not None}):
        kind = cluster.nodes[node].gpu_type
        try:
            figures.append(gpu_for_memory(kind.name, kind.memory).context_bytes)
        except DanluError:  # a type the table lacks, of unknown memory
            continue
    return max(figures, default=None)
