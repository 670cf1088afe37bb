"""Quotas: the most that the running jobs of one project, or of one user, may hold at once.

Value types and pure functions that the server and the simulator share:

- the server's snapshot (:mod:`danlu.server.services.view`) leaves out a pending job whose
  start would take its project or its user past a quota (it waits, with the reason), cuts an
  elastic job's range to what the quotas leave (:func:`within_room`), and the recorded plan
  is checked again (:mod:`danlu.server.services.record`);
- :class:`QuotaPolicy` does the same around any policy for a caller without a store: the
  simulator (``danlu sim run --quota``), a library user.

Usage is what running jobs hold (:func:`held`): GPUs as whole-GPU equivalents (a share of
250 milli-GPU counts 0.25) and GPU memory in bytes (what each share reserves). A job counts
against its project's quota and its user's. A quota limits its holder's total, not each
job's size: a policy never sees a quota; it is handed a view in which every pending job
fits them and each running job may grow as far as the quota allows while the holder's
other jobs shrink to their least (GPUs may move between the jobs of a project at its
quota), and its plan is checked on what the holder holds after it: the plan's shrinks and
preemptions free room, its starts and growths are counted in plan order, so that several
starts of one project in a round cannot pass its quota together. A quota the cluster
cannot pass (:meth:`Quotas.binding`) changes nothing: the run is the one without it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from operator import is_not
from typing import NamedTuple

from danlu.core.cluster import MILLI_PER_GPU, Allocation, Cluster
from danlu.core.errors import ConfigError
from danlu.sched.policies.base import Policy
from danlu.sched.policies.danlu_model import LIMIT_KEYS
from danlu.sched.share_size import allowed_sizes, share_milli
from danlu.sched.view import (
    ClusterView,
    JobRequest,
    JobStatus,
    Plan,
    Preempt,
    Resize,
    Start,
    preempts_for_dropped,
)

_SLACK = 1e-9
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
    if quota.gpus is not None and quota.gpus + _SLACK < cluster.total_gpus:
        return True
    memory = quota.gpu_memory
    return memory is not None and memory < int(cluster.arrays.gpu_memory.sum())


def excess(quota: Quota, used: Usage, extra: Usage) -> str | None:
    """Why ``extra`` on top of ``used`` would take ``quota``'s holder past it, or None."""
    if quota.gpus is not None and used.gpus + extra.gpus > quota.gpus + _SLACK:
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


def room(quota: Quota, used: Usage, per_gpu_memory: int) -> float:
    """Whole GPUs ``quota`` leaves on top of ``used`` for a job that takes ``per_gpu_memory``
    bytes of each GPU (may be negative; ``inf``: no limit)."""
    out = math.inf
    if quota.gpus is not None:
        out = math.floor(quota.gpus - used.gpus + _SLACK)
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
        return next((r for q in quotas if (r := excess(q, Usage(), need))), None)


