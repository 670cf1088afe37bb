"""What a policy sees (a frozen :class:`ClusterView`) and what it returns (a :class:`Plan`).

Policies are pure functions of the view: no clock, no I/O, no randomness beyond a seed in
their config. The simulator and the server build the same view from their own state (thin
adapters) and apply the same plan.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from danlu.core.cluster import MILLI_PER_GPU, Allocation, Cluster
from danlu.core.errors import ConfigError
from danlu.sched.project_usage import DEFAULT_SHARE, ProjectShare

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class JobRequest:
    """The schedulable facts of one job (derived from its spec; no command, no env)."""

    id: str
    submit_time: float
    gpus: int = 1
    """GPUs needed (the minimum for elastic jobs)."""
    max_gpus: int = 0
    """Most GPUs an elastic job can use; 0 means ``gpus`` (rigid)."""
    priority: int = 0
    gpu_milli: int = MILLI_PER_GPU
    """Share of each GPU in thousandths; below 1000 only for single-GPU shared jobs."""
    gpu_memory: int = 0
    """Bytes needed on each GPU; 0 means the whole GPU's, or a share of a milli-GPU its part
    (:meth:`memory_on`)."""
    gpu_types: frozenset[str] = frozenset()
    """Allowed GPU type names; empty means any."""
    cpu_milli: int = 0
    memory: int = 0
    preemptible: bool = True
    expected_duration: float | None = None
    """The user's (or a model's) estimate of the run time at ``gpus`` GPUs, in seconds."""
    project: str = "default"
    user: str = ""
    """The job's owner (the spec's ``user``); ``fair-share`` with ``users`` shares a
    project's GPUs between its users."""
    seq: int = 0
    """Submission sequence number, increasing in submission order (by ``submit_time``, ties
    broken by arrival): adapters number jobs as they are accepted."""
    batch_size: int | None = None
    """The global batch size the user asked for, when known."""
    family: str = ""
    """The model's family (``training.family``, one of ``danlu.core.spec.MODEL_FAMILIES``)
    for the GPU-sharing interference model; empty when unknown."""
    shares_gpu: bool = field(default=False, init=False, repr=False, compare=False)
    """True when the job asks for part of one GPU (by milli or by memory). Computed once:
    policies ask it of every job in every round."""

    def __post_init__(self) -> None:
        if not math.isfinite(self.submit_time):
            # NaN compares false with every time: sorting the queue by it (value-density's
            # ranks, the waited times of danlu's aging) put jobs in an undefined order
            raise ConfigError(
                f"JobRequest {self.id!r}: submit_time is when the job was submitted, a finite "
                f"number of seconds, got {self.submit_time!r}"
            )
        if self.gpus >= 1 and not 0 < self.gpu_milli <= MILLI_PER_GPU:
            # 0 or less was placed as a share of nothing: any number of such jobs started
            # on one GPU (a negative one with negative memory), none counted as using it
            raise ConfigError(
                f"JobRequest {self.id!r}: gpu_milli is the share of each GPU in thousandths, "
                f"1 to {MILLI_PER_GPU}, got {self.gpu_milli!r}; leave it out for whole GPUs"
            )
        duration = self.expected_duration
        if duration is not None and not duration >= 0:  # NaN too: it compares false
            # NaN read as "1 s left" by value-density (first in line), a negative one as
            # the shortest of all by sjf
            raise ConfigError(
                f"JobRequest {self.id!r}: expected_duration is an estimate in seconds, 0 or "
                f"more, got {duration!r}; leave it out (None) when unknown"
            )
        if self.gpu_memory < 0:
            raise ConfigError(
                f"JobRequest {self.id!r}: gpu_memory is bytes needed on each GPU, 0 or more, "
                f"got {self.gpu_memory!r}; leave it out (0) for the whole GPU's"
            )
        shares = self.gpus <= 1 and (self.gpu_milli < MILLI_PER_GPU or self.gpu_memory > 0)
        object.__setattr__(self, "shares_gpu", shares)

    @property
    def elastic(self) -> bool:
        return self.max_gpus > self.gpus

    def memory_on(self, gpu_memory: int) -> int:
        """The memory the job takes on each GPU of ``gpu_memory`` bytes: its own
        ``gpu_memory``, else a share of a milli-GPU its part in proportion to its compute,
        rounded down (as the placement gives it), else the whole GPU's. The converse, the
        compute a share sized by memory takes, is
        :func:`~danlu.sched.share_size.milli_for_memory`."""
        if self.gpu_memory:
            return self.gpu_memory
        if self.shares_gpu and self.gpu_milli < MILLI_PER_GPU:
            return self.gpu_milli * gpu_memory // MILLI_PER_GPU
        return gpu_memory


