"""The executor interface: where jobs run.

An :class:`Executor` reports the cluster it can place on (:meth:`Executor.inventory`), starts a
:class:`JobLaunch` and returns a :class:`Handle`, and reports the run's :class:`ExecStatus`
when polled. It can preempt (SIGTERM, then SIGKILL after a grace period), cancel, tail logs, and
after a control-plane restart re-attach to the runs it started (:meth:`Executor.adopt`).

Optional capabilities are separate base classes, checked with ``isinstance``:
:class:`MultiNodeExecutor` (one job across several hosts) and :class:`GpuSharingExecutor`
(several jobs on one GPU, each capped to its memory share).

How a run's exit is classified (:func:`classify_exit`, :func:`host_oom`, :class:`Outcome`,
...) is :mod:`danlu.executors.exits`'s; its public names are importable from here too.
"""

from __future__ import annotations

import enum
import operator
import re
import zlib
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from math import inf

from danlu.core.cluster import Allocation, Cluster, Node
from danlu.core.errors import SpecError
from danlu.core.spec_training import precision_name
from danlu.executors import supervise
from danlu.executors.errors import GpusBusyError, InvalidLaunchError

# How a run's exit is classified lives in exits.py; its public names stay importable from here
# (``X as X``: re-exported on purpose).
from danlu.executors.exits import CANNOT_FIT_MARK as CANNOT_FIT_MARK
from danlu.executors.exits import KILLED_EXIT_CODE as KILLED_EXIT_CODE
from danlu.executors.exits import PREEMPTED_EXIT_CODE as PREEMPTED_EXIT_CODE
from danlu.executors.exits import SIGNAL_LIMIT as SIGNAL_LIMIT
from danlu.executors.exits import WORKER_SIGKILLED as WORKER_SIGKILLED
from danlu.executors.exits import Outcome as Outcome
from danlu.executors.exits import StopReason as StopReason
from danlu.executors.exits import classify_exit as classify_exit
from danlu.executors.exits import exit_signal as exit_signal
from danlu.executors.exits import gang_exit as gang_exit
from danlu.executors.exits import host_oom as host_oom

JOB_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\Z")
"""What a job id may look like (the whole of it: ``fullmatch``, since ``$`` would let a
trailing newline through): it becomes a file name, so no separators, no leading dot."""

SHELL = "/bin/sh"


