"""An in-memory executor for tests of the layers above (the reconcile loop, the API).

Jobs "run" for a scripted duration on a manual clock and end with a scripted outcome; nothing
is started. The runs live in a :class:`FakeWorld` that outlives any one executor instance, so
a test can drop an executor, build a new one on the same world and check :meth:`adopt`::

    world = FakeWorld()
    ex = FakeExecutor(Cluster.homogeneous(1, 4), world)
    world.script("train-1", duration=60, outcome=Outcome.SUCCEEDED)
    h = ex.submit(JobLaunch("train-1", ("python", "train.py")))
    world.clock.advance(61)
    assert ex.poll(h).outcome is Outcome.SUCCEEDED
"""

from __future__ import annotations

from dataclasses import dataclass, field

from danlu.core.cluster import Cluster
from danlu.executors.base import (
    PREEMPTED_EXIT_CODE,
    ExecStatus,
    GpuSharingExecutor,
    Handle,
    HeldGpus,
    JobLaunch,
    MultiNodeExecutor,
    Outcome,
    RunState,
    StopReason,
    busy_gpus,
    check_grace,
    check_log_range,
    check_slots,
    exit_signal,
    refreshed_cluster,
    reindexed,
)
from danlu.executors.errors import ExecutorError, JobAlreadyRunningError, UnknownHandleError

_EXIT_CODES = {
    Outcome.SUCCEEDED: 0,
    Outcome.FAILED: 1,
    Outcome.OOM: 1,
    Outcome.CANNOT_FIT: 1,
    Outcome.PREEMPTED: 75,
}


class ManualClock:
    """A clock that moves only when told to."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        """Move the clock forward and return the new time."""
        if seconds < 0:
            raise ExecutorError("a clock does not go backwards")
        self.now += seconds
        return self.now


@dataclass(frozen=True, slots=True)
class Script:
    """How a fake run behaves: it ends ``duration`` seconds after start with ``outcome``;
    on SIGTERM it checkpoints within ``checkpoint_seconds`` (None: it ignores SIGTERM and is
    killed when the grace period ends). ``resumable``: a run that checkpointed saved its
    work, so the job's next run needs only the rest of ``duration`` (a killed or failed
    run resumes from the last checkpoint); otherwise every run starts over."""

    duration: float = 1.0
    outcome: Outcome = Outcome.SUCCEEDED
    exit_code: int | None = None
    log: bytes = b""
    checkpoint_seconds: float | None = 0.0
    resumable: bool = False


@dataclass
class FakeRun:
    """One fake run, as the world records it."""

    launch: JobLaunch
    script: Script
    started_at: float
    stop_reason: StopReason | None = None
    stop_at: float | None = None
    """When the run ends because it was asked to stop."""
    stop_kills: bool = False
    """True when it ends by SIGKILL (it ignored SIGTERM past the grace period)."""
    resumed_from: float = 0.0
    """Seconds of work its job had checkpointed when it started (``Script.resumable``)."""
    nodes: tuple[str, ...] = ()
    """The names of its launch's nodes (sorted distinct node indices), as they were then."""


@dataclass
class FakeWorld:
    """The machines behind fake executors: runs, scripts and the clock, shared by instances."""

    clock: ManualClock = field(default_factory=ManualClock)
    default: Script = field(default_factory=Script)
    scripts: dict[str, Script] = field(default_factory=dict)
    runs: dict[str, FakeRun] = field(default_factory=dict)
    launches: list[JobLaunch] = field(default_factory=list)
    """Every launch ever submitted, in order (for assertions)."""
    saved: dict[str, float] = field(default_factory=dict)
    """Seconds of work each resumable job has checkpointed (``Script.resumable``)."""
    cluster: Cluster | None = None
    """The nodes :meth:`FakeExecutor.refresh_inventory` reads (None: the executor keeps its
    own): set it to add, remove or resize nodes."""
    out_of_service: dict[str, str] = field(default_factory=dict)
    """Nodes the fake backend takes out of service (name -> why), reported by
    :meth:`FakeExecutor.closed_nodes` after the next refresh."""

    def script(self, job_id: str, **kwargs: object) -> Script:
        """Script the next runs of ``job_id`` (keyword arguments of :class:`Script`)."""
        made = Script(**kwargs)  # type: ignore[arg-type]
        self.scripts[job_id] = made
        return made


