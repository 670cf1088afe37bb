"""The discrete-event simulator: a virtual clock driving the real ``danlu.sched`` policies.

Time advances from event to event. Job arrivals and completions happen at their exact times;
the policy is asked for a plan at scheduling instants on the ``interval`` grid (t = interval,
2 x interval, ...), the protocol of the Pollux artifact. With ``event_rounds`` the policy is
also asked at every arrival and completion. Instants at which nothing can change are skipped:
with no stepwise job running, no round is due while the queue is empty, nor, for a policy
that does not depend on the clock, while nothing arrived or finished and the last round
changed nothing (a round that starts, stops or moves jobs is followed by one at the next
tick, which may act on it: the results are those of a round at every tick).

With ``failures`` nodes, with ``gpu_failures`` single GPUs, fail and come back
(:mod:`danlu.sim.failures`): a failure is an instant of its own (its jobs are re-queued at
once; the policy is asked at the next instant of the grid, or at once with
``event_rounds``, as for a repair), and the nodes and GPUs out of service are the view's
``closed_nodes`` and ``closed_gpus``.

The end of a run: once nothing runs, no job is left to arrive and the policy starts
nothing (at once when its plan cannot change with time, else after
``SimConfig.idle_retries`` idle rounds), the engine is stuck. It then fails only the
pending jobs that could not be placed even on the idle cluster, or, when every one would
fit (the policy holds them back), those that hold the others up, which it finds by asking
the policy what it would start with only some of them pending (plans never carried out),
and goes on: the jobs a strict queue held behind them run. Every pending job fails at once
only when the policy would start none of them even alone (:mod:`danlu.sim.stuck`). Each
stuck point fails at least one job, so the run ends.

The engine is a thin adapter: it keeps per-job state, builds the frozen
:class:`~danlu.sched.view.ClusterView`, calls ``policy.schedule`` and applies the plan,
checking that no GPU is ever over-allocated.

Elastic policies: a start's, resize's or rebatch's ``batch_size`` goes to the job's
progress model (a rebatch keeps the job's GPUs and costs no restart; ``adaptive`` lets a
job re-pick its batch in-process between rounds), and every job's
:attr:`~danlu.sched.view.JobStatus.observed` holds what its progress model reports
(limits, and measurements at the current placement and batch while it runs). The
engine keeps no history of observations: a policy that learns from them keeps what it
needs in its marks (as ``danlu`` does), exactly as it would against the server.
"""

from __future__ import annotations

import bisect
import heapq
import math
import operator
from collections.abc import Callable, Iterator, Mapping, Sequence

import numpy as np

from danlu.core.cluster import MILLI_PER_GPU, Allocation, Cluster
from danlu.core.errors import ConfigError, PlacementError
from danlu.core.state import Event, JobState, transition
from danlu.core.units import format_duration
from danlu.sched.policies.base import Policy
from danlu.sched.project_usage import (
    DecayingUsage,
    ProjectShare,
    add_stretch,
    shares_with_usage,
    usage_half_life,
)
from danlu.sched.quota import QuotaPolicy
from danlu.sched.view import ClusterView, JobStatus, Plan
from danlu.sim.admission import admit
from danlu.sim.clock import tick_after as _tick_after  # (also its old import path)
from danlu.sim.config import SimConfig
from danlu.sim.elastic import ApplicationProfile, OutOfProfileError
from danlu.sim.failures import FAIL, MOST_FRUITLESS_FAILURES, NODE, OutageEvent, Outages, StallWatch
from danlu.sim.metrics import PENDING, RUNNING, SimResult, Timeline
from danlu.sim.sharing import MIN_RATE as MIN_RATE  # (also danlu.sim.engine.MIN_RATE)
from danlu.sim.sharing import GpuSharers
from danlu.sim.sim_inputs import check_named_models, check_simulator_inputs
from danlu.sim.simjob import SimJob, job_record, rejected_records
from danlu.sim.stuck import StuckRule
from danlu.sim.workload_jobs import Workload, WorkloadJob