class QuotaPolicy:
    """``inner`` kept within ``quotas``: what the server's snapshot and plan recording do,
    for a caller without a store (the simulator).

    Each round, the pending jobs whose least start would pass a quota on top of what the
    running jobs hold are left out of the view ``inner`` sees (they wait, with the reason),
    elastic ranges are cut to what the quotas leave, and the plan's starts and growths are
    checked in order (a start or resize that would pass a quota is dropped: the job stays
    as it was, and a preemption made only for dropped moves is dropped too). Preemptions in
    the same plan make room for the starts and growths of the same plan: the plan is
    checked on what each holder holds after it. A running job's range is cut to what the
    quotas leave when the holder's other running jobs shrink to their least
    (:func:`least_held`), so that GPUs may move between the jobs of a holder at its quota;
    a pending job's to what they leave on top of what is held. Quotas that the cluster
    cannot pass are left out (:meth:`Quotas.binding`): the inner policy's plans are then
    exactly those it makes without them."""

    def __init__(self, inner: Policy, quotas: Quotas) -> None:
        self.inner = inner
        self.quotas = quotas
        self._memo: dict[str, _Counted] = {}
        """What each job with a quota counts, by id, while its status object is the same
        (callers hand the same object while a job waits or runs unchanged)."""
        self._memo_on: Cluster | None = None
        """The cluster the memo was computed on (a waiting job's least use depends on it)."""
        self._binding = quotas
        """``quotas`` without those that ``_memo_on`` cannot pass (:meth:`Quotas.binding`)."""
        self._handed: tuple[tuple[JobStatus, ...], tuple[JobStatus, ...]] = ((), ())
        """The running and pending jobs of the last view handed to ``inner``: the same tuple
        objects are handed again while their jobs are, as adapters do (policies that keep a
        rank order across rounds compare the tuples by identity first)."""

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def sizes_jobs(self) -> bool:
        """Whether ``inner`` chooses jobs' GPU counts (see :class:`Policy`)."""
        return bool(getattr(self.inner, "sizes_jobs", False))

    @property
    def usage_half_life(self) -> float:
        """The half-life of the recent usage ``inner`` reads (0: none)."""
        return float(getattr(self.inner, "usage_half_life", 0.0))

    def schedule(self, view: ClusterView) -> Plan:
        if not self.quotas:
            return self.inner.schedule(view)
        cluster = view.cluster
        if self._memo_on is not cluster:  # another cluster: quotas may bind on it or not
            self._memo.clear()
            self._memo_on = cluster
            self._binding = self.quotas.binding(cluster)
        elif len(self._memo) > 2 * (len(view.running) + len(view.pending)) + 64:
            self._memo.clear()  # most of the jobs gone
        quotas = self._binding
        if not quotas:  # none the cluster could pass: the run is the one without them
            return self.inner.schedule(view)
        sizes_jobs = self.sizes_jobs
        counted: dict[str, _Counted] = {}  # this round's jobs with a quota
        used = {q.holder: Usage() for q in quotas.all()}
        least = dict(used)  # what each holder's running jobs hold at their least
        held_by = _with_quota(view.running, quotas)
        for job in held_by:
            entry = counted[job.id] = self._counted(job, cluster, running=True)
            for quota in entry.quotas:
                used[quota.holder] += entry.usage
                least[quota.holder] += entry.least
        withheld: dict[str, str] = {}
        shown: dict[str, JobStatus] = {}  # jobs handed to ``inner`` cut to their quotas
        reasons: dict[tuple[str, str, float, int], str | None] = {}  # one string each
        for job in _with_quota(view.pending, quotas):
            entry = counted[job.id] = self._counted(job, cluster, running=False)
            if entry.key in reasons:
                why = reasons[entry.key]
            else:
                need = entry.usage
                why = next(
                    (r for q in entry.quotas if (r := excess(q, used[q.holder], need))), None
                )
                reasons[entry.key] = why = None if why is None else f"waiting for quota: {why}"
            if why is not None:
                withheld[job.id] = why
            else:
                cut = _within(job, entry.quotas, used, cluster, sizes_jobs)
                cut = within_quota_sizes(cut, entry.quotas, used, cluster)
                if cut is not job:
                    shown[job.id] = cut
        for job in held_by:
            # what the quotas leave it while the holder's other jobs shrink to their least
            entry = counted[job.id]
            mine = {q.holder: least[q.holder] - entry.least + entry.usage for q in entry.quotas}
            if (cut := _within(job, entry.quotas, mine, cluster, sizes_jobs)) is not job:
                shown[job.id] = cut
        if withheld or shown:
            pending = [shown.get(j.id, j) for j in view.pending if j.id not in withheld]
            running = view.running
            if any(j.running for j in shown.values()):
                running = _again(self._handed[0], [shown.get(j.id, j) for j in running])
            view = replace(view, running=running, pending=_again(self._handed[1], pending))
            self._handed = (view.running, view.pending)
        plan = self.inner.schedule(view)
        tighter = _tightened(plan, view, counted, used, sizes_jobs)
        if tighter is not None:  # the plan passes a quota: ask again within shares of it
            view, more = tighter
            withheld = {**withheld, **more}
            plan = self.inner.schedule(view)
        return _checked(plan, view, counted, used, withheld)

    def _counted(self, job: JobStatus, cluster: Cluster, running: bool) -> _Counted:
        """What ``job``, which has a quota, counts against its quotas, from the memo while
        its status object is the same."""
        hit = self._memo.get(job.id)
        if hit is not None and hit.status is job:
            return hit
        request = job.request
        sized = sizeable(job, self.sizes_jobs)
        if running:
            usage, least = held(job.allocation), least_held(job, sized)
        else:
            usage = least = minimum_usage(least_request(request, sized), cluster)
        key = (request.project, request.user, usage.gpus, usage.gpu_memory)
        entry = _Counted(job, self._binding.of(request), usage, key, least)
        self._memo[job.id] = entry
        return entry