def _whole(value: object) -> int | None:
    """``value`` as an int when it is a whole number (an int, numpy's integers: anything with
    ``__index__``) but not a bool; else None."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        return None


def check_log_range(offset: int, limit: int) -> None:
    """Raise :class:`InvalidLaunchError` (field ``offset`` or ``limit``) unless ``offset`` is
    a whole number of 0 or more and ``limit`` one above 0: what :meth:`Executor.logs` reads."""
    for name, value, least in (("offset", offset, 0), ("limit", limit, 1)):
        whole = _whole(value)
        if whole is None or whole < least:
            raise InvalidLaunchError(
                name, f"{value!r} is not a valid {name}; offset must be >= 0 and limit > 0"
            )


def check_grace(grace: float, field_name: str = "grace_seconds") -> float:
    """``grace`` (the ``grace_seconds`` of :meth:`Executor.preempt`) as the seconds a stop
    waits before its SIGKILL: one below 0 is 0 (SIGKILL at once), an endless one (``inf``)
    :data:`~danlu.executors.supervise.MAX_GRACE_SECONDS`. Raises :class:`InvalidLaunchError`
    (field ``field_name``) for one that is not a number of seconds (``nan``, a string),
    which a stop must refuse before it records or signals anything. Every stop checks its
    grace here, the Ray executor's node actor too (:meth:`~danlu.executors.ray_actor.
    NodeRun.stop`), so that a bad grace is the same error wherever it is given."""
    seconds = supervise.grace_seconds(grace)
    if seconds is None:
        raise InvalidLaunchError(
            field_name, f"{grace!r} is not a number; give a number of seconds, 0 or more"
        )
    return seconds


def validate_job_id(job_id: str, field_name: str = "job_id") -> str:
    """Return ``job_id`` if it is safe as a file name, else raise :class:`InvalidLaunchError`.

    1-128 letters, digits, ``.``, ``_`` or ``-``, starting with a letter or digit: no ``/``,
    no ``..`` path component, nothing a path could escape its directory with.
    """
    if not isinstance(job_id, str) or not JOB_ID_RE.fullmatch(job_id):
        raise InvalidLaunchError(
            field_name,
            f"{job_id!r} is not a valid job id; use 1-128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit",
        )
    return job_id


class RunState(enum.Enum):
    """Whether a run still runs."""

    RUNNING = "RUNNING"
    EXITED = "EXITED"


@dataclass(frozen=True, slots=True)
class GpuSlot:
    """One GPU given to a job: node index and GPU index in the executor's cluster, and the
    memory the job may use on it (``None``: the whole GPU, no cap)."""

    node: int
    gpu: int
    memory: int | None = None

    def __post_init__(self) -> None:
        """Whole numbers only (a string or a float raised ``TypeError`` in the launch's
        checks, or named no GPU at all)."""
        for name in ("node", "gpu", "memory"):
            value = getattr(self, name)
            if value is None and name == "memory":
                continue
            if (whole := _whole(value)) is None:
                raise InvalidLaunchError(
                    "gpus", f"a GPU slot's {name} {value!r} is not a whole number; give an int"
                )
            object.__setattr__(self, name, whole)


@dataclass(frozen=True, slots=True)
class JobLaunch:
    """Everything an executor needs to start one run of a job.

    ``argv`` is run as is, never through a shell, unless ``shell=True``: then ``argv`` must be
    one string, run as ``["/bin/sh", "-c", argv[0]]``. ``env`` is the job's own environment; the
    executor adds the danlu job environment (DESIGN.md, "Job environment") on top.
    Directories left ``None`` get the executor's defaults.
    """

    job_id: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    gpus: tuple[GpuSlot, ...] = ()
    shell: bool = False
    workdir: str | None = None
    preempt_grace: float | None = None
    """Seconds this job has to checkpoint and exit after SIGTERM when preempted (its spec's
    ``preempt_grace``): it overrides the grace :meth:`Executor.preempt` is given. None: that
    grace."""
    log_dir: str | None = None
    checkpoint_dir: str | None = None
    restart_count: int = 0
    batch_size: int | None = None
    """The job's global batch as the scheduler set it (the spec's, or a policy's choice):
    ``DANLU_GLOBAL_BATCH_SIZE``. Its per-GPU share, :attr:`per_gpu_batch`, goes in
    ``DANLU_BATCH_SIZE``, which ``danlu.train`` reads as its per-GPU micro-batch."""
    token: str | None = None
    """Bearer token the job uses to report metrics (``DANLU_TOKEN``); never written to disk."""
    attempt: int | None = None
    """The run's number for :class:`Handle` (the control plane's start counter); ``None``
    means ``restart_count``. Lets DANLU_RESTART_COUNT count failures while handles count runs."""

    micro_batch_limit: int | None = None
    """The largest per-GPU micro-batch the memory model predicts to fit: caps
    :attr:`per_gpu_batch` (``danlu.train`` then accumulates to keep the global batch)."""
    run_as: str | None = None
    """The OS account the job's processes run as (``DANLU_RUN_AS=user``;
    :mod:`danlu.executors.accounts`); None: the control plane's own user. Only the local
    executor, run as root, starts jobs as another account."""
    precision: str | None = None
    """The precision the job trains in, its spec's ``training.precision`` (``fp32``,
    ``fp16`` or ``bf16``; stored as one of the three): ``DANLU_PRECISION``, ``danlu.train``'s
    default precision. None: the launch names none (the variable is not set)."""
    gpu_context_bytes: int | None = None
    """The CUDA context, in bytes, the control plane's memory estimate allowed for on the
    GPU type of the job's memory-capped GPUs' nodes: ``DANLU_GPU_CONTEXT_BYTES``, which
    ``danlu.train``'s memory cap leaves out of ``DANLU_GPU_MEMORY_LIMIT`` (instead of its
    built-in GPU table's figure for the device). None: not told (the variable is not set)."""

    @property
    def per_gpu_batch(self) -> int | None:
        """``batch_size`` split over the job's GPUs (rounded up; all of it without GPUs),
        capped at :attr:`micro_batch_limit`."""
        if self.batch_size is None:
            return None
        share = -(-self.batch_size // max(1, len(self.gpus)))
        if self.micro_batch_limit is not None and self.micro_batch_limit >= 1:
            return min(share, self.micro_batch_limit)
        return share

    def __post_init__(self) -> None:
        validate_job_id(self.job_id)
        object.__setattr__(self, "argv", tuple(self.argv))
        object.__setattr__(self, "gpus", tuple(self.gpus))
        if not self.argv or not all(isinstance(a, str) for a in self.argv):
            raise InvalidLaunchError("argv", "give the command as a non-empty list of strings")
        if self.shell and len(self.argv) != 1:
            raise InvalidLaunchError(
                "argv", "with shell=True give exactly one command string (run by /bin/sh -c)"
            )
        if any("\0" in a for a in self.argv):
            raise InvalidLaunchError("argv", "an argument contains a NUL byte")
        # (a string or a float here raised TypeError at the comparison, or later)
        for name in (
            "restart_count",
            "attempt",
            "batch_size",
            "micro_batch_limit",
            "gpu_context_bytes",
        ):
            value = getattr(self, name)
            if value is None:
                continue
            if (whole := _whole(value)) is None:
                raise InvalidLaunchError(name, f"{value!r} is not a whole number; give an int")
            object.__setattr__(self, name, whole)
        if self.restart_count < 0:
            raise InvalidLaunchError("restart_count", "must be 0 or more")
        if self.attempt is not None and self.attempt < 0:
            raise InvalidLaunchError("attempt", "must be 0 or more")
        if self.batch_size is not None and self.batch_size <= 0:
            raise InvalidLaunchError("batch_size", "must be a positive integer")
        if self.gpu_context_bytes is not None and self.gpu_context_bytes < 0:
            raise InvalidLaunchError("gpu_context_bytes", "must be 0 or more bytes")
        grace = self.preempt_grace
        if grace is not None and not (
            isinstance(grace, int | float) and not isinstance(grace, bool) and 0 <= grace < inf
        ):
            raise InvalidLaunchError(
                "preempt_grace", f"{grace!r} is not a number of seconds; give 0 or more, or None"
            )
        if not all(isinstance(slot, GpuSlot) for slot in self.gpus):
            raise InvalidLaunchError("gpus", "give the GPUs as GpuSlot(node, gpu, memory)")
        if not isinstance(self.env, Mapping):
            raise InvalidLaunchError("env", "give the environment as a mapping of names to strings")
        for key, value in self.env.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise InvalidLaunchError(
                    f"env.{key}",
                    "give each variable's name and value as strings (got "
                    f"{type(key).__name__} = {type(value).__name__})",
                )
            if not key or "=" in key or "\0" in key or "\0" in value:
                raise InvalidLaunchError(f"env.{key}", "not a valid environment variable")
        # these become environment variables, paths or an account name: a NUL in one
        # made the launch fail halfway (Popen's "embedded null byte")
        for name in ("workdir", "log_dir", "checkpoint_dir", "token", "run_as"):
            text = getattr(self, name)
            if isinstance(text, str) and "\0" in text:
                raise InvalidLaunchError(name, "contains a NUL byte; remove it")
        for slot in self.gpus:
            if slot.memory is not None and slot.memory <= 0:
                raise InvalidLaunchError("gpus", f"memory share of {slot} must be positive")
        if self.precision is not None:
            try:
                object.__setattr__(self, "precision", precision_name(self.precision, ""))
            except SpecError as exc:
                raise InvalidLaunchError("precision", exc.message) from None

    @property
    def command(self) -> list[str]:
        """The argv actually executed (``/bin/sh -c`` only when ``shell`` was asked for)."""
        return [SHELL, "-c", self.argv[0]] if self.shell else list(self.argv)

    @property
    def run_attempt(self) -> int:
        """The attempt number of this run's :class:`Handle`."""
        return self.restart_count if self.attempt is None else self.attempt

    @property
    def memory_limit(self) -> int | None:
        """Bytes the job may use on each GPU when it shares one (the smallest capped slot)."""
        caps = [s.memory for s in self.gpus if s.memory is not None]
        return min(caps) if caps else None

    @property
    def nodes(self) -> tuple[int, ...]:
        """Sorted distinct node indices of the allocation."""
        return tuple(sorted({s.node for s in self.gpus}))

    @staticmethod
    def slots(allocation: Allocation, shared_memory: bool | None = None) -> tuple[GpuSlot, ...]:
        """GPU slots from a core :class:`Allocation`: whole-GPU shares are uncapped, partial
        shares (``milli < 1000``) capped to their memory. ``shared_memory=True`` caps every
        share that names its memory."""
        out = []
        for share in allocation.shares:
            capped = (shared_memory or not share.whole) and share.memory > 0
            out.append(GpuSlot(share.node, share.gpu, share.memory if capped else None))
        return tuple(out)


@dataclass(frozen=True, slots=True)
class Handle:
    """Identifies one run: the job id and its attempt (the restart count it was launched with).

    Plain data, so the control plane can store it and rebuild it after a restart."""

    job_id: str
    attempt: int = 0

    @property
    def key(self) -> str:
        """A string form, ``job-id#attempt``."""
        return f"{self.job_id}#{self.attempt}"


@dataclass(frozen=True, slots=True)
class RunStart:
    """Where one run of a job began in the job's log, which holds the output of all its runs
    one after another (:meth:`Executor.log_runs`): the run's ``attempt``, the ``offset`` of
    its first byte there, and when it was launched (``started_at``, POSIX seconds)."""

    attempt: int
    offset: int
    started_at: float


@dataclass(frozen=True, slots=True)
class ExecStatus:
    """What an executor knows about a run when polled.

    ``exit_code`` follows the shell convention: 128 + N when the process died from signal N
    (``signal`` is then N). ``stop_reason`` says whether danlu asked it to stop; a run stopped
    for preemption is PREEMPTED even when it had to be killed (``checkpointed`` is then False).
    """

    state: RunState
    outcome: Outcome | None = None
    exit_code: int | None = None
    signal: int | None = None
    stop_reason: StopReason | None = None
    started_at: float | None = None
    finished_at: float | None = None
    message: str = ""
    node_lost: bool = False
    """The run ended because a node of it was lost, not by the job's doing: the backend's
    process for it vanished (a Ray node that left or died) or the backend says the node
    failed (Slurm's ``NODE_FAIL``). The control plane re-queues the job to resume from its
    last checkpoint, counting a preemption, not a restart."""
    start_failed_on: tuple[str, ...] = ()
    """The nodes (by name) the run could not start on for the nodes' own reasons, found
    only at a poll: a Ray actor whose creation failed on its live node (danlu not importable
    there). The control plane counts the run as a launch that failed there for the node's
    reasons, as it counts a :class:`~danlu.executors.errors.NodeLaunchError` of a launch:
    the job is re-queued with no restart counted (the job ran nothing), and a node is
    cordoned after ``DANLU_NODE_LAUNCH_FAILURES`` in a row. Such re-queues are bounded: the
    one that would be the job's ``UNSTARTED_RUNS_LIMIT``-th
    (:data:`danlu.server.polling.UNSTARTED_RUNS_LIMIT`) fails the job instead, naming the
    nodes. Empty (the default): none; a run that failed by the job's own doing (its command
    exited 1) names none, and counts a restart as any failure does."""
    host_memory: bool = False
    """The run (an :attr:`Outcome.OOM`) ran out of the host's memory, not its GPUs': the
    kernel's OOM killer ended it (:func:`~danlu.executors.exits.host_oom`), Slurm ended its
    job ``OUT_OF_MEMORY`` (its cgroup's memory limit), or Ray's memory monitor killed its
    actor (its node low on memory). The control plane's reason then names host memory and
    its fix, not the GPU memory the run had (:func:`~danlu.server.run_exits.memory_note`)."""

    @property
    def running(self) -> bool:
        """True while the run has not exited."""
        return self.state is RunState.RUNNING

    @property
    def checkpointed(self) -> bool:
        """True when the job exited with the preemption code after writing a checkpoint."""
        return self.exit_code == PREEMPTED_EXIT_CODE


@dataclass(frozen=True)
class HeldGpus:
    """The GPUs a live run of some job holds, as an executor's launch check sees them."""

    job_id: str
    gpus: Sequence[Sequence[int]]
    """Its ``(node, gpu)`` pairs."""
    shared: bool
    """It holds memory shares of them (others may share them too), not the whole GPUs."""
    stopping: bool
    """It was asked to stop and has not exited yet."""


def refreshed_cluster(old: Cluster | None, nodes: Sequence[Node], name: str) -> Cluster:
    """``nodes``, as read from a backend now, as a cluster named ``name`` in ``old``'s
    order: the nodes ``old`` has keep their order (with what was read now), the new ones
    follow in the order read. Node indices stay as they were up to the first node that
    left."""
    fresh = {node.name: node for node in nodes}
    kept = [fresh.pop(node.name) for node in (old.nodes if old else ()) if node.name in fresh]
    return Cluster((*kept, *(node for node in nodes if node.name in fresh)), name)


def node_devices(job: JobLaunch, cluster: Cluster) -> dict[str, list[str]]:
    """``job``'s GPU indices (strings, for ``CUDA_VISIBLE_DEVICES``) on each of its nodes, by
    node name of ``cluster``, in :attr:`JobLaunch.nodes` order."""
    devices: dict[str, list[str]] = {cluster.nodes[i].name: [] for i in job.nodes}
    for slot in job.gpus:
        devices[cluster.nodes[slot.node].name].append(str(slot.gpu))
    return devices


def master_port(job: JobLaunch) -> int:
    """torchrun's rendezvous port (``PET_MASTER_PORT``) of ``job``'s run: 20000-39999, from
    its job id and attempt, so that two runs on one node rarely pick the same."""
    return 20000 + zlib.crc32(f"{job.job_id}#{job.run_attempt}".encode()) % 20000


def reindexed(
    gpus: Iterable[tuple[int, int]], names: Sequence[str], cluster: Cluster
) -> list[tuple[int, int]] | None:
    """``(node, gpu)`` pairs of a run launched on another inventory, as node indices of
    ``cluster``: ``names`` are the names of the pairs' sorted distinct nodes then. Pairs on
    nodes ``cluster`` lacks are left out; None when ``names`` does not fit the pairs."""
    pairs = list(gpus)
    launched_on = sorted({node for node, _ in pairs})
    if len(names) != len(launched_on):
        return None
    index = {node.name: i for i, node in enumerate(cluster.nodes)}
    now = {old: index.get(name) for old, name in zip(launched_on, names, strict=True)}
    return [(moved, gpu) for node, gpu in pairs if (moved := now[node]) is not None]


def busy_gpus(launch: JobLaunch, held: Iterable[HeldGpus]) -> None:
    """Raise :class:`GpusBusyError` when ``launch`` asks for a GPU that a live run of another
    job still holds: whole (or ``launch`` wants it whole), or while that run stops (its memory
    is not free yet). Memory shares beside live shares pass: the scheduler sized them. Its
    own job's earlier run is left to the executor's :class:`JobAlreadyRunningError`.

    A run that holds GPUs the control plane has given to another job is one that is stopping
    (a preemption, a cancel, a move), or one whose stop request was lost: either way the new
    launch waits for it to exit instead of sharing a GPU it was promised whole."""
    whole = {(slot.node, slot.gpu) for slot in launch.gpus if slot.memory is None}
    wanted = {(slot.node, slot.gpu) for slot in launch.gpus}
    holders: dict[str, set[tuple[int, int]]] = {}  # every such run's, for the error
    said = ""  # the first one's, for the message
    for run in held:
        if run.job_id == launch.job_id:
            continue
        overlap = wanted.intersection((int(g[0]), int(g[1])) for g in run.gpus)
        if not run.stopping and run.shared:
            overlap &= whole
        if overlap:
            holders.setdefault(run.job_id, set()).update(overlap)
            if not said:
                where = ", ".join(f"{node}/{gpu}" for node, gpu in sorted(overlap))
                why = "which is stopping" if run.stopping else "which still runs"
                said = (
                    f"GPU(s) {where} (node/gpu) of job {launch.job_id} are still held by job "
                    f"{run.job_id}, {why}; launch it once that run has exited"
                )
    if said:
        raise GpusBusyError(said, {job: sorted(gpus) for job, gpus in holders.items()})


def job_environment(
    base_env: Mapping[str, str],
    job: JobLaunch,
    api_url: str | None,
    drop: tuple[str, ...] = (),
) -> dict[str, str]:
    """A job's environment: ``base_env``, ``PYTHONUNBUFFERED=1`` unless set, the job's own
    ``env`` without the variables starting with one of ``drop`` (those an executor's backend
    reads: ``SLURM_*``, ``RAY_*``), then the danlu job environment (:func:`set_job_env`),
    which wins. ``CUDA_VISIBLE_DEVICES`` is the executor's to add."""
    env = dict(base_env)
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.update({k: v for k, v in job.env.items() if not k.startswith(drop)})
    set_job_env(env, job, api_url)
    return env


def set_job_env(env: dict[str, str], job: JobLaunch, api_url: str | None) -> None:
    """Set the danlu job environment of DESIGN.md ("Job environment") in ``env``, in place:
    ``DANLU_JOB_ID``, ``DANLU_RESTART_COUNT``, ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (CUDA numbers
    GPUs as NVML does), and the optional ones, removed when the launch has no value for them.
    ``CUDA_VISIBLE_DEVICES`` is the executor's to set."""
    env["DANLU_JOB_ID"] = job.job_id
    env["DANLU_RESTART_COUNT"] = str(job.restart_count)
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    optional = {
        "DANLU_API_URL": api_url,
        "DANLU_TOKEN": job.token,
        "DANLU_CHECKPOINT_DIR": job.checkpoint_dir,
        "DANLU_GPU_MEMORY_LIMIT": job.memory_limit,
        "DANLU_BATCH_SIZE": job.per_gpu_batch,
        "DANLU_GLOBAL_BATCH_SIZE": job.batch_size,
        "DANLU_PRECISION": job.precision,
        "DANLU_GPU_CONTEXT_BYTES": job.gpu_context_bytes,
    }
    for key, value in optional.items():
        if value is not None:
            env[key] = str(value)
        else:
            env.pop(key, None)


class Executor(ABC):
    """Where jobs run. Implementations: :class:`~danlu.executors.fake.FakeExecutor` (tests),
    :class:`~danlu.executors.local.LocalExecutor` (processes on this host)."""

    start_seen_at_poll: bool = False
    """Whether a run is known to have started on its nodes only once a poll sees it running
    (:attr:`ExecStatus.started_at` set), not when :meth:`submit` returns: a Ray actor is
    created on its node after the submit, and may fail to start there
    (:attr:`ExecStatus.start_failed_on`). The control plane starts a node's count of failed
    launches over at the first poll that sees a run there started, then."""

    @abstractmethod
    def inventory(self) -> Cluster:
        """The nodes and GPUs this executor can place jobs on (node/GPU indices of
        :class:`GpuSlot` refer to it)."""

    def refresh_inventory(self) -> Cluster:
        """Read the nodes and GPUs from the backend again; returns the inventory as it is
        now, which :meth:`inventory` returns from then on. The nodes that stay keep their
        order, those that joined follow them (:func:`refreshed_cluster`), and those that
        left are gone: their runs are for the control plane to re-queue. Raises
        :class:`ExecutorUnavailableError` when the backend cannot be asked, or another
        :class:`ExecutorError` when its answer cannot be used; the inventory then stays as
        it was. This default is for executors whose nodes never change (the local host's
        GPUs, a fake cluster)."""
        return self.inventory()

    def closed_nodes(self) -> dict[str, str]:
        """The nodes the backend itself has taken out of service, as read at the last
        :meth:`inventory` or :meth:`refresh_inventory` (name -> why, e.g. Slurm reports a
        node drained): the control plane closes them to new work while they are, and opens
        them again once they are not. This default: none."""
        return {}

    @abstractmethod
    def submit(self, job: JobLaunch) -> Handle:
        """Start one run of ``job`` and return its handle without waiting for it."""

    @abstractmethod
    def poll(self, handle: Handle) -> ExecStatus:
        """The run's current status; never blocks on the job."""

    @abstractmethod
    def preempt(self, handle: Handle, grace_seconds: float) -> None:
        """Ask the run to checkpoint and stop: SIGTERM now, SIGKILL after ``grace_seconds``.
        Returns at once; poll to see it exit. A no-op for a run that already exited."""

    @abstractmethod
    def cancel(self, handle: Handle, grace_seconds: float | None = None) -> None:
        """Stop the run for good: SIGTERM now, SIGKILL after ``grace_seconds`` (the run's own
        grace, its launch's ``preempt_grace``, overrides it, as at :meth:`preempt`: the
        control plane cancelling a job gives it the time to checkpoint that a preemption
        does), or, with None, after the executor's short cancel grace (a run no job owns).
        The stop is recorded as a cancel (:attr:`StopReason.CANCEL`) either way. Returns at
        once; a no-op for a run that already exited."""

    @abstractmethod
    def adopt(self) -> list[Handle]:
        """Re-attach to runs started by an earlier instance (before a control-plane restart):
        the handles of every run not yet :meth:`forget`-ten, still running or exited since."""

    @abstractmethod
    def logs(self, handle: Handle, offset: int = 0, limit: int = 1 << 20) -> tuple[bytes, int]:
        """Up to ``limit`` bytes of the job's log from ``offset``, and the offset to ask next."""

    def log_size(self, handle: Handle) -> int:
        """The bytes the job's log holds now (where a read of its last bytes starts from).
        Default: read through it with :meth:`logs`; executors that can look it up do."""
        size = 0
        while True:
            data, size = self.logs(handle, size)
            if not data:
                return size

    def log_runs(self, handle: Handle) -> list[RunStart]:
        """Where each run of ``handle``'s job (whichever run the attempt is) that the executor
        still knows of began in the job's log, oldest first, to tell the runs apart there.
        Default: none known (an executor whose runs' logs are not one file, or that keeps no
        such record); :class:`UnknownHandleError` as :meth:`logs` raises it."""
        return []

    def forget(self, handle: Handle) -> None:  # noqa: B027 - optional hook, default no-op
        """Drop the executor's record of an exited run (its logs stay). Default: nothing."""

    def discard(self, job_id: str) -> None:  # noqa: B027 - optional hook, default no-op
        """Delete everything kept of the finished job ``job_id``'s runs, its logs included
        (the control plane's retention); nothing when there is none. Raises
        :class:`ExecutorError` while a run of the job still runs. Default: nothing."""

    def close(self) -> None:  # noqa: B027 - optional hook, default no-op
        """Release the executor's own resources; running jobs keep running."""


class MultiNodeExecutor(Executor):
    """Capability: one job may span several hosts (torchrun-style rendezvous)."""

    @abstractmethod
    def max_nodes_per_job(self) -> int:
        """The most nodes one job may span."""


class GpuSharingExecutor(Executor):
    """Capability: several jobs may share one GPU, each told (and, where possible, held to)
    its memory share through ``DANLU_GPU_MEMORY_LIMIT``."""

    @abstractmethod
    def max_jobs_per_gpu(self) -> int:
        """The most jobs that may share one GPU."""


def check_slots(cluster: Cluster, gpus: Sequence[GpuSlot]) -> None:
    """Raise :class:`InvalidLaunchError` unless every slot names a GPU of ``cluster`` once."""
    seen: set[tuple[int, int]] = set()
    for slot in gpus:
        if not 0 <= slot.node < len(cluster.nodes):
            raise InvalidLaunchError("gpus", f"node {slot.node} is not in the executor's cluster")
        if not 0 <= slot.gpu < cluster.nodes[slot.node].gpus:
            raise InvalidLaunchError(
                "gpus", f"GPU {slot.gpu} is not on node {cluster.nodes[slot.node].name}"
            )
        if (slot.node, slot.gpu) in seen:
            raise InvalidLaunchError("gpus", f"GPU {slot.node}/{slot.gpu} is given twice")
        seen.add((slot.node, slot.gpu))