@dataclass(frozen=True, slots=True)
class JobStatus:
    """A job's request plus what has happened to it so far."""

    request: JobRequest
    allocation: Allocation = field(default_factory=Allocation)
    """Empty for pending jobs."""
    attained_service: float = 0.0
    """GPU-seconds received before ``last_start`` (for a running job) or in total (pending).
    Use :meth:`attained_at` for the value at a given time."""
    run_time: float = 0.0
    """Seconds run before ``last_start`` (running) or in total (pending).
    See :meth:`run_time_at`."""
    last_start: float | None = None
    """When the current (running) or last run started."""
    progress: float = 0.0
    """Fraction of the work done at the last state change, 0..1, when known."""
    preemptions: int = 0
    restarts: int = 0
    """Restarts after a failure of the job's own (not preemptions or resizes; the simulator
    models no failures, so there it is always 0)."""
    marks: Mapping[str, float] = field(default_factory=dict)
    """Notes a policy attached to this job in earlier rounds (see :attr:`Plan.marks`)."""
    observed: Mapping[str, float] = field(default_factory=dict)
    """What the job itself reports (``danlu.train`` in production, the profile in the
    simulator): its limits (``init_batch``, ``max_batch``, ``min_local_bsz``,
    ``max_local_bsz``, ``target_batch``) and, while it runs, measurements at its current
    placement and batch (``step_time``, ``sync_time``, ``local_bsz``, ``accum_steps``,
    ``batch_size``, ``num_replicas``, ``num_nodes``, ``grad_sqr``, ``grad_var``) and
    ``progress`` (fraction of the work done). Empty when nothing is known."""

    _running: bool = field(default=False, init=False, repr=False, compare=False)
    demand_milli: int = field(default=0, init=False, repr=False, compare=False)
    """Milli-GPU the job holds (running) or asks for (pending), computed once."""
    id: str = field(default="", init=False, repr=False, compare=False)
    """The job's id (its request's), an attribute: policies read it of every job in every
    round."""

    def __post_init__(self) -> None:
        running = bool(self.allocation.shares)
        object.__setattr__(self, "_running", running)
        req = self.request
        object.__setattr__(self, "id", req.id)
        if running:
            demand = self.allocation.gpu_milli
        elif req.shares_gpu:
            demand = req.gpu_milli
        else:
            demand = req.gpus * MILLI_PER_GPU
        object.__setattr__(self, "demand_milli", demand)

    def attained_at(self, now: float) -> float:
        """GPU-seconds of service at ``now`` (running jobs keep accruing)."""
        if self.last_start is not None and self.allocation.shares:
            gpus = self.allocation.gpu_milli / MILLI_PER_GPU
            return self.attained_service + gpus * max(0.0, now - self.last_start)
        return self.attained_service

    def run_time_at(self, now: float) -> float:
        """Seconds run at ``now``."""
        if self.last_start is not None and self.allocation.shares:
            return self.run_time + max(0.0, now - self.last_start)
        return self.run_time

    @property
    def running(self) -> bool:
        return self._running