def _with_quota(jobs: Sequence[JobStatus], quotas: Quotas) -> list[JobStatus]:
    """The jobs of ``jobs`` whose project or user has a quota (one list comprehension: in a
    long queue most jobs have none, and a call per job would cost more than the rest)."""
    projects, users = quotas.projects, quotas.users
    return [j for j in jobs if (req := j.request).project in projects or req.user in users]


def _again(last: tuple[JobStatus, ...], jobs: Sequence[JobStatus]) -> tuple[JobStatus, ...]:
    """``last`` when it holds the same status objects as ``jobs``, else ``jobs`` as a tuple."""
    if len(last) == len(jobs) and not any(map(is_not, last, jobs)):
        return last
    return tuple(jobs)


class _Counted(NamedTuple):
    """What one job with a quota counts: its quotas and its usage (what it holds when
    running, the least its start holds when waiting)."""

    status: JobStatus
    quotas: tuple[Quota, ...]
    usage: Usage
    key: tuple[str, str, float, int]
    """Its project, user and usage: waiting jobs with the same key share one verdict."""
    least: Usage
    """What a running job holds at its least (:func:`least_held`); a waiting one's usage."""


def _within(
    job: JobStatus,
    quotas: tuple[Quota, ...],
    used: Mapping[str, Usage],
    cluster: Cluster,
    sizes_jobs: bool,
) -> JobStatus:
    """``job`` with its range of GPU counts cut to what ``quotas`` leave (see
    :func:`within_room`): an elastic job's, or under a policy that sizes jobs
    (``sizes_jobs``) one whose request names one count and that it may size
    (:func:`sizeable`), which such a policy may run on 1 to all the cluster's GPUs: it is
    handed as elastic within what the quotas leave, then. A rigid job is handed as it is
    (it waits while its request passes a quota: it is never cut)."""
    request = job.request
    if not quotas or not (request.elastic or sizeable(job, sizes_jobs)):
        return job
    left = min(room_for(q, used[q.holder], request, cluster) for q in quotas)
    if request.elastic:
        return within_room(job, left)
    most = job.allocation.num_gpus + max(0, int(min(left, cluster.total_gpus)))
    if most >= cluster.total_gpus:
        return job
    most = max(most, 1)
    cut = replace(request, gpus=1, max_gpus=most)
    return replace(job, request=cut)


def _checked(
    plan: Plan,
    view: ClusterView,
    counted: Mapping[str, _Counted],
    used: Mapping[str, Usage],
    withheld: dict[str, str],
) -> Plan:
    """``plan`` without the starts and resizes that would take a holder past a quota after
    the plan, and with ``withheld``'s reasons. ``counted``: the round's jobs with a quota;
    ``used``: what each holder holds before the plan.

    The plan's shrinks and preemptions free room first (:func:`_freed`); its starts and
    growths are then counted in plan order (each one's growth against the ones after it).
    A job whose resize is dropped keeps its GPUs, so the moves onto them are dropped too
    (:func:`_unblocked`), and a job preempted only to make room for dropped moves keeps
    running (:func:`_preempts_for_kept`): the room they would have freed is not free, so
    the check runs again on what is left, until nothing more is dropped. When a move is
    dropped the next round is due at once (``recheck_at`` 0): the GPUs it would have taken
    may go to another project's job then, which this plan left waiting."""
    starts, resizes, preempts = list(plan.starts), list(plan.resizes), plan.preempts
    waiting: dict[str, str] = {}
    while True:
        over = _over_quota(starts, resizes, counted, _freed(used, counted, resizes, preempts))
        if not over:
            break
        waiting.update((k, f"waiting for quota: {why}") for k, why in over.items())
        starts = [s for s in starts if s.job_id not in over]
        resizes = [r for r in resizes if r.job_id not in over]
        starts, resizes, blocked = _unblocked(view, plan, starts, resizes)
        waiting.update(dict.fromkeys(blocked, _BLOCKED))
        preempts = _preempts_for_kept(view, plan, starts, resizes)
    dropped = len(starts) < len(plan.starts) or len(resizes) < len(plan.resizes)
    if not withheld and not dropped:
        return plan
    started = {s.job_id for s in plan.starts}
    return replace(
        plan,
        starts=tuple(starts),
        resizes=tuple(resizes),
        preempts=preempts,
        waiting={**plan.waiting, **withheld, **{k: v for k, v in waiting.items() if k in started}},
        recheck_at=0.0 if dropped else plan.recheck_at,
    )


