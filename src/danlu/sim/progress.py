"""How a simulated job advances while it holds GPUs.

Two kinds of model, one interface:

- closed-form (:class:`RigidProgress`): the completion time under the current allocation is
  known exactly (``finish_time``), so the engine puts it on its event heap and never steps it;
- stepwise (:class:`ProfiledProgress`): progress depends on measured step times and
  statistical efficiency, so the engine advances it every interval (``advance``).

Every (re)allocation after the first costs ``restart_cost`` seconds of held GPUs without
progress for rigid jobs (their measured durations include the first start-up); profiled jobs
pay it on every allocation, as in the Pollux study.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from danlu.core.cluster import MILLI_PER_GPU, Allocation
from danlu.sim.adapt import profile_tuner
from danlu.sim.elastic import ApplicationProfile, JobProgress
from danlu.sim.failures import lost_training


class Progress(Protocol):
    """The progress of one job through simulated time."""

    @property
    def stepwise(self) -> bool:
        """True when the engine must call :meth:`advance` every interval."""
        ...

    def start(
        self,
        now: float,
        allocation: Allocation,
        batch_size: int | None = None,
        adaptive: bool = False,
    ) -> None:
        """The job got ``allocation`` at ``now`` (a first start, a resume or a resize), to
        train at global ``batch_size`` when the scheduler chose one; ``adaptive``: the
        scheduler lets it re-pick its batch in-process (if the job can)."""
        ...

    def rebatch(self, now: float, batch_size: int, adaptive: bool = False) -> None:
        """Change the global batch at ``now`` in place: same GPUs, no restart."""
        ...

    @property
    def rate(self) -> float:
        """Share of its own speed it runs at (below 1 beside jobs that slow it)."""
        ...

    def set_rate(self, now: float, rate: float) -> None:
        """Run at ``rate`` (0 < rate <= 1) of its own speed from ``now`` (closed-form
        models) or from the next :meth:`advance` (stepwise ones); every start resets it."""
        ...

    def observe(self) -> Mapping[str, float]:
        """What the job reports about itself now (see :attr:`JobStatus.observed`)."""
        ...

    def stop(self, now: float) -> None:
        """The job lost its GPUs at ``now``; settle its progress up to then."""
        ...

    fruitless_failures: int
    """Failures in a row whose runs kept no new training (see :meth:`fail`)."""

    def fail(self, now: float, checkpoint_every: float) -> float:
        """The job's node failed at ``now``: it stops, and loses the training since its
        last checkpoint (every ``checkpoint_every`` seconds of a run's training,
        :mod:`danlu.sim.failures`), which its next run redoes before it progresses again.
        Returns the seconds of training lost now."""
        ...

    @property
    def kept_runs(self) -> int:
        """Runs that ended keeping new training: stopped (a preemption, a resize, the
        job's end) after training beyond what they redid, or failed after saving a
        checkpoint beyond it."""
        ...

    def keeps_training(self, now: float, checkpoint_every: float) -> bool:
        """Whether the current run, if any, would keep new training if it failed at
        ``now`` (:meth:`fail`)."""
        ...

    def finish_time(self) -> float | None:
        """Closed-form models: when the job completes if it keeps its allocation."""
        ...

    def advance(self, now: float, seconds: float) -> float | None:
        """Stepwise models: run ``seconds`` from ``now``; the completion time if it finished."""
        ...

    def fraction(self, now: float) -> float:
        """Share of the work done at ``now``, 0..1."""
        ...

    @property
    def restart_seconds(self) -> float:
        """Seconds of held GPUs spent restarting so far."""
        ...

    @property
    def restart_gpu_seconds(self) -> float:
        """GPU-seconds spent restarting so far, at the GPUs each run held (a share of one
        GPU counted as its share)."""
        ...

    @property
    def interference_seconds(self) -> float:
        """Seconds of running so far lost to jobs sharing its GPU: the time run times the
        part of its speed it lacked (0 unless the simulation slows shared jobs)."""
        ...

    @property
    def interference_gpu_seconds(self) -> float:
        """The same in GPU-seconds, at the share of a GPU it held."""
        ...


def _check_rate(rate: float) -> None:
    """Raise :class:`ValueError` unless ``0 < rate <= 1`` (a share of a job's own speed)."""
    if not 0.0 < rate <= 1.0:
        raise ValueError(f"rate must be in (0, 1], got {rate}")


class _Ledger:
    """What a job's runs lost: the restart time they were charged, and the running time
    that jobs sharing its GPU took (0 unless the simulation slows shared jobs); seconds, and
    GPU-seconds at the GPUs each run held (a share of one GPU counted as its share, as the
    held GPU-seconds are)."""

    _restart_seconds = 0.0
    _restart_gpu_seconds = 0.0
    _interference_seconds = 0.0
    _interference_gpu_seconds = 0.0
    _redo = 0.0
    """Seconds of training lost to failures that the next run redoes first."""
    _run = (0.0, 0.0, 0.0)
    """The current run's start, its restart cost, and the training it redoes first."""
    _in_run = False
    """Whether a run started and has not ended."""
    _kept_runs = 0
    """Runs that ended keeping new training (:attr:`kept_runs`)."""
    fruitless_failures = 0
    """Failures in a row whose runs kept no new training (each failed before it saved a
    checkpoint beyond what it had to redo): the engine stops a simulation in which a job
    can no longer progress (:data:`danlu.sim.failures.MOST_FRUITLESS_FAILURES`)."""

    def stop(self, now: float) -> None:
        raise NotImplementedError

    def _begin_run(self, now: float, restart: float) -> float:
        """A run starts at ``now`` with ``restart`` seconds of restart cost; returns its
        seconds without progress: the restart, then the training lost to failures."""
        self._run = (now, restart, self._redo)
        self._redo = 0.0
        self._in_run = True
        return restart + self._run[2]

    def _end_run(self, now: float) -> float:
        """The current run ends at ``now`` with a checkpoint (a preemption, a resize, the
        job's end): what it had not redone yet is still to redo. Returns the seconds it
        trained, the redone training included."""
        start, restart, redo = self._run
        trained = max(0.0, now - start - restart)
        self._redo = max(0.0, redo - trained)
        self._in_run = False
        self._kept_runs += trained > redo  # (a failure takes it back if it lost that)
        return trained

    def _failed_run(self, now: float, checkpoint_every: float) -> tuple[float, bool]:
        """The current run failing at ``now``: the training it loses, and whether it keeps
        new training (it saved a checkpoint beyond what it had to redo)."""
        start, restart, redo = self._run
        trained = max(0.0, now - start - restart)
        lost = lost_training(trained, checkpoint_every)
        return lost, trained - lost > redo

    def fail(self, now: float, checkpoint_every: float) -> float:
        stopped_new = self._in_run and now - self._run[0] - self._run[1] > self._run[2]
        self.stop(now)  # ends the run (the redo it had left stays)
        lost, kept_new = self._failed_run(now, checkpoint_every)
        self._redo += lost  # back to the last checkpoint
        self._kept_runs -= stopped_new and not kept_new  # the stop counted it kept
        self.fruitless_failures = 0 if kept_new else self.fruitless_failures + 1
        return lost

    @property
    def kept_runs(self) -> int:
        return self._kept_runs

    def keeps_training(self, now: float, checkpoint_every: float) -> bool:
        return self._in_run and self._failed_run(now, checkpoint_every)[1]

    @property
    def restart_seconds(self) -> float:
        return self._restart_seconds

    @property
    def restart_gpu_seconds(self) -> float:
        return self._restart_gpu_seconds

    @property
    def interference_seconds(self) -> float:
        return self._interference_seconds

    @property
    def interference_gpu_seconds(self) -> float:
        return self._interference_gpu_seconds

    def _charge_restart(self, seconds: float, gpus: float) -> None:
        self._restart_seconds += seconds
        self._restart_gpu_seconds += seconds * gpus

    def _charge_interference(self, seconds: float, gpus: float) -> None:
        self._interference_seconds += seconds
        self._interference_gpu_seconds += seconds * gpus


class RigidProgress(_Ledger):
    """A job that needs ``duration`` seconds of running, wherever it runs.

    It runs at full speed unless the engine slows it (:meth:`set_rate`: it shares its GPU
    with other jobs and the simulation models their interference)."""

    stepwise = False

    def __init__(self, duration: float, restart_cost: float = 30.0) -> None:
        self.duration = duration
        self.remaining = duration
        """Seconds of running at full speed still needed (as of ``_started_at``)."""
        self.restart_cost = restart_cost
        self.rate = 1.0
        """Fraction of its full speed the job runs at now."""
        self._started_at: float | None = None
        """Start of the current stretch at the current rate (``None``: not running)."""
        self._delay = 0.0
        """Restart seconds still to pay, as of ``_started_at``."""
        self._starts = 0
        self._held = 0.0
        """GPUs held by the current run, fractions of a GPU counted as such."""

    def start(
        self,
        now: float,
        allocation: Allocation,
        batch_size: int | None = None,
        adaptive: bool = False,
    ) -> None:
        self._starts += 1
        self._delay = self._begin_run(now, self.restart_cost if self._starts > 1 else 0.0)
        self._started_at = now
        self._held = allocation.gpu_milli / MILLI_PER_GPU
        self.rate = 1.0

    def _settle(self, now: float) -> None:
        """Account for the current stretch up to ``now`` and begin a new one there."""
        if self._started_at is None:
            return
        elapsed = max(0.0, now - self._started_at)
        paid = min(elapsed, self._delay)
        self._charge_restart(paid, self._held)
        self._delay -= paid
        self.remaining = max(0.0, self.remaining - (elapsed - paid) * self.rate)
        self._charge_interference((elapsed - paid) * (1.0 - self.rate), self._held)
        self._started_at = now

    def set_rate(self, now: float, rate: float) -> None:
        """From ``now`` on the job runs at ``rate`` (0 < rate <= 1) of its full speed."""
        _check_rate(rate)
        self._settle(now)
        self.rate = rate

    def stop(self, now: float) -> None:
        self._settle(now)
        if self._started_at is not None:
            self._end_run(now)
        self._started_at = None

    def rebatch(self, now: float, batch_size: int, adaptive: bool = False) -> None:
        """Rigid jobs have no batch to change."""

    def finish_time(self) -> float | None:
        if self._started_at is None:
            return None
        return self._started_at + self._delay + self.remaining / self.rate

    def advance(self, now: float, seconds: float) -> float | None:
        raise NotImplementedError("rigid jobs are closed-form; use finish_time()")

    def observe(self) -> Mapping[str, float]:
        return _NOTHING

    def fraction(self, now: float) -> float:
        done = self.duration - self.remaining
        if self._started_at is not None:
            done += max(0.0, now - self._started_at - self._delay) * self.rate
        return min(1.0, done / self.duration) if self.duration > 0 else 1.0


_NOTHING: Mapping[str, float] = {}


class ProfiledProgress(_Ledger):
    """A job of a profiled application (Pollux traces).

    It trains at the global batch the scheduler chose in its last start, resize or rebatch,
    else at the workload's (rigid) ``batch_size``. :meth:`observe` reports what
    ``danlu.train`` would measure: the step and sync time of the current placement and
    per-GPU batch, the gradient statistics of the current epoch, and the fraction of the
    work done; an application whose jobs adapt their batch reports ``adaptive`` = 1.

    Adaptive runs (the scheduler's ``adaptive`` flag, for an adaptive application): the job
    re-picks its goodput-optimal batch for its placement in-process
    (``danlu.estimate.adapt.SelfTuner``, the code ``danlu.train``'s goodput-adaptive batch
    runs, from its own measurements) at the start of every interval and at every epoch boundary,
    as AdaptDL does inside Pollux's jobs; no restart is charged for it.

    On GPUs it shares with other jobs the engine may slow it (:meth:`set_rate`, with an
    interference model): its iterations take ``1 / rate`` as long, which it measures (step and
    sync times in :meth:`observe` and for its tuner), and its restarts do not. A new rate
    applies from the next :meth:`advance` (the engine advances stepwise jobs interval by
    interval).
    """

    stepwise = True

    def __init__(
        self, profile: ApplicationProfile, batch_size: int, restart_cost: float = 30.0
    ) -> None:
        self.job = JobProgress(profile)
        self.rigid_batch = batch_size
        self.batch_size = batch_size
        self.restart_cost = restart_cost
        self.adaptive = False
        """Whether the current run re-picks its batch in-process."""
        self.tuner = profile_tuner(profile)
        self._placement: tuple[int, ...] = ()
        self._limits: dict[str, float] = {
            "init_batch": float(profile.init_batch_size),
            "max_batch": float(profile.max_batch_size),
            "min_local_bsz": float(profile.min_local_bsz),
            "max_local_bsz": float(profile.max_local_bsz),
            "target_batch": float(batch_size),
        }
        if profile.adaptive:
            self._limits["adaptive"] = 1.0
        self._observed: Mapping[str, float] | None = None
        self.rate = 1.0
        """Share of its own speed it runs at (below 1 beside jobs that slow it)."""
        self._held = 0.0  # GPUs held, a share of a GPU counted as its share

    def set_rate(self, now: float, rate: float) -> None:
        """Run at ``rate`` (0 < rate <= 1) of its own speed from the next :meth:`advance`
        (``now`` is when the GPUs it shares changed); every start resets it to 1."""
        _check_rate(rate)
        self.rate = rate
        self._observed = None

    def start(
        self,
        now: float,
        allocation: Allocation,
        batch_size: int | None = None,
        adaptive: bool = False,
    ) -> None:
        self._placement = allocation.node_counts()
        self._held = allocation.gpu_milli / MILLI_PER_GPU
        self.rate = 1.0  # the engine slows it again if its new GPUs hold other jobs
        self.adaptive = adaptive and self.job.profile.adaptive
        self.batch_size = self.rigid_batch if batch_size is None else batch_size
        self.job.restart(self._begin_run(now, self.restart_cost))
        self._observed = None

    def rebatch(self, now: float, batch_size: int, adaptive: bool = False) -> None:
        """A batch-only change: the job keeps its GPUs and its process (no restart)."""
        self.batch_size = batch_size
        self.adaptive = adaptive and self.job.profile.adaptive
        self._observed = None

    def stop(self, now: float) -> None:
        if self._placement:
            self._end_run(now)
        self._placement = ()
        self._observed = None

    def observe(self) -> Mapping[str, float]:
        if self._observed is not None:
            return self._observed
        job = self.job
        profile = job.profile
        seen = dict(self._limits)
        seen["progress"] = job.fraction
        nodes = tuple(n for n in self._placement if n)
        if nodes and not job.done:
            config = profile.rigid_config(sum(nodes), self.batch_size)
            step, sync = profile.step_time(nodes, config.atomic_bsz)
            epoch = min(job.epoch, profile.max_epochs - 1)
            sqr, var = profile.grad_stats(config.batch_size, epoch)
            seen.update(
                step_time=step / self.rate,
                sync_time=sync / self.rate,
                local_bsz=float(config.atomic_bsz),
                accum_steps=float(config.accum_steps),
                batch_size=float(config.batch_size),
                num_replicas=float(sum(nodes)),
                num_nodes=float(len(nodes)),
                grad_sqr=sqr,
                grad_var=var,
            )
        self._observed = seen
        return seen

    def finish_time(self) -> float | None:
        return None

    def advance(self, now: float, seconds: float) -> float | None:
        if not self._placement:
            return None
        before = self.job.restart_remaining
        epoch = self.job.epoch
        if self.adaptive:
            used = self._advance_adaptive(seconds)
        else:
            used = self.job.advance(
                seconds, self._placement, self.batch_size, interference=1.0 - self.rate
            )
        if self.job.epoch != epoch or self._observed is None or self.adaptive:
            self._observed = None
        else:  # only the progress moved
            self._observed = {**self._observed, "progress": self.job.fraction}
        restarting = before - self.job.restart_remaining
        self._charge_restart(restarting, self._held)
        self._charge_interference((used - restarting) * (1.0 - self.rate), self._held)
        return now + used if self.job.done else None

    def _advance_adaptive(self, seconds: float) -> float:
        """Advance epoch by epoch, re-picking the batch before each piece."""
        job = self.job
        nodes = tuple(n for n in self._placement if n)
        used = 0.0
        while used < seconds and not job.done:
            chosen = self.tuner.choose(nodes)
            if chosen is not None:
                self.batch_size = chosen
            epoch = job.epoch
            ran = job.advance(
                seconds - used,
                self._placement,
                self.batch_size,
                interference=1.0 - self.rate,
                stop_at_epoch=True,
            )
            if job.restart_remaining <= 0:  # it trained: it measured itself
                self._measure(nodes, epoch)
            used += ran
            if ran <= 0 and job.epoch == epoch:
                break
        return used

    def _measure(self, nodes: tuple[int, ...], epoch: int) -> None:
        """What the job measured while it trained ``epoch`` at its current batch."""
        profile = self.job.profile
        config = profile.rigid_config(sum(nodes), self.batch_size)
        step, sync = profile.step_time(nodes, config.atomic_bsz)
        stats = profile.grad_stats(config.batch_size, min(epoch, profile.max_epochs - 1))
        self.tuner.measure(nodes, config.atomic_bsz, step / self.rate, sync / self.rate, stats)

    def fraction(self, now: float) -> float:
        return self.job.fraction