@dataclass(frozen=True)
class ClusterView:
    """A frozen snapshot: nodes, GPU usage, running and pending jobs, and the time.

    ``used_milli`` / ``used_memory`` are per-GPU arrays in the flat GPU numbering of
    :meth:`Cluster.gpu_offset`; they are derived from the running jobs' allocations when not
    given (adapters that track usage incrementally pass them to save work).
    """

    time: float
    cluster: Cluster
    running: tuple[JobStatus, ...] = ()
    """Jobs that hold GPUs; one handed in with an empty allocation is moved to :attr:`lost`."""
    pending: tuple[JobStatus, ...] = ()
    """Pending jobs in submission order (ascending ``request.seq``): adapters keep them so,
    and order-preserving policies (fifo) rely on it instead of sorting."""
    used_milli: IntArray | None = None
    used_memory: IntArray | None = None
    draining: frozenset[str] = frozenset()
    """Ids of running jobs on their way out (told to stop, checkpointing before they exit):
    they hold their GPUs until then, and are not preemptible. A simulator's preempted jobs
    leave at once, so its views have none."""
    closed_nodes: frozenset[int] = frozenset()
    """Indices of the nodes closed to new work (cordoned by an operator, or after failing
    launches): nothing is started, grown or moved onto their GPUs, and a running job with a
    GPU there is left as it is (the view hands it to policies as not preemptible: its GPUs
    could go to no other job). The simulator's are its failed nodes, out of service until
    repaired (:mod:`danlu.sim.failures`)."""
    closed_gpus: frozenset[int] = frozenset()
    """GPUs closed to new work on their own (flat numbering of :meth:`Cluster.gpu_offset`;
    an operator's per-GPU cordon, or a failed health check), on nodes that may be open:
    the same as a closed node's GPUs, for those GPUs alone."""
    projects: Mapping[str, ProjectShare] = field(default_factory=dict)
    """Projects' weights and recent usage, by name (a project missing has weight 1 and no
    recent usage: :meth:`project`); only fair-share policies read it."""
    lost: tuple[JobStatus, ...] = field(default=(), init=False, compare=False)
    """The jobs handed in ``running`` that hold no GPU (an empty allocation: the server
    drops the shares on GPUs that left its inventory, and re-queues such a job once it
    sees it, ``_requeue_lost``), taken out of :attr:`running`: no policy starts, moves,
    preempts or counts such a job, as if it had already left (before, ``optimus`` and
    ``pollux`` started it again while it was recorded running)."""
    _open: BoolArray | None = field(default=None, init=False, repr=False, compare=False)
    """:meth:`open_gpus`, built once: a round builds several free maps from one view."""

    def __post_init__(self) -> None:
        if not math.isfinite(self.time):
            # NaN or an infinity ranked jobs as NaN (tiresias asked for its next round at
            # -inf, pollux seeded its search with a bare ValueError)
            raise ConfigError(
                f"ClusterView.time: the round's clock must be a finite number of seconds, "
                f"got {self.time!r}"
            )
        _check_jobs(self.running, self.pending)
        _check_allocations(self.cluster, self.running)
        if not all(map(_HOLDS, self.running)):
            lost = tuple(job for job in self.running if not job.running)
            object.__setattr__(self, "lost", lost)
            object.__setattr__(self, "running", tuple(filter(_HOLDS, self.running)))
        for name in ("used_milli", "used_memory"):
            given = getattr(self, name)
            if given is not None and getattr(given, "shape", None) != (self.cluster.total_gpus,):
                # NumPy broadcast a length-1 array over every GPU (each then read as that
                # usage) and met any other length with a bare ValueError in a placement
                raise ConfigError(
                    f"ClusterView.{name}: one entry per GPU of the cluster is needed "
                    f"({self.cluster.total_gpus}, in the flat numbering of "
                    f"Cluster.gpu_offset), got shape {getattr(given, 'shape', type(given))}; "
                    "leave it out to derive it from the running jobs' allocations"
                )
        if self.closed_nodes or self.closed_gpus:
            closed = self.closed_nodes
            arrays = self.cluster.arrays
            _check_indices("closed_nodes", closed, int(arrays.sizes.size), "node")
            _check_indices("closed_gpus", self.closed_gpus, self.cluster.total_gpus, "GPU")
            shut = np.zeros(arrays.sizes.size, dtype=bool)
            shut[sorted(closed)] = True
            opened = ~shut[arrays.gpu_node]
            opened[sorted(self.closed_gpus)] = False
            opened.flags.writeable = False
            object.__setattr__(self, "_open", opened)
            offsets = arrays.offsets

            def on_closed(job: JobStatus) -> bool:
                return any(not opened[int(offsets[s.node]) + s.gpu] for s in job.allocation.shares)

            running = tuple(
                replace(job, request=replace(job.request, preemptible=False))
                if job.request.preemptible and on_closed(job)
                else job
                for job in self.running
            )
            object.__setattr__(self, "running", running)
        if self.used_milli is None or self.used_memory is None:
            milli, memory = usage_from_allocations(
                self.cluster, (j.allocation for j in self.running)
            )
            object.__setattr__(self, "used_milli", milli)
            object.__setattr__(self, "used_memory", memory)
        for array in self.usage():
            array.flags.writeable = False

    def open_gpus(self) -> BoolArray | None:
        """Per GPU (flat numbering), whether new work may go on it (read-only); None when
        no node or GPU is closed (every GPU is open)."""
        return self._open

    def project(self, name: str) -> ProjectShare:
        """The weight and recent usage of project ``name``."""
        return self.projects.get(name, DEFAULT_SHARE)

    def usage(self) -> tuple[IntArray, IntArray]:
        """Per-GPU used milli-GPU and used memory (read-only arrays)."""
        assert self.used_milli is not None and self.used_memory is not None
        return self.used_milli, self.used_memory