def _freed(
    used: Mapping[str, Usage],
    counted: Mapping[str, _Counted],
    resizes: Sequence[Resize],
    preempts: Sequence[Preempt],
) -> dict[str, Usage]:
    """``used`` less what ``preempts`` and the shrinking parts of ``resizes`` give back, per
    holder (a move that gives up GPUs and takes memory frees the one and grows the other)."""
    out = dict(used)
    given: list[tuple[_Counted, Usage]] = []
    for preempt in preempts:
        if (entry := counted.get(preempt.job_id)) is not None:
            given.append((entry, entry.usage))
    for resize in resizes:
        if (entry := counted.get(resize.job_id)) is not None:
            given.append((entry, growth(held(resize.allocation), entry.usage)))
    for entry, back in given:
        for quota in entry.quotas:
            out[quota.holder] -= back
    return out


def _over_quota(
    starts: Sequence[Start],
    resizes: Sequence[Resize],
    counted: Mapping[str, _Counted],
    base: Mapping[str, Usage],
) -> dict[str, str]:
    """The ids of the ``starts`` and ``resizes`` (taken in that order) whose growth on top of
    ``base`` and the growths kept before them would pass a quota, each with the reason (what
    is in use counts those growths; what is asked is the move's own)."""
    grown: dict[str, Usage] = {}
    over: dict[str, str] = {}
    moves: list[Start | Resize] = [*starts, *resizes]
    for move in moves:
        entry = counted.get(move.job_id)
        if entry is None:  # no quota
            continue
        old = entry.usage if entry.status.running else Usage()
        more = growth(old, held(move.allocation))
        if more.gpus <= 0 and more.gpu_memory <= 0:
            continue
        why = next(
            (
                r
                for q in entry.quotas
                # in use: what the holder holds with the plan's moves kept before this one
                if (r := excess(q, base[q.holder] + grown.get(q.holder, Usage()), more))
            ),
            None,
        )
        if why is not None:
            over[move.job_id] = why
            continue
        for quota in entry.quotas:
            grown[quota.holder] = grown.get(quota.holder, Usage()) + more
    return over


def _tightened(
    plan: Plan,
    view: ClusterView,
    counted: Mapping[str, _Counted],
    used: Mapping[str, Usage],
    sizes_jobs: bool,
) -> tuple[ClusterView, dict[str, str]] | None:
    """A view for asking the policy again when ``plan`` would take a holder past its quota
    (None when it takes none): the policy sizes jobs without seeing quotas, so it may plan
    growths that together pass one. The jobs of such a holder whose size the policy
    chooses (elastic, or :func:`sizeable`) share what the quota leaves beside its other
    jobs (:func:`_fitted`): each is offered what the plan keeps of it, and the GPUs the
    plan freed go to the jobs it grew; the waiting jobs of such a holder that the plan did
    not start wait (returned with the reason). GPUs thus move between the holder's jobs
    as the plan moved them, within the quota. What the second plan still passes,
    :func:`_checked` drops."""
    after = _freed(used, counted, plan.resizes, plan.preempts)
    sizes: dict[str, Allocation] = {}  # a job with a quota: what the plan leaves it holding
    for job in view.running:
        if job.id in counted:
            sizes[job.id] = job.allocation
    grew: set[str] = set()  # the holders the plan grows
    moves: list[Start | Resize] = [*plan.starts, *plan.resizes]
    for move in moves:
        if (entry := counted.get(move.job_id)) is not None:
            more = growth(entry.usage if entry.status.running else Usage(), held(move.allocation))
            for quota in entry.quotas:
                after[quota.holder] += more
                if more.gpus > 0 or more.gpu_memory > 0:
                    grew.add(quota.holder)
            sizes[move.job_id] = move.allocation
    for preempt in plan.preempts:
        sizes.pop(preempt.job_id, None)
    limits = {q.holder: q for entry in counted.values() for q in entry.quotas}
    over = {h for h in grew if excess(limits[h], after[h], Usage()) is not None}
    if not over:
        return None
    rigid = {h: Usage() for h in over}  # what the holder's other jobs hold after the plan
    sized = {h: Usage() for h in over}
    for job_id, allocation in sizes.items():
        entry = counted[job_id]
        part = sized if _sized(entry.status, sizes_jobs) else rigid
        for quota in entry.quotas:
            if quota.holder in over:
                part[quota.holder] += held(allocation)
    scale = {h: _share(limits[h], rigid[h], sized[h]) for h in over}
    left = {h: math.floor(sized[h].gpus * scale[h] + _SLACK) for h in over}  # GPUs to share
    withheld: dict[str, str] = {}
    shares: dict[str, _Share] = {}
    for order, job in enumerate((*view.running, *view.pending)):
        entry = counted.get(job.id)
        mine = tuple(q.holder for q in entry.quotas if q.holder in over) if entry else ()
        if entry is None or not mine:
            continue
        if job.id not in sizes and not job.running:
            withheld[job.id] = f"waiting for quota: this round's plan fills {', '.join(mine)}"
        elif _sized(entry.status, sizes_jobs):
            planned = sizes[job.id].num_gpus if job.id in sizes else 0
            asked = entry.status.request  # not the view's copy: its range may be cut
            least = asked.gpus if asked.elastic else 1
            # what the plan keeps of it (a running job: no more than it holds)
            kept = min(planned, job.allocation.num_gpus) if job.running else planned
            shares[job.id] = _Share(mine, order, least, planned, max(kept, least))
    caps = _fitted(shares, left)
    shown = {
        j.id: _capped(j, caps[j.id], shares[j.id].least)
        for j in (*view.running, *view.pending)
        if j.id in caps
    }
    pending = tuple(shown.get(j.id, j) for j in view.pending if j.id not in withheld)
    running = tuple(shown.get(j.id, j) for j in view.running)
    return replace(view, running=running, pending=pending), withheld