class FakeExecutor(MultiNodeExecutor, GpuSharingExecutor):
    """Runs nothing; reports scripted runs on a manual clock. Has every optional capability."""

    def __init__(self, cluster: Cluster, world: FakeWorld | None = None) -> None:
        self._cluster = cluster
        self.world = world if world is not None else FakeWorld()
        self._closed: dict[str, str] = {}

    def inventory(self) -> Cluster:
        """The cluster given at construction, or read by the last :meth:`refresh_inventory`."""
        return self._cluster

    def refresh_inventory(self) -> Cluster:
        """The world's :attr:`FakeWorld.cluster` when set (in this executor's order, as the
        cluster executors keep theirs), else the cluster as it was."""
        if self.world.cluster is not None:
            self._cluster = refreshed_cluster(
                self._cluster, self.world.cluster.nodes, self._cluster.name
            )
        self._closed = dict(self.world.out_of_service)
        return self._cluster

    def closed_nodes(self) -> dict[str, str]:
        """The world's :attr:`FakeWorld.out_of_service` as of the last refresh."""
        return dict(self._closed)

    def max_nodes_per_job(self) -> int:
        """Any number of nodes."""
        return len(self._cluster.nodes)

    def max_jobs_per_gpu(self) -> int:
        """Any reasonable number of sharers."""
        return 64

    def submit(self, job: JobLaunch) -> Handle:
        """Record the launch and start its scripted run now; refused like the local
        executor's while its job's earlier run, or another job's run on one of its GPUs (see
        :func:`busy_gpus`), has not ended."""
        check_slots(self._cluster, job.gpus)
        old = self.world.runs.get(job.job_id)
        if old is not None and self._status(old).running:
            raise JobAlreadyRunningError(f"job {job.job_id} still runs")
        busy_gpus(job, self._held())
        script = self.world.scripts.get(job.job_id, self.world.default)
        saved = self.world.saved.get(job.job_id, 0.0) if script.resumable else 0.0
        names = tuple(self._cluster.nodes[i].name for i in job.nodes)
        self.world.runs[job.job_id] = FakeRun(
            job, script, self.world.clock(), resumed_from=saved, nodes=names
        )
        self.world.launches.append(job)
        return Handle(job.job_id, job.run_attempt)

    def poll(self, handle: Handle) -> ExecStatus:
        """The scripted status at the clock's current time."""
        return self._status(self._run(handle))

    def preempt(self, handle: Handle, grace_seconds: float) -> None:
        """The run ends after its checkpoint time, or is killed after the grace period: its
        launch's own (``JobLaunch.preempt_grace``) when it has one, else ``grace_seconds``,
        taken as the real executors take it (:func:`check_grace`: below 0 is 0, an endless
        one is their longest; ``nan`` is refused with :class:`InvalidLaunchError` before the
        run is touched)."""
        self._stop_in_grace(handle, StopReason.PREEMPT, grace_seconds)

    def cancel(self, handle: Handle, grace_seconds: float | None = None) -> None:
        """With ``grace_seconds`` None the run ends now (killed); else as at :meth:`preempt`
        (its checkpoint, or killed after its own grace or else ``grace_seconds``), the stop
        recorded as a cancel."""
        if grace_seconds is None:
            self._stop(self._run(handle), StopReason.CANCEL, 0.0, now=True)
            return
        self._stop_in_grace(handle, StopReason.CANCEL, grace_seconds)

    def _stop_in_grace(self, handle: Handle, reason: StopReason, grace_seconds: float) -> None:
        """A ``reason`` stop of the run of ``handle`` with its launch's own grace
        (``JobLaunch.preempt_grace``) when it has one, else ``grace_seconds``
        (:func:`check_grace`, before the run is touched)."""
        grace_seconds = check_grace(grace_seconds)
        run = self._run(handle)
        own = run.launch.preempt_grace
        self._stop(run, reason, grace_seconds if own is None else own)

    def adopt(self) -> list[Handle]:
        """Every run of the world not forgotten."""
        return [Handle(r.launch.job_id, r.launch.run_attempt) for r in self.world.runs.values()]

    def logs(self, handle: Handle, offset: int = 0, limit: int = 1 << 20) -> tuple[bytes, int]:
        """The scripted log bytes."""
        check_log_range(offset, limit)
        data = self._run(handle).script.log[offset : offset + limit]
        return data, offset + len(data)

    def log_size(self, handle: Handle) -> int:
        """The scripted log's length."""
        return len(self._run(handle).script.log)

    def forget(self, handle: Handle) -> None:
        """Drop the run from the world."""
        self.world.runs.pop(self._run(handle).launch.job_id)

    def discard(self, job_id: str) -> None:
        """Drop the job's run and its saved work from the world."""
        run = self.world.runs.get(job_id)
        if run is not None and self._status(run).running:
            raise ExecutorError(f"job {job_id} still runs; stop it before discarding it")
        self.world.runs.pop(job_id, None)
        self.world.saved.pop(job_id, None)

    def _held(self) -> list[HeldGpus]:
        """The GPUs of the live runs, re-indexed by node name into the inventory as it is
        now (the GPUs of nodes no longer there left out)."""
        held = []
        for run in self.world.runs.values():
            if not self._status(run).running:
                continue
            gpus = [(slot.node, slot.gpu) for slot in run.launch.gpus]
            moved = reindexed(gpus, run.nodes, self._cluster)
            gpus = gpus if moved is None else moved
            shared = all(slot.memory is not None for slot in run.launch.gpus)
            held.append(HeldGpus(run.launch.job_id, gpus, shared, run.stop_reason is not None))
        return held

    def _run(self, handle: Handle) -> FakeRun:
        run = self.world.runs.get(handle.job_id)
        if run is None or run.launch.run_attempt != handle.attempt:
            raise UnknownHandleError(f"no fake run {handle.key}")
        return run

    def _stop(self, run: FakeRun, reason: StopReason, grace: float, now: bool = False) -> None:
        """Stop the running ``run``: killed at once (``now``), else it checkpoints within
        ``grace`` or is killed when it ends. A later stop only brings its end forward."""
        if not self._status(run).running:
            return
        t = self.world.clock()
        ckpt = run.script.checkpoint_seconds
        run.stop_reason = reason
        if now or ckpt is None or ckpt > grace:
            end = t + (0.0 if now else grace)
            if run.stop_at is None or end < run.stop_at:
                run.stop_at, run.stop_kills = end, True
        elif run.stop_at is None or t + ckpt < run.stop_at:
            run.stop_at, run.stop_kills = t + ckpt, False
            if run.script.resumable:  # the checkpoint holds the work done until it ends
                end = min(run.stop_at, self._natural_end(run))
                self.world.saved[run.launch.job_id] = run.resumed_from + end - run.started_at

    @staticmethod
    def _natural_end(run: FakeRun) -> float:
        return run.started_at + max(0.0, run.script.duration - run.resumed_from)

    def _status(self, run: FakeRun) -> ExecStatus:
        now = self.world.clock()
        natural = self._natural_end(run)
        end = natural if run.stop_at is None else min(natural, run.stop_at)
        if now < end:
            return ExecStatus(
                RunState.RUNNING, stop_reason=run.stop_reason, started_at=run.started_at
            )
        if end < natural or (run.stop_at is not None and end == run.stop_at):
            code: int | None = 137 if run.stop_kills else PREEMPTED_EXIT_CODE
            preempted = run.stop_reason is StopReason.PREEMPT or not run.stop_kills
            outcome = Outcome.PREEMPTED if preempted else Outcome.FAILED
        else:
            outcome = run.script.outcome
            code = run.script.exit_code
            if code is None:
                code = _EXIT_CODES[outcome]
        return ExecStatus(
            RunState.EXITED,
            outcome=outcome,
            exit_code=code,
            signal=exit_signal(code),
            stop_reason=run.stop_reason,
            started_at=run.started_at,
            finished_at=end,
        )