_ID = operator.attrgetter("id")
_HOLDS = operator.attrgetter("_running")


def _check_jobs(running: Sequence[JobStatus], pending: Sequence[JobStatus]) -> None:
    """Refuse a job id listed twice (twice pending, or running and pending: every policy
    started it twice, or started a job that was running) and a pending job that holds an
    allocation (the view's usage leaves it out, so policies started it on other GPUs or,
    ``danlu``, planned a resize of a job that was not running)."""
    ids = set(map(_ID, running))
    ids.update(map(_ID, pending))
    if len(ids) < len(running) + len(pending):
        seen: dict[str, str] = {}
        for where, jobs in (("running", running), ("pending", pending)):
            for job in jobs:
                first = seen.get(job.id)
                if first is not None:
                    places = f"twice in {where}" if first == where else f"in {first} and {where}"
                    raise ConfigError(
                        f"ClusterView: job {job.id!r} is listed {places}; list each job "
                        "once: in running while it holds GPUs, else in pending"
                    )
                seen[job.id] = where
    if any(map(_HOLDS, pending)):
        job = next(j for j in pending if j.running)
        raise ConfigError(
            f"ClusterView.pending: job {job.id!r} holds an allocation "
            f"({_gpus_named(job.allocation)}); a pending job holds no GPUs: list it in "
            "running, or give it an empty Allocation"
        )


def _check_allocations(cluster: Cluster, running: Iterable[JobStatus]) -> None:
    """Refuse a running job's share on a node or GPU index the cluster does not have: GPUs
    are counted in the flat numbering of :meth:`Cluster.gpu_offset`, so GPU 4 of a 4-GPU
    node was counted as GPU 0 of the next node (and node -1 as the last node)."""
    sizes: list[int] = cluster.arrays.sizes.tolist()
    for job in running:
        for share in job.allocation.shares:
            node, gpu = share.node, share.gpu
            # plain ints in range: the fast path (a NumPy integer takes the slow one)
            if (
                type(node) is int
                and type(gpu) is int
                and 0 <= node < len(sizes)
                and 0 <= gpu < sizes[node]
            ):
                continue
            _check_share(cluster, sizes, job.id, node, gpu)