class _Share(NamedTuple):
    """A sized job of a holder that a plan takes past its quota, as :func:`_fitted` sees it."""

    holders: tuple[str, ...]
    """The holders past their quota that it counts against."""
    order: int
    """Its place in the view (ties go to the earlier job)."""
    least: int
    planned: int
    """The GPUs the plan gave it."""
    kept: int
    """What the plan keeps of what it holds (its start's size, for a waiting job)."""


def _fitted(shares: Mapping[str, _Share], left: dict[str, int]) -> dict[str, int]:
    """The most GPUs to offer each job of ``shares`` so that each holder's jobs hold at most
    ``left`` GPUs (updated): each starts at what the plan keeps of it, so that no job
    restarts for a quota unless needed. Past a holder's share, its largest jobs give up
    one GPU at a time (never below their least); what is left goes one GPU at a time to
    the smallest jobs that the plan grew, up to the size it gave them."""
    caps = {job_id: share.kept for job_id, share in shares.items()}
    for job_id, share in shares.items():
        for holder in share.holders:
            left[holder] -= caps[job_id]
    for holder in sorted(left):
        mine = [j for j, share in shares.items() if holder in share.holders]
        while left[holder] < 0:
            shrinkable = [j for j in mine if caps[j] > shares[j].least]
            if not shrinkable:
                break
            job_id = max(shrinkable, key=lambda j: (caps[j], shares[j].order))
            caps[job_id] -= 1
            for other in shares[job_id].holders:
                left[other] += 1
    while True:
        growable = [
            j
            for j, share in shares.items()
            if caps[j] < share.planned and all(left[h] >= 1 for h in share.holders)
        ]
        if not growable:
            return caps
        job_id = min(growable, key=lambda j: (caps[j], shares[j].order))
        caps[job_id] += 1
        for holder in shares[job_id].holders:
            left[holder] -= 1


def _sized(status: JobStatus, sizes_jobs: bool) -> bool:
    """Whether the policy chooses ``status``'s GPU count: an elastic job's or a
    :func:`sizeable` one's (``status`` as the round found it, before any cut)."""
    return status.request.elastic or sizeable(status, sizes_jobs)


def _share(quota: Quota, rigid: Usage, sized: Usage) -> float:
    """The part (0..1) of what the jobs sized by the policy hold after a plan that they may
    hold within ``quota`` beside what the other jobs hold (``rigid``)."""
    out = 1.0
    if quota.gpus is not None and sized.gpus > 0:
        out = min(out, (quota.gpus - rigid.gpus) / sized.gpus)
    if quota.gpu_memory is not None and sized.gpu_memory > 0:
        out = min(out, (quota.gpu_memory - rigid.gpu_memory) / sized.gpu_memory)
    return max(out, 0.0)


