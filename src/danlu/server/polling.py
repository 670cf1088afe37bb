"""The reconcile loop's poll step (:class:`PollStep`, a part of
:class:`~danlu.server.reconcile.Reconciler`): every run that holds GPUs is polled, its exit
settled, the stop its job's row asks for delivered, and the launch of a running run the store
lacks recorded. The executor is asked with no transaction open; each job is written back in
its own, while this loop holds the job's row lock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError

from danlu.core.errors import DanluError
from danlu.core.state import JobState
from danlu.executors import (
    ExecStatus,
    ExecutorError,
    Handle,
    Outcome,
    StopReason,
    UnknownHandleError,
)
from danlu.server.db import Job
from danlu.server.failures import judge_unasked_exit_75
from danlu.server.health import HealthLoop
from danlu.server.launching import LaunchStep
from danlu.server.metrics import ServerMetrics
from danlu.server.run_exits import (
    VANISHED,
    RunGpus,
    StopKind,
    describe_exit,
    executor_note,
    memory_note,
    ran_until,
    run_gpus,
    stop_of,
    unasked_75,
)
from danlu.server.services import jobs, nodes
from danlu.server.services.common import resolve_now
from danlu.server.services.projects import HOLDING
from danlu.server.services.view import lost_gpus

if TYPE_CHECKING:
    from danlu.server.reconcile import RoundReport

FAILURES = frozenset({Outcome.FAILED, Outcome.OOM, Outcome.CANNOT_FIT})
"""The outcomes of a run that failed by the job's doing: a restart counted (or, for
:attr:`~danlu.executors.Outcome.CANNOT_FIT`, the job FAILED at once)."""

UNSTARTED_RUNS_LIMIT = 10
"""The most re-queues of one job for runs its nodes could not launch or start for their own
reasons (:attr:`~danlu.executors.ExecStatus.start_failed_on`), with no restart counted: a run
that could not start and reaches it fails the job, naming its nodes."""


class PollStep(LaunchStep):
    """The poll step of the reconcile loop (a mixin of
    :class:`~danlu.server.reconcile.Reconciler`, which sets these attributes), and the
    settling of a run's exit the launch step uses too."""

    metrics: ServerMetrics | None
    health: HealthLoop | None

    def _poll(
        self, t: float, now: float | None, report: RoundReport, only: list[str] | None = None
    ) -> list[str]:
        """Poll every run that holds GPUs (``only``: of these jobs); settle exits (at
        ``now``, the pass's time, when given: a caller driving its own clock; else when each
        exit is seen); deliver stops; record the launch of a running run the store lacks
        (:meth:`_record_running`, also when a store error ends the poll early: until then
        such a run is charged no energy); start the count of failed launches over on the
        nodes of a run first seen started (:meth:`_note_started`). Returns the ids of jobs
        recorded RUNNING whose current attempt was never launched."""
        query = select(Job).where(Job.state.in_(HOLDING))
        if only is not None:
            query = query.where(Job.id.in_(only))
        with self.db.read_session() as session:
            rows = [
                (
                    j.id,
                    j.attempt,
                    j.state,
                    stop_of(j),
                    j.moved_from,
                    j.launched_attempt,
                    run_gpus(j),
                )
                for j in session.scalars(query.order_by(Job.seq))
            ]
        claimed = self._claim([r[0] for r in rows], t)
        unlaunched: list[str] = []
        unrecorded: list[tuple[str, int]] = []  # running, their launch not recorded
        started: dict[str, RunGpus] = {}  # running, started: by handle key
        try:
            for job_id, attempt, state, stop, moved, launched, run in rows:
                if job_id not in claimed:
                    continue
                cancel = stop is not None
                handle = Handle(job_id, attempt)
                try:
                    status: ExecStatus | None = self.executor.poll(handle)
                except UnknownHandleError:
                    status = None
                except ExecutorError as exc:
                    report.errors.append(f"poll {handle.key}: {exc}")
                    continue
                if status is None:
                    if cancel or state == JobState.PREEMPTING.value:
                        # never launched; a moved job's earlier run may still run on GPUs
                        # the settle records free: it is asked to stop, and the job is
                        # settled (by how that run ended) only once it has exited
                        kill = stop is StopKind.CANCEL
                        if self._stop_previous(job_id, attempt, report, cancel=kill):
                            self._settle_unlaunched(job_id, attempt, moved, now, report)
                    elif launched == attempt:  # it launched: its record vanished
                        if self._gone_with_a_node(run[0], report):
                            continue  # re-queued free by the inventory's refresh
                        self._settle(job_id, attempt, VANISHED, resolve_now(now), report)
                    else:
                        unlaunched.append(job_id)
                elif status.running:
                    if launched is not None and launched != attempt:
                        unrecorded.append((job_id, attempt))
                    if status.started_at is not None:
                        started[handle.key] = run
                    self._deliver(handle, state, stop, status, report)
                else:
                    # a preempting run that failed counts too: its GPUs may be to blame
                    blamed = self._blame(status, run, now) if not cancel else None
                    self._settle(job_id, attempt, status, resolve_now(now), report, blamed)
            self._note_started(started, only is None, report)
        finally:  # a poll that ends early (a store error) records the runs it found too
            try:
                self._record_running(unrecorded, report)  # while the rows are this loop's
            finally:
                self._release(claimed)
        return unlaunched

    def _note_started(self, started: dict[str, RunGpus], whole: bool, report: RoundReport) -> None:
        """Start the count of failed launches in a row over on the nodes of the runs of
        ``started`` (handle key -> its GPUs) this control plane sees started for the first
        time, when the executor learns of a start only at a poll
        (:attr:`~danlu.executors.Executor.start_seen_at_poll`: a Ray actor may fail to start
        on its node after its launch went through, :attr:`ExecStatus.start_failed_on`).
        Only a first sighting counts: a run that started before its node broke, still
        running, does not start the count of the runs failing to start there over at every
        pass. ``whole``: every run was polled, and those not seen running are forgotten. A
        store that fails now leaves the runs to the next poll."""
        if not self.executor.start_seen_at_poll:
            return
        seen = self._seen_started
        new = [key for key in started if key not in seen]
        names = {str(p["node"]) for key in new for p in started[key][0] or ()}
        if names:
            try:
                with self.db.session() as session:
                    nodes.launched(session, names)
            except (DanluError, SQLAlchemyError) as exc:
                report.errors.append(f"poll: cannot record the runs that started: {exc}")
                return
        seen.update(new)
        if whole:
            seen.intersection_update(started)

    @property
    def _seen_started(self) -> set[str]:
        """The runs (handle keys) :meth:`_note_started` has seen started and running."""
        seen: set[str] = self.__dict__.setdefault("_seen_started_runs", set())
        return seen

    def _gone_with_a_node(
        self, allocation: list[dict[str, object]] | None, report: RoundReport
    ) -> bool:
        """Whether a launched run whose record the executor no longer has may have gone with a
        node that left: the executor's nodes, read again now (one backend call, for such a
        run only), lack some of its GPUs (this pass's inventory refresh records that and
        re-queues the job free, as a node's loss, not a failure of the job's), or cannot be
        read (asked again at the next pass)."""
        try:
            cluster = self.executor.refresh_inventory()
        except ExecutorError as exc:
            report.errors.append(f"poll: cannot read the executor's nodes: {exc}")
            return True
        return bool(lost_gpus(allocation, cluster))

    def _settle_unlaunched(
        self, job_id: str, attempt: int, moved: int | None, now: float | None, report: RoundReport
    ) -> None:
        """Settle a stopping job whose run ``attempt`` never launched, no earlier run of it
        running: by the exit of the run a move left (``moved``) when the executor knows it,
        else as never launched (no GPU-hours charged for the run's wait, when the job's row
        tells it never launched: :func:`~danlu.server.services.jobs.not_launched`). Left
        for the next pass when the executor cannot say now."""
        try:
            left = self._left_run(job_id, moved)
        except ExecutorError as exc:
            report.errors.append(f"poll {job_id}#{moved}: {exc}")
            return
        ran = left is not None
        self._settle(job_id, attempt, left, resolve_now(now), report, moved=ran, ran=ran)

    def _deliver(
        self,
        handle: Handle,
        state: str,
        stop: StopKind | None,
        status: ExecStatus,
        report: RoundReport,
    ) -> None:
        """Ask a running run to stop as its job's row says: a cancel, a deadline's or time
        limit's stop (SIGTERM with the job's preemption grace, to checkpoint: the job still
        ends CANCELLED) or a preemption."""
        try:
            if stop is StopKind.LIMIT:
                if status.stop_reason is None:
                    self.executor.preempt(handle, self.preempt_grace)
                    report.stopped.append(handle.job_id)
            elif stop is StopKind.CANCEL and status.stop_reason is not StopReason.CANCEL:
                self.executor.cancel(handle, self.preempt_grace)
                report.stopped.append(handle.job_id)
            elif state == JobState.PREEMPTING.value and status.stop_reason is None:
                self.executor.preempt(handle, self.preempt_grace)
                report.preempted.append(handle.job_id)
        except ExecutorError as exc:
            report.errors.append(f"stop {handle.key}: {exc}")

    def _blame(self, status: ExecStatus, run: RunGpus, now: float | None) -> str | None:
        """The run's GPUs the health check finds faulty, when it failed (None: none)."""
        done = status.node_lost or status.outcome in (Outcome.SUCCEEDED, Outcome.PREEMPTED)
        if self.health is None or done:
            return None
        allocation, since = run
        places = {(str(p["node"]), int(p["gpu"])) for p in allocation or ()}
        return self.health.blame(places, since, now)

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
        """Record the exit of run ``attempt``; ``blamed``: the faulty GPUs it failed on
        (the job resumes then, with no restart counted); ``moved``: ``status`` is the exit
        of the run a move left, judged in place of the new run's (never launched);
        ``ran=False``: the executor knows no run of the job (a stop before its launch): no
        GPU-hours are charged when the job's row tells that run never launched and no run
        a move left ran meanwhile (:func:`~danlu.server.services.jobs.waits_for_launch`:
        its wait for GPUs another run held is none). A run
        that exited 75 on its own (a SIGTERM from outside danlu) resumes as a preempted one
        does, unless the job made no progress since its previous such exit: then it counts
        as a failure (:func:`~danlu.server.failures.judge_unasked_exit_75`). One that failed
        while being preempted counts as a failure too. One that ran out of memory even at
        its smallest micro-batch (:attr:`~danlu.executors.Outcome.CANNOT_FIT`) ends the job
        FAILED at once, no restart spent, its reason naming the memory it had and what to
        ask for (:func:`~danlu.server.run_exits.memory_note`); another out-of-memory exit
        is a failure, its reason naming the memory, which a restart gets again. Its GPUs
        are charged up to its exit
        (:func:`ran_until`). One that could not start on nodes of its own for the nodes'
        reasons (:attr:`ExecStatus.start_failed_on`) is a launch that failed there
        (:meth:`_requeue_unstarted`): no restart counted."""
        if status is not None and status.start_failed_on and not moved:
            self._requeue_unstarted(job_id, attempt, status, t, report)
            return
        succeeded, code, said = describe_exit(status)
        after = ""  # what the reason says after the exit and the memory the run had
        if blamed is not None:
            after = f"; on a GPU the health check finds faulty: {blamed}"
        if moved:
            after = f"{after} (the run it was moved from, while it stopped)"
        lost = "gpu" if blamed is not None else "node" if status and status.node_lost else None
        preempted = status is not None and status.outcome is Outcome.PREEMPTED
        failed = status is not None and status.outcome in FAILURES
        # out of memory even at the smallest micro-batch: a restart with the same memory
        # fails the same way (a run lost with its node or its faulty GPU resumes as ever)
        final = status is not None and status.outcome is Outcome.CANNOT_FIT and lost is None
        try:
            with self.db.session() as session:
                job = self._held(session, job_id, attempt)
                if job is None:
                    return
                note = memory_note(status, job, job.allocation) if lost is None else ""
                reason = f"{said}{note}{after}"
                never = not ran and jobs.waits_for_launch(job)
                until = job.last_start if never else ran_until(status, job.last_start, t)
                if unasked_75(status, job):
                    ran_for = (t if until is None else until) - (job.last_start or t)
                    counted, reason = judge_unasked_exit_75(session, job, ran_for)
                    reason += executor_note(status)  # who sent the SIGTERM: Slurm's TIMEOUT
                    preempted = not counted
                jobs.settle_exit(
                    session,
                    job,
                    succeeded=succeeded,
                    exit_code=code,
                    reason=reason,
                    node_lost=lost is not None,
                    preempted=preempted,
                    failed=failed,
                    now=t,
                    ran_until=until,
                    final=final,
                )
            report.settled.append(job_id)
            if lost is not None and self.metrics is not None and not succeeded:
                self.metrics.runs_lost.labels(lost).inc()
        except DanluError as exc:  # e.g. a concurrent cancel: the next pass settles it
            report.errors.append(f"settle {job_id}: {exc}")

    def _requeue_unstarted(
        self, job_id: str, attempt: int, status: ExecStatus, t: float, report: RoundReport
    ) -> None:
        """Re-queue the job of a run that could not start on nodes of its own for the
        nodes' reasons (:attr:`ExecStatus.start_failed_on`: a Ray actor whose creation
        failed on its live node, danlu not importable there) as a launch that failed there
        (:meth:`_requeue_unlaunched`): no restart counted (the job ran nothing), backoff,
        and each such node counted toward its cordon at ``DANLU_NODE_LAUNCH_FAILURES`` in a
        row, so that the next run goes elsewhere. Such a run that would be the job's
        :data:`UNSTARTED_RUNS_LIMIT`-th re-queue for its nodes' reasons fails it, naming the
        nodes: with every node failing so (and cordons off, ``DANLU_NODE_LAUNCH_FAILURES=0``)
        it would be re-queued for ever. A job whose cancellation was asked is CANCELLED; one
        being preempted is re-queued as preempted."""
        blamed = status.start_failed_on
        most = UNSTARTED_RUNS_LIMIT
        self._requeue_unlaunched(job_id, attempt, status.message, t, report, blamed, most=most)