def _check_share(cluster: Cluster, sizes: list[int], job_id: str, node: int, gpu: int) -> None:
    """:func:`_check_allocations` for one share off its fast path (an index that is no
    plain ``int``, or one out of range): refuse it unless both are whole numbers in range
    (the annotations say ``int``; an adapter may hand a float or a bool all the same)."""
    at = operator.index(node) if _whole(node) else -1
    if not 0 <= at < len(sizes):
        raise ConfigError(
            f"ClusterView.running: job {job_id!r} holds GPU {gpu!r} of node {node!r}, which "
            f"is not a node index of this cluster; give nodes by their index, 0 to "
            f"{len(sizes) - 1}"
        )
    count = sizes[at]
    if not _whole(gpu) or not 0 <= operator.index(gpu) < count:
        has = f"GPUs 0 to {count - 1}" if count else "no GPUs"
        raise ConfigError(
            f"ClusterView.running: job {job_id!r} holds GPU {gpu!r} of node {at} "
            f"({cluster.nodes[at].name!r}), which has {has}; give each share the GPU's "
            "index on its own node"
        )


def _whole(index: object) -> bool:
    """Whether ``index`` is a whole number (NumPy's too), not a bool."""
    return isinstance(index, int | np.integer) and not isinstance(index, bool)


def _gpus_named(allocation: Allocation) -> str:
    """``allocation``'s GPUs as ``node:gpu``, for a message."""
    return ", ".join(f"{s.node}:{s.gpu}" for s in allocation.shares)


def _check_indices(name: str, indices: Iterable[object], count: int, what: str) -> None:
    """Refuse an index of ``indices`` that is no whole number in ``0..count-1``: NumPy read
    a negative one from the end (``closed_nodes={-1}`` closed the last node) and one past the
    end raised a bare IndexError."""
    for index in indices:
        if not _whole(index) or not 0 <= index < count:  # type: ignore[operator]
            raise ConfigError(
                f"ClusterView.{name}: {index!r} is not a {what} index of this cluster; "
                f"give {what}s by their index, 0 to {count - 1}"
            )


def usage_from_allocations(
    cluster: Cluster, allocations: Iterable[Allocation]
) -> tuple[IntArray, IntArray]:
    """Per-GPU used milli-GPU and memory from an iterable of :class:`Allocation`."""
    total = cluster.total_gpus
    milli = np.zeros(total, dtype=np.int64)
    memory = np.zeros(total, dtype=np.int64)
    for alloc in allocations:
        for share in alloc.shares:
            index = cluster.gpu_offset(share.node) + share.gpu
            milli[index] += share.milli
            memory[index] += share.memory
    return milli, memory


@dataclass(frozen=True, slots=True)
class Start:
    """Start a pending job on ``allocation`` (with an optional batch size choice).

    ``adaptive``: the job may re-pick its global batch in-process between rounds (the
    goodput-optimal batch for this allocation, from its own measurements; only jobs that
    report ``observed["adaptive"]`` do), starting from ``batch_size``. ``reason``: why the
    policy put it there, for the job's event log (empty: just "scheduled")."""

    job_id: str
    allocation: Allocation
    batch_size: int | None = None
    adaptive: bool = False
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Preempt:
    """Stop a running job by checkpoint and re-queue it."""

    job_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class Resize:
    """Move a running job to a new allocation (and batch size): costs a restart.
    ``adaptive`` as in :class:`Start`. A change of batch size alone is a :class:`Rebatch`."""

    job_id: str
    allocation: Allocation
    batch_size: int | None = None
    adaptive: bool = False