def _capped(status: JobStatus, most: int, least: int) -> JobStatus:
    """``status`` (elastic, or sized by the policy) offered ``least`` to at most ``most``
    GPUs. ``least``: its least as the round found it (elastic: ``gpus``, else 1), not read
    off ``status``, which may be the view's copy with its range cut to one count already (an
    elastic job of 4..8 GPUs cut to 4..4 reads as rigid: offered ``1..most`` it was started
    on fewer GPUs than it asked for)."""
    request = status.request
    most = max(most, least)
    if request.max_gpus and most >= request.max_gpus:
        return status
    return replace(status, request=replace(request, gpus=least, max_gpus=most))


def _preempts_for_kept(
    view: ClusterView, plan: Plan, starts: list[Start], resizes: list[Resize]
) -> tuple[Preempt, ...]:
    """``plan``'s preemptions without those made only for moves that were dropped (not
    among the kept ``starts`` and ``resizes``): :func:`~danlu.sched.view.preempts_for_dropped`,
    the rule the server's plan recording follows for starts that will not happen."""
    kept = {s.job_id for s in starts} | {r.job_id for r in resizes}
    moved = {s.job_id for s in plan.starts} | {r.job_id for r in plan.resizes}
    holds = {job.id: job.allocation for job in view.running}
    idle = preempts_for_dropped(plan, holds, moved - kept)
    return tuple(p for p in plan.preempts if p.job_id not in idle)


_BLOCKED = "waiting: its GPUs stay with a job whose growth a quota stopped"


def _unblocked(
    view: ClusterView, plan: Plan, starts: list[Start], resizes: list[Resize]
) -> tuple[list[Start], list[Resize], list[str]]:
    """The kept ``starts`` and ``resizes`` of ``plan`` without those that would put a job on
    a GPU that is not free once some of the plan's resizes were dropped (those jobs keep
    their GPUs), until none would; and the ids of the pending jobs whose start was dropped.
    (The whole plan fits the view's GPUs once its preempted and draining jobs are gone: only
    a dropped resize can make a move not fit. A move onto a draining job's GPUs waits for
    its exit; counted as taken, such a start was dropped as blocked.)"""
    cluster = view.cluster
    base_milli, base_memory = view.usage()
    capacity = cluster.arrays.gpu_memory
    holds = {job.id: job.allocation for job in view.running}
    gone = dict.fromkeys(p.job_id for p in plan.preempts)
    gone.update(dict.fromkeys(j for j in sorted(view.draining) if j in holds))
    blocked: list[str] = []
    while True:
        changes = [(holds[job_id], -1) for job_id in gone]
        for resize in resizes:
            changes += [(holds[resize.job_id], -1), (resize.allocation, 1)]
        changes += [(start.allocation, 1) for start in starts]
        milli, memory = _changed_usage(cluster, changes)
        over = {
            i
            for i in milli
            if base_milli[i] + milli[i] > MILLI_PER_GPU or base_memory[i] + memory[i] > capacity[i]
        }
        if not over:
            return starts, resizes, blocked
        blocked += [s.job_id for s in starts if _touches(cluster, s.allocation, over)]
        starts = [s for s in starts if not _touches(cluster, s.allocation, over)]
        resizes = [r for r in resizes if not _touches(cluster, r.allocation, over)]


def _changed_usage(
    cluster: Cluster, changes: list[tuple[Allocation, int]]
) -> tuple[dict[int, int], dict[int, int]]:
    """Milli-GPU and memory added (or, with sign -1, taken) on each GPU by ``changes``."""
    milli: dict[int, int] = {}
    memory: dict[int, int] = {}
    for allocation, sign in changes:
        for share in allocation.shares:
            index = cluster.gpu_offset(share.node) + share.gpu
            milli[index] = milli.get(index, 0) + sign * share.milli
            memory[index] = memory.get(index, 0) + sign * share.memory
    return milli, memory


def _touches(cluster: Cluster, allocation: Allocation, gpus: set[int]) -> bool:
    """Whether ``allocation`` has a share on one of ``gpus`` (flat numbering)."""
    return any(cluster.gpu_offset(s.node) + s.gpu in gpus for s in allocation.shares)
