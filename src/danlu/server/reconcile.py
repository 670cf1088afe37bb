"""The reconcile loop: make the executor's reality and the store agree, and schedule.

One pass (:meth:`Reconciler.run_once`), under the ``scheduler`` lease:

1. **poll** every RUNNING / PREEMPTING job's run (row locks with this loop's token; process
   I/O outside any transaction): settle exits (:func:`jobs.settle_exit`: SUCCEEDED, PREEMPTED
   -> PENDING to resume from its checkpoint, FAILED / OOM -> RESTARTING -> PENDING with
   backoff or FAILED after ``max_restarts``, CANNOT_FIT (out of memory even at the smallest
   micro-batch) -> FAILED at once, CANCELLED when cancellation was requested before the
   run exited),
   deliver cancellations and preemptions not yet delivered, and collect jobs recorded as
   started but never launched (a crash between the scheduling transaction and the launch;
   a run whose launch the executor took and that it no longer knows is a failure instead:
   :data:`~danlu.server.run_exits.VANISHED`) (:mod:`~danlu.server.polling`);
   then cancel the jobs past their deadline or time limit (:mod:`~danlu.server.upkeep`: a
   run that exited before is settled by then) and stop their runs, with the job's
   preemption grace to checkpoint;
2. **schedule**: release the jobs whose dependencies are met (cancel those whose can never
   be: :mod:`~danlu.server.services.dependencies`), build the snapshot, ask the configured
   policy (the same ``danlu.sched`` code as the simulator) for a plan and record it with
   :func:`record.apply_plan` in ONE transaction, then, outside it, SIGTERM the preempted jobs
   (grace period, then SIGKILL);
3. **launch** the started jobs and the never-launched ones (:mod:`~danlu.server.launching`):
   each run is ``(job id, attempt)`` and the executor refuses a second run of a job id
   while one runs, so nothing runs twice.

Every state change goes through the services, which record an event with the reason. A pass
may stop at any point (kill -9): the next one, in this process or a new one, picks up from what
the store and the executor's files say. On start, :meth:`Reconciler.adopt` re-attaches to the
executor's runs and stops runs the store no longer wants (orphans), and the jobs recorded on
GPUs the executor's inventory no longer has are re-queued. Every ``DANLU_INVENTORY_REFRESH``
seconds a pass first reads the executor's nodes again (:mod:`danlu.server.inventory`); when
nodes left, their jobs are re-queued the same way.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from danlu.config import Settings
from danlu.core.errors import ConfigError, DanluError, PlacementError, UnknownNameError
from danlu.executors import (
    Executor,
    ExecutorError,
    Handle,
    UnknownHandleError,
)
from danlu.sched import default_registry
from danlu.sched.policies.base import Policy
from danlu.sched.policies.fifo import FifoPolicy
from danlu.sched.project_usage import usage_half_life
from danlu.sched.view import ClusterView, Plan
from danlu.server import upkeep
from danlu.server.db import Database, Job, Lease
from danlu.server.failures import RepeatedFailure
from danlu.server.health import HealthLoop
from danlu.server.inventory import InventoryRefresh
from danlu.server.loops import ClockSteps, PassErrors, PeriodicLoop, steady_clock
from danlu.server.metrics import ServerMetrics
from danlu.server.plane_lease import (
    LEASE,
    LeaseWatch,
    foreign_runs,
    owner_id,
    plane_home,
    read_holder,
    record_home,
    release_scheduler_lease,
    scheduler_lease_ttl,
    take_lease,
)
from danlu.server.polling import PollStep
from danlu.server.purge import Purger
from danlu.server.services import jobs, locks, nodes, webhooks
from danlu.server.services.common import resolve_now
from danlu.server.services.projects import HOLDING
from danlu.server.services.record import apply_plan
from danlu.server.services.usage import RecentUsageCache
from danlu.server.services.view import StatusCache, build_snapshot, lost_gpus

log = logging.getLogger(__name__)


@dataclass
class RoundReport(upkeep.Upkeep):
    """What one pass did (for tests and logs), the queue rules' part included."""

    leader: bool = False
    settled: list[str] = field(default_factory=list)
    started: list[str] = field(default_factory=list)
    launched: list[str] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    cordoned: list[str] = field(default_factory=list)
    """Nodes cordoned because launches kept failing there for the node's reasons."""
    inventory: list[str] = field(default_factory=list)
    """How the executor's nodes changed: ``+name`` joined, ``-name`` left, ``~name`` changed."""
    purged: list[str] = field(default_factory=list)
    """Finished jobs whose metrics, logs and checkpoints the retention deleted."""