@dataclass(frozen=True, slots=True)
class Rebatch:
    """Change a running job's global batch size in place: it keeps its allocation and its
    process, and applies the new batch at its next step boundary (``danlu.train``'s
    ``BatchController.set_global``: the micro-batch stays, accumulation follows). No
    restart, no checkpoint. ``adaptive`` as in :class:`Start`.

    The server records it as the job's batch size (``Job.batch_size``, the attempt is
    unchanged and nothing is relaunched) and hands it to the running job in the reply to
    its next metrics report; the simulator applies it at once at no restart cost."""

    job_id: str
    batch_size: int
    adaptive: bool = False


@dataclass(frozen=True)
class Plan:
    """A policy's decision for one round. ``waiting`` says why each unstarted job waits."""

    starts: tuple[Start, ...] = ()
    preempts: tuple[Preempt, ...] = ()
    resizes: tuple[Resize, ...] = ()
    rebatches: tuple[Rebatch, ...] = ()
    """Batch-only changes of running jobs (no restart); a job is in at most one of
    ``preempts``, ``resizes`` and ``rebatches``."""
    waiting: dict[str, str] = field(default_factory=dict)
    waiting_default: str = ""
    """Why every pending job that is neither started nor listed in ``waiting`` waits (one
    shared reason keeps a round O(jobs considered), not O(queue))."""
    recheck_at: float = 0.0
    """The earliest time at which this decision could change if no job arrives, finishes or
    is cancelled: callers may skip rounds before it. 0 (the default) asks for every round;
    ``math.inf`` means only a change of jobs can change the plan."""
    marks: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per-job notes to remember across rounds (e.g. when Tiresias demoted a job). The
    caller adds them to the job's marks (the keys given replace their old values; the
    others stay) and hands them back in :attr:`JobStatus.marks`, so policies stay pure
    functions of the view while keeping the state their algorithm needs."""

    @property
    def has_waiting(self) -> bool:
        """Whether some pending job was left waiting."""
        return bool(self.waiting) or bool(self.waiting_default)

    def reason(self, job_id: str) -> str | None:
        """Why ``job_id`` waits after this plan: None when the plan starts it (or says
        nothing of it)."""
        if job_id in self.waiting:
            return self.waiting[job_id]
        if any(s.job_id == job_id for s in self.starts):
            return None
        return self.waiting_default or None


def preempts_for_dropped(
    plan: Plan, holds: Mapping[str, Allocation], dropped: set[str]
) -> dict[str, list[str]]:
    """The running jobs ``plan`` preempts only to free GPUs for moves (starts or resizes)
    that will not be made (``dropped``, by job id), each with those moves' ids, sorted: its
    GPUs (``holds``, by job id) are taken by some move of the plan, and by none that stays.
    Stopping such a job would leave its GPUs idle until the next round. A preemption whose
    GPUs no move takes (the policy's own reason) is not among them, nor one whose GPUs a
    move that stays takes. Used where moves of a plan are dropped after it was made: quotas
    (:class:`~danlu.sched.quota.QuotaPolicy`) and the server's recording of a plan."""
    if not plan.preempts or not dropped:
        return {}
    takers: dict[tuple[int, int], set[str]] = {}  # a GPU: the moves of the plan placed on it
    moves = [*((s.job_id, s.allocation) for s in plan.starts)]
    moves += [(r.job_id, r.allocation) for r in plan.resizes]
    for job_id, allocation in moves:
        for share in allocation.shares:
            takers.setdefault((share.node, share.gpu), set()).add(job_id)
    idle: dict[str, list[str]] = {}
    for preempt in plan.preempts:
        held = holds.get(preempt.job_id)
        shares = held.shares if held is not None else ()
        wanted: set[str] = set().union(*(takers.get((s.node, s.gpu), set()) for s in shares))
        if wanted and wanted <= dropped:
            idle[preempt.job_id] = sorted(wanted)
    return idle