_BY_SEQ = operator.attrgetter("request.seq")
_SEQ = operator.attrgetter("seq")
ProgressCallback = Callable[[float, int, int], None]
"""Called as ``(sim_time, finished_jobs, total_jobs)`` while a simulation runs."""


class Simulator:
    """Replays ``workload`` on ``cluster`` under ``policy``; :meth:`run` returns the result."""

    def __init__(
        self,
        cluster: Cluster,
        policy: Policy,
        workload: Workload,
        config: SimConfig | None = None,
        profiles: Mapping[str, ApplicationProfile] | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> None:
        """:class:`ConfigError` naming the argument when one is of the wrong type or value
        (:func:`~danlu.sim.sim_inputs.check_simulator_inputs`)."""
        check_simulator_inputs(cluster, policy, workload, config, profiles, on_progress)
        self.cluster = cluster
        self.config = config or SimConfig()
        if self.config.quotas:  # the server's quota rules, around any policy
            policy = QuotaPolicy(policy, self.config.quotas)
        self.policy = policy
        self.workload = workload
        self.profiles = profiles or {}
        self.on_progress = on_progress
        total = cluster.total_gpus
        self._total_gpus = total
        self._gpu_memory = np.repeat(
            np.array([n.gpu_type.memory for n in cluster.nodes], dtype=np.int64),
            [n.gpus for n in cluster.nodes],
        )
        self._used_milli = np.zeros(total, dtype=np.int64)
        self._used_memory = np.zeros(total, dtype=np.int64)
        self._offsets = [cluster.gpu_offset(i) for i in range(len(cluster.nodes))]
        self._running: dict[str, SimJob] = {}
        self._running_status: dict[str, JobStatus] = {}
        """Statuses of the running jobs, in the order of ``_running``; only stepwise jobs'
        statuses change while they run (their observations), so only those are refreshed."""
        self._pending: dict[str, SimJob] = {}
        self._pending_status: dict[str, JobStatus] = {}
        """Statuses of the pending jobs by id: a pending job's status does not change while it
        waits, so views reuse these objects instead of rebuilding them."""
        self._pending_order: list[JobStatus] = []
        """The same statuses in submission order (ascending ``seq``), as views hand them."""
        self._stepwise: dict[str, SimJob] = {}
        self._finished: list[SimJob] = []
        self._rejected: list[tuple[str, str]] = []
        self._failed: list[SimJob] = []
        """The jobs the engine failed after their submission (also in ``_rejected``)."""
        self._heap: list[tuple[float, int, str, int]] = []
        self._sharers = GpuSharers(self.config.interference, self._offsets)
        """With an interference model: the jobs that share each GPU, and their speeds."""
        self._events: list[Event] = []
        self._timeline = Timeline()
        self._rounds = 0
        self._preemptions = 0
        self._now = 0.0
        self._stopped_at: float | None = None
        """The instant the clock stopped at ``config.max_time`` (None: it did not)."""
        half_life = usage_half_life(policy)
        self._usage = DecayingUsage(half_life) if half_life > 0 else None
        """Projects' past GPU use, for a policy that reads recent usage."""
        self._weights = shares_with_usage(self.config.project_shares, {})
        """The view's projects when the policy reads no usage: the weights alone (fixed)."""
        self._failures: Outages | None = None
        """The nodes' and GPUs' failures (with ``config.failures`` or
        ``config.gpu_failures``), from the first submission."""
        self._stall = StallWatch(self.config.restart_cost)
        self._stuck = StuckRule(cluster)
        """Which pending jobs fail once nothing runs and nothing more can start."""
        self._ran = False
        """Whether :meth:`run` was called: a simulator's state is its one run's."""
        check_named_models(workload, self.config.interference)

    # -- state changes -------------------------------------------------------------------
    def _move(self, job: SimJob, new: JobState, reason: str) -> None:
        event = transition(job, new, reason, self._now)
        if self.config.record_events:
            self._events.append(event)

    def _take(self, alloc: Allocation, sign: int, job_id: str) -> None:
        for share in alloc.shares:
            index = self._offsets[share.node] + share.gpu
            self._used_milli[index] += sign * share.milli
            self._used_memory[index] += sign * share.memory
            if sign > 0 and (
                self._used_milli[index] > MILLI_PER_GPU
                or self._used_memory[index] > self._gpu_memory[index]
            ):
                raise PlacementError(
                    f"plan over-allocates GPU {share.gpu} of node {share.node} "
                    f"when starting {job_id}"
                )

    def _start(
        self, job: SimJob, alloc: Allocation, batch_size: int | None = None, adaptive: bool = False
    ) -> None:
        self._move(job, JobState.RUNNING, "scheduled")
        self._stuck.started()
        del self._pending[job.id]
        self._drop_pending_status(job.id)
        self._occupy(job, alloc, batch_size, adaptive)

    def _occupy(
        self, job: SimJob, alloc: Allocation, batch_size: int | None = None, adaptive: bool = False
    ) -> None:
        """Give ``alloc`` to ``job`` (state already RUNNING) and start its progress at the
        scheduler's ``batch_size`` (``None``: the job's own), adapting it in-process when
        ``adaptive``."""
        if not alloc:
            raise PlacementError(f"policy started {job.id} on an empty allocation")
        self._take(alloc, +1, job.id)
        self._sharers.share(job, alloc, +1)
        now = self._now
        job.allocation = alloc
        job.last_start = now
        if job.first_start is None:
            job.first_start = now
        job.cached = None
        self._running[job.id] = job
        job.progress.start(now, alloc, batch_size, adaptive)
        if job.progress.stepwise:
            self._stepwise[job.id] = job
        else:
            self._schedule_end(job)
        try:
            self._running_status[job.id] = job.status()
        except OutOfProfileError as err:  # the policy's choice, not the workload's fault
            batch = "its own batch" if batch_size is None else f"global batch {batch_size}"
            raise OutOfProfileError(
                f"policy {self.policy.name!r} ran job {job.id!r} on {alloc.num_gpus} GPUs"
                f" ({len(alloc.node_counts())} nodes) at {batch}, which its application's"
                f" profile does not cover ({err}); the policy must give it fewer GPUs or a"
                " batch that leaves each GPU a measured micro-batch"
            ) from err

    def _release(self, job: SimJob, at: float) -> None:
        self._take(job.allocation, -1, job.id)
        self._sharers.share(job, job.allocation, -1)
        assert job.last_start is not None
        held = max(0.0, at - job.last_start)
        if self._usage is not None:
            self._usage.add(job.request.project, job.allocation.gpu_milli, job.last_start, at)
        job.attained += job.run_gpu_seconds(at)
        job.run_time += held
        job.released_at = at
        job.allocation = Allocation()
        job.cached = None
        job.version += 1
        del self._running[job.id]
        del self._running_status[job.id]
        self._stepwise.pop(job.id, None)

    def _preempt(self, job: SimJob, reason: str) -> None:
        if not job.request.preemptible:
            raise PlacementError(f"policy preempted {job.id}, which is not preemptible")
        job.progress.stop(self._now)
        job.preemptions += 1  # before the queued status is built
        self._preemptions += 1
        self._requeue(job, reason, "checkpointed and re-queued")

    def _requeue(self, job: SimJob, stopped: str, queued: str) -> None:
        """``job``'s run ended now (its progress already stopped): it lets its GPUs go and
        waits again, RUNNING -> PREEMPTING (``stopped``) -> PENDING (``queued``)."""
        self._release(job, self._now)
        self._move(job, JobState.PREEMPTING, stopped)
        self._move(job, JobState.PENDING, queued)
        self._pending[job.id] = job
        self._queue_status(job)

    def _fail(self, event: OutageEvent) -> bool:
        """Node (``scope`` NODE) or flat GPU ``unit`` of ``event`` fails now: the jobs on
        it lose their runs (the training since their last checkpoint, every ``every``
        seconds) and are re-queued; whether it had any. :class:`ConfigError` when failures
        leave no job able to progress (:data:`MOST_FRUITLESS_FAILURES`)."""
        scope, unit, every = event.scope, event.unit, event.checkpoint_every
        if scope == NODE:
            lost = [j for j in self._running.values() if unit in j.allocation.nodes]
            where = f"node {self.cluster.nodes[unit].name}"
        else:
            node = int(self.cluster.arrays.gpu_node[unit])
            gpu = unit - self.cluster.gpu_offset(node)
            lost = [
                j
                for j in self._running.values()
                if any(s.node == node and s.gpu == gpu for s in j.allocation.shares)
            ]
            where = f"GPU {gpu} of node {self.cluster.nodes[node].name}"
        advice = (
            "raise the mean time between failures (--node-mtbf, --gpu-mtbf), or lower "
            "--checkpoint-every or --restart-cost"
        )
        for job in lost:
            job.lost_seconds += job.progress.fail(self._now, every)
            job.failures += 1
            if job.progress.fruitless_failures >= MOST_FRUITLESS_FAILURES:
                raise ConfigError(
                    f"job {job.id} lost {MOST_FRUITLESS_FAILURES} runs in a row to failures "
                    f"(the last with {where}), none reaching a checkpoint beyond what it had "
                    f"to redo: nodes or GPUs fail too often for it to progress; {advice}"
                )
            resume = "re-queued to resume from its last checkpoint"
            self._requeue(job, f"lost with {where}", resume)
        arrived = (self._pending.values(), self._running.values(), self._finished)
        if not (self._pending or self._running):
            self._stall.idle()  # no work waits on the failed units: nothing stalls
        elif self._stall.stalled(event, lambda: (j.progress for js in arrived for j in js)):
            raise ConfigError(f"{self._stall.message(event, where)}; {advice}")
        return bool(lost)

    def _schedule_end(self, job: SimJob) -> None:
        """Put a running closed-form job's end on the event heap: its completion, or the
        moment it reaches its time limit if that comes first (see :meth:`_complete`)."""
        end = job.progress.finish_time()
        assert end is not None and job.last_start is not None
        if job.time_limit is not None:
            end = min(end, job.last_start + max(0.0, job.time_limit - job.run_time))
        job.version += 1
        heapq.heappush(self._heap, (end, job.request.seq, job.id, job.version))

    def _complete(self, job: SimJob, at: float) -> None:
        """End ``job`` at ``at``: SUCCEEDED, or CANCELLED when its time limit came before
        its completion (as the control plane cancels it)."""
        saved, self._now = self._now, at
        finish = job.progress.finish_time()
        job.timed_out = finish is not None and job.time_limit is not None and finish > at + 1e-6
        job.progress.stop(at)  # settles the restart time paid in this last run
        self._release(job, at)
        if job.timed_out:
            limit = format_duration(job.time_limit or 0.0)
            reason = f"time limit reached: ran {format_duration(job.run_time)} of {limit}"
            self._move(job, JobState.CANCELLED, reason)
        else:
            self._move(job, JobState.SUCCEEDED, "finished")
        self._now = saved
        job.end_time = at
        self._finished.append(job)

    def _rerate(self, at: float) -> None:
        """Set, from ``at``, the speed of every job on a GPU whose sharers changed
        (:meth:`~danlu.sim.sharing.GpuSharers.rerate`) and move the completions of the
        rigid jobs whose speed changed."""
        for job in self._sharers.rerate(at):
            self._schedule_end(job)

    def _completions(
        self, instant: float, stepwise: list[tuple[float, int, SimJob]]
    ) -> Iterator[tuple[float, SimJob]]:
        """The jobs that complete by ``instant``, in time order (ties by submission): the
        rigid ones from the event heap, merged with ``stepwise`` (sorted). The heap is read
        one completion at a time, so a completion that speeds up the jobs it shared a GPU
        with (:meth:`_rerate`, by the caller) moves their own completions first."""
        i = 0
        heap = self._heap
        while True:
            rigid = bool(heap) and heap[0][0] <= instant
            if i < len(stepwise) and (
                not rigid or (stepwise[i][0], stepwise[i][1]) < (heap[0][0], heap[0][1])
            ):
                finish, _, job = stepwise[i]
                i += 1
                yield finish, job
            elif rigid:
                finish, _, job_id, version = heapq.heappop(heap)
                running = self._running.get(job_id)
                if running is not None and running.version == version:
                    yield finish, running
            else:
                return

    # -- rounds --------------------------------------------------------------------------
    def _apply(self, plan: Plan) -> int:
        """Carry out ``plan``; how many jobs it started or resized."""
        for preempt in plan.preempts:
            job = self._running.get(preempt.job_id)
            if job is None:
                raise PlacementError(f"policy preempted {preempt.job_id}, which is not running")
            self._preempt(job, preempt.reason)
        moved: list[tuple[SimJob, Allocation, int | None, bool]] = []
        for resize in plan.resizes:
            job = self._running.get(resize.job_id)
            if job is None:
                raise PlacementError(f"policy resized {resize.job_id}, which is not running")
            # A resize restarts the job in place on new GPUs: it stays RUNNING throughout.
            # Every resized job lets go first, so one may move onto another's old GPUs.
            job.progress.stop(self._now)
            self._release(job, self._now)
            job.resizes += 1
            moved.append((job, resize.allocation, resize.batch_size, resize.adaptive))
        for job, alloc, batch_size, adaptive in moved:
            self._occupy(job, alloc, batch_size, adaptive)
        if plan.rebatches:
            self._rebatch(plan, {m[0].id for m in moved})
        for start in plan.starts:
            job = self._pending.get(start.job_id)
            if job is None:
                raise PlacementError(f"policy started {start.job_id}, which is not pending")
            self._start(job, start.allocation, start.batch_size, start.adaptive)
        for job_id, marks in plan.marks.items():
            target = self._running.get(job_id) or self._pending.get(job_id)
            if target is not None:
                target.marks.update(marks)
                target.cached = None
                if target.id in self._pending_status:
                    self._set_pending_status(target.status())
                elif target.id in self._running_status:
                    self._running_status[target.id] = target.status()
        return len(plan.starts) + len(plan.resizes)

    def _rebatch(self, plan: Plan, resized: set[str]) -> None:
        """Batch-only changes: the job keeps its GPUs, no restart is charged."""
        for rebatch in plan.rebatches:
            job = self._running.get(rebatch.job_id)
            if job is None:
                raise PlacementError(f"policy rebatched {rebatch.job_id}, which is not running")
            if rebatch.job_id in resized:
                raise PlacementError(f"policy resized and rebatched {rebatch.job_id} at once")
            if rebatch.batch_size <= 0:
                raise PlacementError(
                    f"policy rebatched {rebatch.job_id} to batch size {rebatch.batch_size}"
                )
            job.progress.rebatch(self._now, rebatch.batch_size, rebatch.adaptive)
            job.cached = None
            self._running_status[job.id] = job.status()

    def _queue_status(self, job: SimJob) -> None:
        """``job`` joined the queue: keep its status."""
        self._set_pending_status(job.status())

    def _set_pending_status(self, status: JobStatus) -> None:
        """Add or replace a pending job's status, keeping ``_pending_order`` sorted."""
        order = self._pending_order
        old = self._pending_status.get(status.request.id)
        if old is not None:
            order[bisect.bisect_left(order, old.request.seq, key=_BY_SEQ)] = status
        elif order and status.request.seq < order[-1].request.seq:
            bisect.insort(order, status, key=_BY_SEQ)  # a preempted job rejoins
        else:
            order.append(status)
        self._pending_status[status.request.id] = status

    def _drop_pending_status(self, job_id: str) -> None:
        status = self._pending_status.pop(job_id)
        order = self._pending_order
        del order[bisect.bisect_left(order, status.request.seq, key=_BY_SEQ)]

    def _running_view(self) -> tuple[JobStatus, ...]:
        """Running statuses in ``_running`` order, stepwise jobs' observations refreshed."""
        for job_id, job in self._stepwise.items():
            self._running_status[job_id] = job.status()
        return tuple(self._running_status.values())

    def _pending_view(self) -> tuple[JobStatus, ...]:
        """Pending statuses in submission order (the order ClusterView promises)."""
        return tuple(self._pending_order)

    def _view(self, pending: tuple[JobStatus, ...]) -> ClusterView:
        """What the policy sees now, with ``pending`` (in submission order) waiting."""
        return ClusterView(
            time=self._now,
            cluster=self.cluster,
            running=self._running_view(),
            pending=pending,
            used_milli=self._used_milli.copy(),
            used_memory=self._used_memory.copy(),
            closed_nodes=self._failures.closed_nodes if self._failures else frozenset(),
            closed_gpus=self._failures.closed_gpus if self._failures else frozenset(),
            projects=self._projects(),
        )

    def _round(self) -> tuple[bool, float]:
        """Ask the policy for a plan now and carry it out: whether it changed anything the
        next round sees (a job started, stopped, resized or rebatched), and the plan's
        ``recheck_at``."""
        view = self._view(self._pending_view())
        self._rounds += 1
        plan = self.policy.schedule(view)
        started = self._apply(plan)
        if self._sharers.touched:
            self._rerate(self._now)
        return bool(started or plan.preempts or plan.rebatches), plan.recheck_at

    def _projects(self) -> dict[str, ProjectShare]:
        """The projects' weights and, for a policy that reads it, their recent usage: the
        stretches that ended plus the running ones up to now."""
        if self._usage is None:
            return self._weights
        recent, now, half_life = self._usage.at(self._now), self._now, self._usage.half_life
        for job in self._running.values():
            if job.last_start is not None:
                milli = job.allocation.gpu_milli
                add_stretch(recent, job.request.project, milli, job.last_start, now, now, half_life)
        return shares_with_usage(self.config.project_shares, recent)

    # -- main loop -----------------------------------------------------------------------
    def run(self) -> SimResult:
        """Simulate until every job has finished (or ``max_time``). Once per simulator:
        a second call is a :class:`ConfigError` (it went on from the first run's end
        state, adding to the first result's timeline, which then ran backwards, and
        crashing in the policy's view or returning the first run's jobs again)."""
        if self._ran:
            raise ConfigError(
                "Simulator.run() was already called: a simulator replays its workload once "
                "(its clock, queues and timeline are that run's, shared with its result); "
                "build a new Simulator(...) for another run"
            )
        self._ran = True
        cfg = self.config
        interval = cfg.interval
        sizes_jobs = bool(getattr(self.policy, "sizes_jobs", False))
        admitted = admit(self.workload, self.cluster, cfg, self.profiles, sizes_jobs)
        arrivals = admitted.arrivals
        self._rejected.extend(admitted.rejected)
        unreached = admitted.unreached  # rejected, were they ever submitted
        total = len(arrivals)
        # the timeline starts idle at the first submission the clock reaches
        if arrivals and arrivals[0][0].request.submit_time <= cfg.max_time:
            self._record(arrivals[0][0].request.submit_time)
        if cfg.failures is not None or cfg.gpu_failures is not None:
            # from the workload's first submission, rejected or not: whatever the policy
            # (one that sizes jobs lets in a profiled job wider than the cluster), one seed
            # gives the same failure times
            jobs = self.workload.jobs
            start = jobs[0].request.submit_time if jobs else 0.0
            sizes = len(self.cluster.nodes), self.cluster.total_gpus
            self._failures = Outages(*sizes, cfg.failures, cfg.gpu_failures, start)
        failures = self._failures
        next_arrival = 0
        next_tick = interval
        changed = False
        recheck_at = 0.0  # from the last plan: when the policy's decision may change by itself
        idle_rounds = 0  # rounds in a row that started nothing on an idle, final cluster
        last_report = -math.inf

        while len(self._finished) < total:
            arrival_time = (
                arrivals[next_arrival][0].request.submit_time
                if next_arrival < len(arrivals)
                else math.inf
            )
            completion_time = self._heap[0][0] if self._heap else math.inf
            waiting = bool(self._pending) or bool(self._running)
            # a failure matters to running jobs, a repair to waiting ones (until all are back)
            failure_time = math.inf
            if failures is not None and (self._running or (self._pending and failures.any_down)):
                failure_time = failures.next_time()
            if self._stepwise or changed:
                instant = next_tick
            else:
                upcoming = min(arrival_time, completion_time, recheck_at if waiting else math.inf)
                upcoming = min(upcoming, failure_time)
                if upcoming == math.inf:
                    dropped = self._drop_stuck()
                    if dropped is None:
                        break
                    total -= dropped
                    changed = True
                    continue
                instant = max(next_tick, math.ceil(upcoming / interval) * interval)
            grid_instant = instant
            if cfg.event_rounds:
                soonest = min(arrival_time, completion_time, failure_time)
                if self._now <= soonest < instant:  # <=: arrivals at t = 0 too
                    instant = soonest
            if self._running and self._now <= failure_time < instant:
                instant = failure_time  # a failure ends its jobs' runs at its exact time
            stopping = instant > cfg.max_time
            if stopping:  # the clock stops there: what completes by then still counts
                if cfg.max_time < self._now:
                    break
                instant = cfg.max_time

            # Advance running jobs to the instant; completions are applied in time order and
            # each one is a point of the timeline (GPUs free up between instants too).
            done: list[tuple[float, int, SimJob]] = []
            for job in list(self._stepwise.values()):
                done_at = job.progress.advance(self._now, instant - self._now)
                if done_at is not None:
                    done.append((done_at, job.request.seq, job))
            done.sort(key=lambda d: (d[0], d[1]))
            # jobs submitted before the instant wait for it to be queued: the timeline counts
            # them pending from their submission (index ``arrived`` on are not yet counted)
            arrived = next_arrival
            for finish, job in self._completions(instant, done):
                arrived = self._record_arrivals(arrivals, next_arrival, arrived, finish)
                self._complete(job, finish)
                self._record(finish, False, arrived - next_arrival)
                changed = True
                if self._sharers.touched:
                    self._rerate(finish)
            self._record_arrivals(arrivals, next_arrival, arrived, instant, before=True)
            self._now = instant
            # else an event round's or a failure's instant, which may come after ticks
            # skipped (nothing to do then): the grid goes on from the next tick after it
            on_grid = instant in (grid_instant, next_tick)
            if instant >= next_tick:
                next_tick = _tick_after(instant, interval)
            if failures is not None:
                for event in failures.due(instant):
                    down = event.kind == FAIL
                    if down and self._fail(event):
                        changed = True
                    changed = changed or (not down and bool(self._pending))
                if self._sharers.touched:
                    self._rerate(instant)

            while (
                next_arrival < len(arrivals)
                and arrivals[next_arrival][0].request.submit_time <= instant
            ):
                job = arrivals[next_arrival][1]
                self._pending[job.id] = job
                self._queue_status(job)
                next_arrival += 1
                changed = True

            if stopping:
                if self._timeline.times:  # (none: the clock stopped before any submission)
                    self._record(self._now)
                self._stopped_at = self._now
                break
            active = bool(self._pending) or bool(self._running)
            if not active:
                changed = False  # nothing to schedule: skip ahead to the next arrival
            due = on_grid or cfg.event_rounds  # a failure's jobs wait for the next round
            if active and due and (changed or instant >= recheck_at):
                # A plan's recheck_at is for the clock alone, after the plan: a round that
                # started, stopped or moved jobs is a change, so the next tick's round is due
                # (as at every tick; it may preempt a job just started for one left waiting).
                # A round that changes nothing is the fixed point: wait for recheck_at.
                changed, recheck_at = self._round()
                final = next_arrival >= len(arrivals) and not (failures and failures.any_down)
                # (a round that only preempted is not idle: the next one may restart its jobs)
                if not changed and not self._running and final:
                    idle_rounds += 1
                    if recheck_at == math.inf or idle_rounds > cfg.idle_retries:
                        dropped = self._drop_stuck()
                        if dropped is None:
                            break
                        total -= dropped
                        idle_rounds, changed = 0, True
                        continue
                else:
                    idle_rounds = 0
            self._record(self._now)
            if self.on_progress is not None and instant - last_report >= 3600.0:
                last_report = instant
                self.on_progress(instant, len(self._finished), total)

        if self.on_progress is not None:
            self.on_progress(self._now, len(self._finished), total)
        late = [job.request for _, job in arrivals[next_arrival:]] + unreached
        return self._result([request.id for request in sorted(late, key=_SEQ)])

    def _record(self, at: float, measure_fragmentation: bool = True, arriving: int = 0) -> None:
        """A point of the timeline at ``at``: the GPUs and jobs now, with ``arriving`` jobs
        submitted by then but not yet queued (they wait for the next instant) counted
        pending."""
        self._timeline.record(
            at,
            self._used_milli,
            self._offsets,
            len(self._pending) + arriving,
            len(self._running),
            measure_fragmentation,
        )

    def _record_arrivals(
        self,
        arrivals: Sequence[tuple[WorkloadJob, SimJob]],
        queued: int,
        counted: int,
        until: float,
        before: bool = False,
    ) -> int:
        """A timeline point at each submission from ``arrivals[counted]`` on up to ``until``
        (before it only, with ``before``), the jobs from ``arrivals[queued]`` on submitted by
        then counted pending: a job waits from its submission for the instant that queues it
        (the plot's pending line missed it, 0 from t = 0 to the first tick with two jobs
        waiting). The GPUs are as they are, the fragmentation carried (measured at instants
        only). Returns the index after the last job counted."""
        while counted < len(arrivals):
            at = arrivals[counted][0].request.submit_time
            if at > until or (before and at == until):
                break
            counted += 1
            self._record(at, False, counted - queued)
        return counted

    def _drop_stuck(self) -> int | None:
        """Nothing runs and nothing more can start by itself: fail the pending jobs that
        :class:`~danlu.sim.stuck.StuckRule` chooses and return how many, when other
        pending jobs are left to try again (those failed held them up); None when every
        pending job failed (the run ends)."""
        waiting = [self._pending[status.request.id] for status in self._pending_order]
        failing = self._stuck.choose(waiting, self._now, self._plan_without_others)
        for job, reason in failing:
            self._move(job, JobState.FAILED, "can never be placed on this cluster")
            self._rejected.append((job.id, reason))
            self._failed.append(job)
            del self._pending[job.id]
            self._drop_pending_status(job.id)
        return len(failing) if self._pending else None

    def _plan_without_others(self, jobs: Sequence[SimJob]) -> Plan:
        """The policy's plan now were ``jobs`` (pending, in submission order) the only ones
        waiting: for :class:`~danlu.sim.stuck.StuckRule` to read, never carried out (nor
        counted as a round)."""
        pending = tuple(self._pending_status[job.id] for job in jobs)
        return self.policy.schedule(self._view(pending))

    def _result(self, not_submitted: list[str]) -> SimResult:
        """The result; ``not_submitted``: the jobs whose submission the clock never reached.
        Jobs still running when the clock stopped (``max_time``) end their runs there: their
        records hold the GPU time, restarts and slowdowns up to the stop."""
        now = self._now
        running = list(self._running.values())
        for job in running:
            job.progress.stop(now)  # settles the restart time and slowdown of the run so far
        unfinished = [*running, *self._pending.values()]
        states = [RUNNING] * len(running) + [PENDING] * len(self._pending)
        return SimResult(
            policy=self.policy.name,
            workload=self.workload.name,
            total_gpus=self.cluster.total_gpus,
            jobs=[job_record(j, j.attained) for j in self._finished],
            unfinished=[j.id for j in unfinished],
            # the GPU time of their ended runs, and of the current one up to the stop
            unfinished_records=[
                job_record(j, j.attained + j.run_gpu_seconds(now), state)
                for j, state in zip(unfinished, states, strict=True)
            ],
            stopped_at=self._stopped_at,
            not_submitted=not_submitted,
            rejected=self._rejected,
            timeline=self._timeline,
            rounds=self._rounds,
            preemptions=self._preemptions,
            events=self._events,
            node_failures=self._failures.node_count if self._failures else 0,
            gpu_failures=self._failures.gpu_count if self._failures else 0,
            rejected_records=rejected_records(self._rejected, self._failed, self.workload),
        )