class _LeaseLost(DanluError):
    """Another plane holds the ``scheduler`` lease this loop's pass began with (its holder
    described as the message)."""


LOGGED_WHERE_MET = ("policy ", "schedule: ")
"""The errors of a pass that are logged where they are met (a policy's failure in full with
:class:`RepeatedFailure`, a plan not recorded), not again with the others."""


COLLECTOR_THRESHOLDS = (10_000, 10, 10)
"""``gc.set_threshold`` of the control-plane process (Python's default: 700, 10, 10). The
process keeps a large long-lived heap: the status cache, the policy's memo and the ORM's
loaded rows. A full pass over it was considered every ~70,000 net allocations, and the
ORM work of submissions and exits triggered one about every round at 1,000 nodes. With a
young generation of 10,000, that is every ~1,000,000. ``python benchmarks/server_round.py``
printed 148.7 ms of collector time per round cycle with ``--default-gc`` and 57.7 ms
with these."""


def tune_collector() -> None:
    """Set :data:`COLLECTOR_THRESHOLDS` (process-wide: for the server's own process, not for
    a library caller)."""
    gc.set_threshold(*COLLECTOR_THRESHOLDS)


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for the block, back on (if it was) after.

    The scheduling round runs in one transaction, which on SQLite holds the database's write
    lock. A full collection that lands in it scans the whole heap (the status cache, the
    policy's memo, the loaded rows: 120-200 ms at 1,000 nodes and 12,000 jobs) while every
    API write waits. With the collector paused, that collection runs at the first
    allocation after the commit instead. The same work is done, but outside the
    transaction. Reference counting still frees everything that is not in a cycle meanwhile.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def build_policy(settings: Settings) -> Policy:
    """The scheduling policy the settings name (``DANLU_POLICY``), built with their options
    (``DANLU_POLICY_OPTIONS`` or ``--policy-option``). An unknown policy, an unknown option,
    or a value of the wrong type or out of its range, is a :class:`ConfigError` naming the
    setting, the option and what it accepts."""
    try:
        return default_registry().create(settings.policy, **settings.policy_knobs)
    except UnknownNameError as exc:
        raise ConfigError(f"DANLU_POLICY (--policy): {exc}") from None
    except ConfigError as exc:
        raise ConfigError(f"DANLU_POLICY_OPTIONS (--policy-option): {exc}") from None


class Reconciler(PollStep):
    """The reconcile loop of one server (a background thread, or :meth:`run_once` by hand)."""

    def __init__(
        self,
        db: Database,
        executor: Executor,
        settings: Settings,
        *,
        metrics: ServerMetrics | None = None,
        policy: Policy | None = None,
        preempt_grace: float | None = None,
        lease_ttl: float | None = None,
        health: HealthLoop | None = None,
        monotonic: Callable[[], float] | None = None,
    ) -> None:
        self.db = db
        self.executor = executor
        self.settings = settings
        self.metrics = metrics
        self.policy = policy if policy is not None else build_policy(settings)
        self.fallback: Policy = FifoPolicy() if self.policy.name != "fifo" else self.policy
        """The policy a round runs when :attr:`policy` raises (see :meth:`_plan`)."""
        self._policy_failures = RepeatedFailure(
            log,
            f"policy {self.policy.name!r} (rounds run fifo meanwhile)",
            f"policy {self.policy.name!r} works again",
        )
        self.statuses = StatusCache()
        """Job statuses reused across rounds while their job is unchanged (policy memos hit)."""
        half_life = usage_half_life(self.policy)
        self.recent = RecentUsageCache(half_life) if half_life > 0 else None
        """Projects' recent usage, for a policy that reads it (fair-share's ``half_life``)."""
        self.health = health
        """The GPU health loop a failed run is checked against (:meth:`HealthLoop.blame`):
        a run that failed on a GPU found faulty resumes with no restart counted."""
        self.preempt_grace = settings.preempt_grace if preempt_grace is None else preempt_grace
        """The grace of a preemption, a move or a drain for a job whose spec asks for none
        (``DANLU_PREEMPT_GRACE``); the executor gives a job that asked for one its own."""
        self.interval = settings.interval
        self.ttl = lease_ttl if lease_ttl is not None else scheduler_lease_ttl(settings)
        self.token = secrets.token_hex(16)
        self.owner = owner_id()
        self.home = plane_home(settings)
        """How the lease names this plane (:func:`~danlu.server.plane_lease.plane_home`)."""
        self.home_dir = Path(settings.home).resolve()
        self._leading = False
        """This loop held the lease at its last pass (or was handed it at start-up)."""
        self._refused: str | None = None
        """Why this loop last declined the lease it took (:func:`foreign_runs`), logged once."""
        self.checkpoints = Path(settings.home) / "checkpoints"
        self._adopted = False
        self.purger = Purger(db, executor, self.checkpoints, settings.retention_days)
        """The retention's pass (``DANLU_RETENTION_DAYS``), at the end of a pass."""
        self._swept = False
        """Every job recorded on GPUs the inventory lacks has been re-queued (a job another
        loop still had locked is tried again the next pass)."""
        self.inventory = InventoryRefresh(db, executor, settings.inventory_refresh, metrics)
        """Reads the executor's nodes again every ``DANLU_INVENTORY_REFRESH`` seconds."""
        self.pass_errors = PassErrors(log, "reconcile")
        """Logs the errors of the passes, a recurring one at most once an hour."""
        self.monotonic = monotonic
        """The steady clock a pass reads beside the wall clock to find the wall clock's
        steps (:class:`~danlu.server.loops.ClockSteps`); None:
        :func:`~danlu.server.loops.steady_clock` for a pass on the wall clock, none for one
        given its ``now`` (a test's own time)."""
        self.clock_steps = ClockSteps()
        self.lease_watch = LeaseWatch(self.ttl)
        """Watches the lease another plane holds (on :attr:`monotonic`, else
        :func:`~danlu.server.loops.steady_clock`, or a test's ``now``): one no one renews is
        taken over."""
        self._lock = threading.Lock()
        self._loop = PeriodicLoop(
            "danlu-reconcile",
            self.interval,
            lambda: self.run_once(),  # looked up at every pass (tests replace it)
            log,
            "reconcile pass",
            "reconcile passes work again",
        )

    # -- the background thread ----------------------------------------------------------------

    def start(self) -> None:
        """Run passes every ``settings.interval`` seconds in a daemon thread."""
        self._loop.start()

    def wake(self) -> None:
        """Run the next pass now (e.g. after a submission)."""
        self._loop.wake()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the thread (after the current pass) and give the lease back. A pass still
        running after ``timeout`` seconds keeps it (it expires ``ttl`` seconds after its
        last renewal): another plane taking it then would schedule beside that pass."""
        ended = self._loop.stop(timeout)
        if not ended or not self._lock.acquire(timeout=timeout):
            log.warning(
                "reconcile: a pass still runs %.0f s after the stop; the scheduler lease is "
                "left to expire instead of given back",
                timeout,
            )
            return
        try:
            self.release_lease()
        finally:
            self._lock.release()

    def hold_lease(self, token: str) -> None:
        """Make the ``scheduler`` lease the plane took at start-up
        (:func:`~danlu.server.plane_lease.take_scheduler_lease`) this loop's, before its
        first pass: its passes renew it."""
        self.token = token
        self._leading = True

    def release_lease(self) -> None:
        """Give the ``scheduler`` lease back if this loop holds it (its home stays recorded).
        The loop no longer leads: a pass after a start again that finds another plane
        holding it waits, as one that never led does (it logged that it had lost the lease
        to a plane that took it over, asking to stop one of two planes, when this one had
        given it back)."""
        self._leading = False
        try:
            release_scheduler_lease(self.db, self.token)
        except Exception as exc:  # shutting down: the lease expires anyway
            log.warning("reconcile: cannot release the lease: %s", exc)

    # -- one pass -------------------------------------------------------------------------------

    def run_once(self, now: float | None = None) -> RoundReport:
        """One pass: poll and settle, schedule, launch. Safe to call at any time, repeatedly,
        from several processes (only the lease holder acts)."""
        with self._lock:
            report = RoundReport()
            try:
                return self._pass(now, report)
            finally:  # the errors met before one that ends the pass (the loop logs that)
                self._report_errors(report.errors)

    def _pass(self, now: float | None, report: RoundReport) -> RoundReport:
        """The body of :meth:`run_once` (under its lock), filling ``report`` as it goes:
        the errors a step met are in it when a later step raises (a database error ends
        the pass), and :meth:`run_once` reports them then too."""
        t0 = time.perf_counter()
        t = resolve_now(now)
        steady_now = self.monotonic or (steady_clock if now is None else None)
        if not self._lease(t, steady_now() if steady_now is not None else t):
            self.clock_steps.forget()  # the leader measures: its shifts are its own
            return report
        report.leader = True
        self._shift_clocks(now, t)
        if not self._adopted:
            self.adopt()
            upkeep.warn_times_ahead(self.db, t)
            self._adopted = True
        if (change := self.inventory.run(t)) is not None:
            report.inventory += change.describe()
            self._swept = False  # the jobs on nodes that left are re-queued below
        if not self._swept:
            self._swept = self._requeue_lost(t, report)
        upkeep.close_nodes(self.db, t, report)
        # exits first: a run that ended within its time limit or deadline succeeded
        to_launch = self._poll(t, now, report)
        if not self._still_leading(t):  # the poll outlived the lease: the taker acts now
            return report
        upkeep.expire(self.db, t, report)
        if due := [*report.expired, *report.timed_out]:  # their stop, now
            self._poll(t, now, report, only=due)
        upkeep.judge_dependencies(self.db, t, report)  # what ended just now counts
        upkeep.advance_sweeps(self.db, t, report)
        started = self._schedule(resolve_now(now), report)
        if started is None:  # another plane took the lease over: it launches what it started
            return report
        pending = [*started, *(j for j in to_launch if j not in started)]
        self._launch(pending, resolve_now(now), report)
        self.purger.run(resolve_now(now), report.purged, report.errors)
        if self.metrics is not None:
            self.metrics.reconcile_seconds.observe(time.perf_counter() - t0)
        return report

    def _shift_clocks(self, now: float | None, t: float) -> None:
        """When the wall clock stepped since the last pass (an NTP step, ``date -s``), move
        the holding jobs' run starts and the queued jobs' backoff with it
        (:func:`~danlu.server.services.job_reasons.shift_clocks`), and the webhook
        deliveries' next attempts (:func:`~danlu.server.services.webhooks.shift_retries`):
        a jump forward ended no run past its ``time_limit`` early, nor charged GPU-hours for
        time nothing ran; one back does not give a run the jump's length of time more, nor
        hold a backoff or a retry back that long. Read with a steady
        clock (:attr:`monotonic`), so a step while no pass ran (the plane down) is not seen."""
        clock = self.monotonic or (steady_clock if now is None else None)
        if clock is None:
            return
        mono = clock()
        step = self.clock_steps.step(t, mono)
        last_wall = self.clock_steps.last_wall
        if step and last_wall is not None:
            with self.db.session() as session:
                moved = jobs.shift_clocks(session, step, last_wall)
                retries = webhooks.shift_retries(session, step, last_wall)
            self.statuses = StatusCache()  # the policy's view of the runs' starts
            log.warning(
                "reconcile: the wall clock jumped %+.1f s since the last pass; %d job "
                "run starts and backoffs and %d webhook retries moved with it (a jump "
                "counts as no run time)",
                step,
                moved,
                retries,
            )
        self.clock_steps.mark(t, mono)

    def _report_errors(self, errors: list[str]) -> None:
        """Log the errors the pass went on from (:attr:`pass_errors`) and count them."""
        self.pass_errors.note(e for e in errors if not e.startswith(LOGGED_WHERE_MET))
        if self.metrics is not None:
            for error in errors:
                self.metrics.count_reconcile_error(error)

    def _lease(self, t: float, steady: float) -> bool:
        """Renew or take the ``scheduler`` lease (at ``t``, the wall clock, and ``steady``,
        the clock of :attr:`lease_watch`); whether this loop may act this pass. Another
        plane's lease is taken over only once :attr:`lease_watch` finds its holder dead (no
        one renewed it for its TTL, its expiry past, or for
        :attr:`~danlu.server.plane_lease.LeaseWatch.patience` seconds, whatever its expiry:
        :func:`~danlu.server.plane_lease.take_lease`), not on this host's clock alone. A
        loop that loses the lease (it hung past the TTL and another plane took it) says so
        and stops acting; one that takes it where another home's runs may be alive
        (:func:`foreign_runs`) gives it back and says why."""
        with self.db.session() as session:
            took = take_lease(
                session, self.token, self.owner, self.ttl, t, self.lease_watch, steady
            )
            if took is locks.LeaseTake.HELD:
                if self._leading:
                    self._lost_lease(read_holder(session).describe())
                self._leading = False
                return False
            if took is locks.LeaseTake.TAKEN:
                try:
                    refusal = foreign_runs(session, self.home, self.home_dir)
                    if refusal is None:
                        record_home(session, self.token, self.home)
                except BaseException:  # unchecked: given back, so the next take checks it
                    session.rollback()
                    with contextlib.suppress(Exception):
                        locks.release_if_token(session, Lease, [LEASE], self.token)
                    self._leading = False
                    raise
                if refusal is not None:
                    locks.release_if_token(session, Lease, [LEASE], self.token)
                    if refusal != self._refused:
                        log.error("reconcile: not scheduling: %s", refusal)
                    self._refused = refusal
                    self._leading = False
                    return False
                self._adopted = False  # another plane may have held it: re-attach
            self._refused = None
            self._leading = True
            return True

    def adopt(self) -> list[Handle]:
        """Re-attach to the executor's runs; stop those the store no longer wants. A run of
        a job that finished or holds no GPUs (or of an attempt the store has not recorded)
        is cancelled. A run of an earlier attempt of a job that still holds GPUs (a moved
        job's old run, which may be checkpointing within its preemption grace) is left to
        stop as it was asked to, or preempted with that grace if it has not been asked yet.
        Returns the runs that are current."""
        handles = self.executor.adopt()
        ids = [h.job_id for h in handles]
        with self.db.read_session() as session:
            rows = (
                {
                    j.id: (j.state, j.attempt)
                    for j in session.scalars(select(Job).where(Job.id.in_(ids)))
                }
                if ids
                else {}
            )
        current = []
        for handle in handles:
            state, attempt = rows.get(handle.job_id, (None, None))
            holding = state in HOLDING
            if holding and attempt == handle.attempt:
                current.append(handle)
                continue
            earlier = holding and attempt is not None and handle.attempt < attempt
            try:
                status = self.executor.poll(handle)
                if not status.running:
                    continue
                if not earlier:
                    log.warning("reconcile: stopping orphan run %s (job is %s)", handle.key, state)
                    self.executor.cancel(handle)
                elif status.stop_reason is None:
                    log.warning("reconcile: preempting earlier run %s (job moved on)", handle.key)
                    self.executor.preempt(handle, self.preempt_grace)
            except ExecutorError as exc:
                log.warning("reconcile: cannot check run %s: %s", handle.key, exc)
        return current

    def _requeue_lost(self, t: float, report: RoundReport) -> bool:
        """Re-queue the jobs recorded on GPUs the executor's inventory no longer has (a node
        left while the control plane was down), before anything polls them: a run on a node
        that is gone cannot be polled, so its job would otherwise wait on it for good. Its
        run, if the executor still knows it, is cancelled; the job resumes from its last
        checkpoint (a preempting one too; a cancelled one ends), and the run is counted in
        ``danlu_runs_lost_total{cause="node"}`` (unless the job was being cancelled). True
        when none is left (none was locked by another loop, nor its lock taken over while
        its run was cancelled: the job is written back only while this loop holds it)."""
        inventory = self.executor.inventory()
        with self.db.read_session() as session:
            query = select(Job.id, Job.attempt, Job.allocation).where(Job.state.in_(HOLDING))
            lost = {
                job_id: (attempt, gone)
                for job_id, attempt, allocation in session.execute(query)
                if (gone := lost_gpus(allocation, inventory))
            }
        claimed = self._claim(sorted(lost), t)
        kept = 0  # claimed rows whose lock was lost during the cancel: tried again
        try:
            for job_id in sorted(claimed):
                attempt, gone = lost[job_id]
                with contextlib.suppress(ExecutorError):  # gone with its node, most likely
                    self.executor.cancel(Handle(job_id, attempt))
                with self.db.session() as session:
                    # the cancel is I/O (scancel, a Ray call) that may outlast the row's
                    # lock: the write-back only while this loop's token still holds it
                    if not locks.holds(session, Job, job_id, self.token):
                        kept += 1
                        continue
                    job = session.scalar(select(Job).where(Job.id == job_id))
                    if job is None or job.attempt != attempt or job.state not in HOLDING:
                        continue
                    cancelling = job.cancel_requested_at is not None
                    jobs.requeue_lost(session, job, gone, t)
                report.settled.append(job_id)
                if self.metrics is not None and not cancelling:  # its run was lost, not ended
                    self.metrics.runs_lost.labels("node").inc()
        finally:
            self._release(claimed)
        return not kept and len(claimed) == len(lost)

    def _record_plan(
        self, t: float, report: RoundReport, *, fallback: bool
    ) -> tuple[list[str], list[tuple[str, int]], list[tuple[str, int]]]:
        """Snapshot, plan (of :attr:`fallback` when ``fallback``) and its record in one
        transaction: the ids started, and the (id, attempt) moved and preempted. The same
        transaction renews the ``scheduler`` lease first (:meth:`_renew_in`): a pass that
        ran past the lease's TTL while another plane took it over raises
        :class:`_LeaseLost` and records nothing."""
        with collector_paused(), self.db.session() as session:
            self._renew_in(session, t)
            recent = self.recent.read(session, t) if self.recent is not None else None
            snapshot = build_snapshot(session, t, self.statuses, recent)
            if fallback:
                plan, own = self.fallback.schedule(snapshot.view), False
            else:
                plan, own = self._plan(snapshot.view, report)
            plan = nodes.with_drains(plan, snapshot.drains)
            applied = apply_plan(session, plan, t, snapshot.withheld, snapshot)
            recorded = (
                [j.id for j in applied.started],
                [(j.id, j.attempt) for j in applied.resized],
                [(j.id, j.attempt) for j in applied.preempted],
            )
        if own:  # once the plan is committed
            self._policy_failures.worked()
        return recorded

    def _renew_in(self, session: Session, t: float) -> None:
        """Push the ``scheduler`` lease's expiry in ``session``'s transaction if this loop's
        token still holds it, else raise :class:`_LeaseLost` naming the holder. The UPDATE
        locks the lease's row until the transaction ends (PostgreSQL; SQLite has one writer
        at a time): a plane taking the lease over waits for the plan to be recorded, or the
        plan is not recorded. The lease was renewed only as a pass began, and a pass that
        outlived it recorded its plan beside the plane that had taken it over."""
        values = {"lock_expires_at": t + self.ttl}
        if not locks.update_if_token(session, Lease, LEASE, self.token, values):
            raise _LeaseLost(read_holder(session).describe())

    def _still_leading(self, t: float) -> bool:
        """Whether this loop's token still holds the ``scheduler`` lease (pushing its expiry
        as at ``t``); when not (the pass outlived the lease: a poll's executor calls hung, and
        another plane took it over) it says so and the pass ends, before its rules cancel,
        release or submit jobs beside the plane that took it over."""
        with self.db.session() as session:
            if LEASE in locks.extend(session, Lease, [LEASE], self.token, self.ttl, t):
                return True
            self._lost_lease(read_holder(session).describe())
            return False

    def _lost_lease(self, holder: str) -> None:
        """This loop's lease was taken over by ``holder``: say so; it stops acting."""
        log.error(
            "reconcile: lost the scheduler lease to %s: another control plane took it over "
            "(this one did not renew it within %.0f s: a pass ran longer, or the process "
            "hung); this plane stops scheduling while the other holds it. Two control planes "
            "on one database run jobs twice: stop one of them",
            holder,
            self.ttl,
        )
        self._leading = False

    def _plan(self, view: ClusterView, report: RoundReport) -> tuple[Plan, bool]:
        """The policy's plan for ``view``. When the policy raises (a bug, a state it cannot
        handle) or its plan does not fit the cluster, the round runs :attr:`fallback`
        instead, so that one bad policy does not stop every job of the cluster from
        starting; logged in full the first time, then once a minute while it repeats (and
        counted in ``danlu_policy_failures_total``). With it, whether the plan is the
        policy's own."""
        try:
            return self.policy.schedule(view), True
        except Exception as exc:
            if self.policy is self.fallback:
                raise
            self._policy_failed(exc, report)
            return self.fallback.schedule(view), False

    def _policy_failed(self, exc: BaseException, report: RoundReport) -> None:
        what = self._policy_failures.failed(exc)
        report.errors.append(f"policy {self.policy.name}: {what}; this round ran fifo")
        if self.metrics is not None:
            self.metrics.policy_failures.inc()

    def _schedule(self, t: float, report: RoundReport) -> list[str] | None:
        """Snapshot, policy, plan recorded in one transaction; then SIGTERM the preempted.
        None when the lease was lost meanwhile (nothing recorded: the pass ends)."""
        t0 = time.perf_counter()
        try:
            try:
                started, resized, preempted = self._record_plan(t, report, fallback=False)
            except PlacementError as exc:  # the policy's plan does not fit the cluster
                if self.policy is self.fallback:
                    raise
                self._policy_failed(exc, report)
                started, resized, preempted = self._record_plan(t, report, fallback=True)
        except _LeaseLost as exc:
            self._lost_lease(str(exc))
            return None
        except (PlacementError, DanluError) as exc:
            report.errors.append(f"schedule: {exc}")
            log.warning("reconcile: plan not recorded: %s", exc)
            return []
        finally:
            if self.metrics is not None:
                self.metrics.round_seconds.observe(time.perf_counter() - t0)
        report.started.extend(started)
        for job_id, attempt in preempted:
            try:
                self.executor.preempt(Handle(job_id, attempt), self.preempt_grace)
                report.preempted.append(job_id)
            except UnknownHandleError:
                pass  # never launched: the next poll re-queues it
            except ExecutorError as exc:
                report.errors.append(f"preempt {job_id}: {exc}")
        for job_id, attempt in resized:
            # a move restarts the job: its old run checkpoints (the preemption grace, not a
            # cancel's short one) and the new one launches once it has exited; an ask that
            # fails here is made again when the new run's launch finds the old one running
            with contextlib.suppress(ExecutorError):  # the old run may be gone already
                self.executor.preempt(Handle(job_id, attempt - 1), self.preempt_grace)
        return started + [job_id for job_id, _ in resized]
