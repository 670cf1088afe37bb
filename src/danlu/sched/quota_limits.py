"""Quotas as values: what a holder (a project or a user) may hold, what a job holds or
asks for, and the arithmetic between them.

Value types and pure functions that the server and the simulator share (the quota layer
around a policy, :class:`~danlu.sched.quota.QuotaPolicy`, is made of them too). Usage is
what running jobs hold (:func:`held`): GPUs as whole-GPU equivalents (a share of 250
milli-GPU counts 0.25) and GPU memory in bytes (what each share reserves).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from danlu.core.cluster import MILLI_PER_GPU, Allocation, Cluster
from danlu.core.errors import ConfigError
from danlu.sched.policies.danlu_model import LIMIT_KEYS
from danlu.sched.share_size import allowed_sizes, share_milli
from danlu.sched.view import JobRequest, JobStatus

SLACK = 1e-9
"""GPU counts are sums of milli-GPU fractions: a quota of 2 holds 8 shares of 250."""


@dataclass(frozen=True, slots=True)
class Usage:
    """GPUs (whole-GPU equivalents) and GPU bytes held, or asked for."""

    gpus: float = 0.0
    gpu_memory: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.gpus + other.gpus, self.gpu_memory + other.gpu_memory)

    def __sub__(self, other: Usage) -> Usage:
        return Usage(self.gpus - other.gpus, self.gpu_memory - other.gpu_memory)


@dataclass(frozen=True, slots=True)
class Quota:
    """A limit on what one holder's running jobs hold at once (``None``: no limit on it).

    ``holder`` names it in reasons: ``project 'vision'``, ``user 'ana'``."""

    holder: str
    gpus: float | None = None
    gpu_memory: int | None = None

    def __post_init__(self) -> None:
        if self.gpus is not None and not 0 <= self.gpus < math.inf:
            raise ConfigError(
                f"{self.holder}: a GPU quota is a finite number >= 0, not {self.gpus}; "
                "leave it out for no limit"
            )
        if self.gpu_memory is not None and self.gpu_memory < 0:
            raise ConfigError(
                f"{self.holder}: a GPU memory quota is >= 0 bytes, not {self.gpu_memory}; "
                "leave it out for no limit"
            )


def can_bind(quota: Quota, cluster: Cluster) -> bool:
    """Whether the jobs on ``cluster`` could ever hold more than ``quota``: not when it is at
    or above the cluster's GPUs (whole-GPU equivalents) and its GPU memory (a quota that
    cannot bind must leave a run exactly as it is without it)."""
    if quota.gpus is not None and quota.gpus + SLACK < cluster.total_gpus:
        return True
    memory = quota.gpu_memory
    return memory is not None and memory < int(cluster.arrays.gpu_memory.sum())


def excess(quota: Quota, used: Usage, extra: Usage) -> str | None:
    """Why ``extra`` on top of ``used`` would take ``quota``'s holder past it, or None."""
    if quota.gpus is not None and used.gpus + extra.gpus > quota.gpus + SLACK:
        return (
            f"{quota.holder} GPU quota: {used.gpus:g} in use + {extra.gpus:g} asked "
            f"> {quota.gpus:g}"
        )
    if quota.gpu_memory is not None and used.gpu_memory + extra.gpu_memory > quota.gpu_memory:
        return (
            f"{quota.holder} GPU memory quota: {used.gpu_memory} bytes in use + "
            f"{extra.gpu_memory} asked > {quota.gpu_memory}"
        )
    return None


def alone_excess(quota: Quota, least: Usage) -> tuple[str, str] | None:
    """The spec field and the words when ``least`` (the least a job's start holds) alone takes
    ``quota``'s holder past it (the job could never start), or None. What the holder's other
    jobs hold is not counted, and the words say so (``N in use + M asked`` said ``0 in use``
    of a holder holding GPUs)."""
    alone = "by this job alone"
    if quota.gpus is not None and least.gpus > quota.gpus + SLACK:
        said = f"{quota.holder} GPU quota: {least.gpus:g} asked > {quota.gpus:g}, {alone}"
        return "resources.gpus", said
    if quota.gpu_memory is not None and least.gpu_memory > quota.gpu_memory:
        said = (
            f"{quota.holder} GPU memory quota: {least.gpu_memory} bytes asked > "
            f"{quota.gpu_memory}, {alone}"
        )
        return "resources.gpu_memory", said
    return None


def room(quota: Quota, used: Usage, per_gpu_memory: int) -> float:
    """Whole GPUs ``quota`` leaves on top of ``used`` for a job that takes ``per_gpu_memory``
    bytes of each GPU (may be negative; ``inf``: no limit)."""
    out = math.inf
    if quota.gpus is not None:
        out = math.floor(quota.gpus - used.gpus + SLACK)
    if quota.gpu_memory is not None:
        out = min(out, (quota.gpu_memory - used.gpu_memory) // max(per_gpu_memory, 1))
    return out


def held(allocation: Allocation) -> Usage:
    """What ``allocation`` holds, as a quota counts it."""
    memory = sum(share.memory for share in allocation.shares)
    return Usage(allocation.gpu_milli / MILLI_PER_GPU, memory)


def growth(old: Usage, new: Usage) -> Usage:
    """What a move from ``old`` to ``new`` adds, each part at least 0 (a shrink adds none)."""
    return Usage(max(0.0, new.gpus - old.gpus), max(0, new.gpu_memory - old.gpu_memory))


def room_for(quota: Quota, used: Usage, request: JobRequest, cluster: Cluster) -> float:
    """:func:`room` for ``request``: each of its GPUs takes what ``request.memory_on`` the
    cluster's largest GPU."""
    per_gpu = request.memory_on(int(cluster.arrays.gpu_memory.max(initial=1)))
    return room(quota, used, per_gpu)


def minimum_usage(request: JobRequest, cluster: Cluster) -> Usage:
    """The least a start of ``request`` holds on ``cluster``: GPUs and bytes (a whole GPU
    counts its memory, the smallest the request may land on)."""
    sizes = [memory for memory, gpus in allowed_sizes(request, cluster).items() if gpus]
    per_gpu = request.memory_on(min(sizes) if sizes else 0)
    if request.shares_gpu:  # the least compute: on the largest GPU, for a share by memory
        milli = share_milli(request, max(sizes)) if sizes else request.gpu_milli
        return Usage(milli / MILLI_PER_GPU, per_gpu)
    return Usage(float(request.gpus), per_gpu * request.gpus)


def within_quota_sizes(
    status: JobStatus, quotas: Sequence[Quota], used: Mapping[str, Usage], cluster: Cluster
) -> JobStatus:
    """A waiting job with its GPU types cut to those on whose every GPU size its start (its
    least: ``request.gpus``) fits what ``quotas`` leave on top of ``used`` (by holder);
    ``status`` itself when every type it may run on fits, or none does. What a start holds
    depends on the GPU it lands on: a whole GPU all its memory, a share sized by memory
    the compute in proportion (:func:`start_usage`); a policy, which does not see quotas,
    could otherwise place the start on GPUs that the quota refuses every round while
    others would do. (A type whose GPUs come in several sizes, some of which do not fit,
    is left out: the policy sees GPU types, not sizes.)"""
    request = status.request
    if not quotas or (request.gpu_memory and request.shares_gpu and request.gpu_milli < 1000):
        return status  # a share of a fixed milli and memory: the same on every GPU
    wanted = {t.lower() for t in request.gpu_types}
    kinds = [
        (kind, [memory for memory, gpus in sizes.items() if gpus])
        for kind, sizes in cluster.gpus_by_type.items()
        if (not wanted or kind in wanted) and any(sizes.values())
    ]
    fits = [
        cluster.type_spelling[kind]
        for kind, memories in kinds
        if all(
            excess(q, used[q.holder], start_usage(request, memory)) is None
            for memory in memories
            for q in quotas
        )
    ]
    if not fits or len(fits) == len(kinds):
        return status
    return replace(status, request=replace(request, gpu_types=frozenset(fits)))


def start_usage(request: JobRequest, gpu_memory: int) -> Usage:
    """What a start of ``request`` holds on GPUs of ``gpu_memory`` bytes: whole GPUs all
    their memory; a share its milli-GPU as the placement gives it (:func:`share_milli`: a
    share sized by memory the compute in proportion, rounded down) and its memory
    (``memory_on``: a share of a milli-GPU its part, rounded down)."""
    if not request.shares_gpu:
        return Usage(float(request.gpus), gpu_memory * request.gpus)
    milli = share_milli(request, gpu_memory)
    return Usage(milli / MILLI_PER_GPU, request.memory_on(gpu_memory))


def sizeable(status: JobStatus, sizes_jobs: bool) -> bool:
    """Whether a policy that sizes jobs (``sizes_jobs``, :class:`Policy`'s) may run
    ``status``, whose request names one count, on another count: only a job that reports its
    batch limits (every one of :data:`~danlu.sched.policies.danlu_model.LIMIT_KEYS`), as the
    ``danlu``, ``pollux`` and ``optimus`` policies tell it. Those policies run any other job
    (a rigid one) on exactly its requested GPUs."""
    if not sizes_jobs or status.request.max_gpus != 0:
        return False
    observed = status.observed
    return all(observed.get(key, 0.0) > 0 for key in LIMIT_KEYS)


def least_request(request: JobRequest, sized: bool) -> JobRequest:
    """``request`` at the fewest GPUs it may start on. ``sized``: the policy chooses this
    job's GPU count (it sizes jobs, and the job is one it may size: :func:`sizeable`); its
    request, when it names one count, is then a starting point, and the job may start on
    one GPU. A rigid job starts on its request."""
    if sized and request.max_gpus == 0 and request.gpus > 1:
        return replace(request, gpus=1)
    return request


def least_held(status: JobStatus, sized: bool) -> Usage:
    """The least running job ``status`` holds once a policy shrinks it as far as its view
    lets it: an elastic job at the least of its range (``gpus``), a job the policy sizes
    (``sized``: see :func:`sizeable`) on one GPU, any other job what it holds. Whole GPUs
    hold memory in proportion."""
    usage = held(status.allocation)
    count, request = status.allocation.num_gpus, status.request
    fewest = request.gpus if request.elastic else 1 if sized else count
    if count <= fewest:
        return usage
    return Usage(usage.gpus * fewest / count, usage.gpu_memory * fewest // count)


def within_room(status: JobStatus, gpus: float) -> JobStatus:
    """An elastic job's status with its most GPUs cut to the GPUs it holds plus ``gpus``
    (what its quotas leave on top of the usage they count, this job's GPUs included; never
    below its least), so that a policy, which does not see quotas, plans no size that would
    be refused every round; ``status`` itself when that leaves its whole range."""
    request = status.request
    most = status.allocation.num_gpus + max(0, int(min(gpus, request.max_gpus)))
    if most >= request.max_gpus:
        return status
    return replace(status, request=replace(request, max_gpus=max(most, request.gpus)))


@dataclass(frozen=True)
class Quotas:
    """Quotas by project name and by user name (a name missing has none)."""

    projects: Mapping[str, Quota] = field(default_factory=dict)
    users: Mapping[str, Quota] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.projects) or bool(self.users)

    def all(self) -> tuple[Quota, ...]:
        """Every quota: the projects', then the users'."""
        return (*self.projects.values(), *self.users.values())

    def binding(self, cluster: Cluster) -> Quotas:
        """These quotas without those that ``cluster`` cannot pass (:func:`can_bind`);
        ``self`` when every one can."""
        if all(can_bind(q, cluster) for q in self.all()):
            return self
        projects = {name: q for name, q in self.projects.items() if can_bind(q, cluster)}
        users = {name: q for name, q in self.users.items() if can_bind(q, cluster)}
        return Quotas(projects, users)

    def of(self, request: JobRequest) -> tuple[Quota, ...]:
        """The quotas ``request`` counts against: its project's, then its user's."""
        project = self.projects.get(request.project)
        user = self.users.get(request.user) if self.users and request.user else None
        if project is None:
            return () if user is None else (user,)
        return (project,) if user is None else (project, user)

    def never_starts(
        self, request: JobRequest, cluster: Cluster, sized: bool = False
    ) -> str | None:
        """Why ``request`` alone passes one of its quotas (it could never start), or None.
        ``sized``: the policy chooses this job's GPU count (see :func:`least_request`;
        not for a rigid job under a policy that sizes jobs: it runs on its request)."""
        quotas = self.of(request)
        if not quotas:  # every job of a run without quotas: nothing to compute
            return None
        quotas = tuple(q for q in quotas if can_bind(q, cluster))  # else the cluster's rules
        need = minimum_usage(least_request(request, sized), cluster)
        return next((r[1] for q in quotas if (r := alone_excess(q, need))), None)
