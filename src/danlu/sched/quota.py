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
against its project's quota and its user's. A policy never sees a quota: it is handed a
view in which every pending job fits them, and its plan's starts and growths are checked
in plan order, so that several starts of one project in a round cannot pass its quota
together.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from operator import is_not

from danlu.core.cluster import MILLI_PER_GPU, Allocation, Cluster
from danlu.core.errors import ConfigError
from danlu.sched.policies.base import Policy
from danlu.sched.view import ClusterView, JobRequest, JobStatus, Plan, Resize, Start

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


def allowed_sizes(request: JobRequest, cluster: Cluster) -> dict[int, int]:
    """GPU memory -> GPUs of the types ``request`` allows (every type when it names none)."""
    wanted = {t.lower() for t in request.gpu_types}
    out: dict[int, int] = {}
    for kind, sizes in cluster.gpus_by_type.items():
        if not wanted or kind in wanted:
            for memory, gpus in sizes.items():
                out[memory] = out.get(memory, 0) + gpus
    return out


def minimum_usage(request: JobRequest, cluster: Cluster) -> Usage:
    """The least a start of ``request`` holds on ``cluster``: GPUs and bytes (a whole GPU
    counts its memory, the smallest the request may land on)."""
    sizes = [memory for memory, gpus in allowed_sizes(request, cluster).items() if gpus]
    per_gpu = request.gpu_memory or (min(sizes) if sizes else 0)
    if request.shares_gpu:
        if request.gpu_milli < MILLI_PER_GPU or not sizes:
            milli = request.gpu_milli
        else:
            milli = -(-MILLI_PER_GPU * request.gpu_memory // max(sizes))
        return Usage(milli / MILLI_PER_GPU, per_gpu)
    return Usage(float(request.gpus), per_gpu * request.gpus)


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

    def of(self, request: JobRequest) -> tuple[Quota, ...]:
        """The quotas ``request`` counts against: its project's, then its user's."""
        project = self.projects.get(request.project)
        user = self.users.get(request.user) if self.users and request.user else None
        if project is None:
            return () if user is None else (user,)
        return (project,) if user is None else (project, user)

    def never_starts(self, request: JobRequest, cluster: Cluster) -> str | None:
        """Why ``request`` alone passes one of its quotas (it could never start), or None."""
        need = minimum_usage(request, cluster)
        return next((r for q in self.of(request) if (r := excess(q, Usage(), need))), None)


class QuotaPolicy:
    """``inner`` kept within ``quotas``: what the server's snapshot and plan recording do,
    for a caller without a store (the simulator).

    Each round, the pending jobs whose least start would pass a quota on top of what the
    running jobs hold are left out of the view ``inner`` sees (they wait, with the reason),
    elastic ranges are cut to what the quotas leave, and the plan's starts and growths are
    checked in order (a start or resize that would pass a quota is dropped: the job stays
    as it was). Preemptions in the same plan do not make room until the next round, as in
    the server."""

    def __init__(self, inner: Policy, quotas: Quotas) -> None:
        self.inner = inner
        self.quotas = quotas
        self._needs: dict[str, tuple[JobStatus, Usage]] = {}
        """Each pending job's :func:`minimum_usage`, by id, with the status it was computed
        for (callers hand the same status object while a job waits)."""
        self._needs_on: Cluster | None = None
        """The cluster those were computed on."""

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
        used, elastic = _usage(view.running, self.quotas)
        cluster = view.cluster
        withheld: dict[str, str] = {}
        pending: list[JobStatus] = []
        projects, users, of = self.quotas.projects, self.quotas.users, self.quotas.of
        for job in view.pending:
            request = job.request
            if request.project not in projects and request.user not in users:
                pending.append(job)  # most jobs of most workloads: nothing to check
                continue
            quotas = of(request)
            need = self._need(job, cluster)
            why = next((r for q in quotas if (r := excess(q, used[q.holder], need))), None)
            if why is not None:
                withheld[job.id] = f"waiting for quota: {why}"
            else:
                pending.append(self._within(job, quotas, used, cluster))
        if len(self._needs) > 2 * len(view.pending) + 64:  # most of them gone: drop those
            live = {job.id for job in view.pending}
            self._needs = {k: v for k, v in self._needs.items() if k in live}
        running = list(view.running)
        for i in elastic:
            running[i] = self._within(running[i], of(running[i].request), used, cluster)
        if any(map(is_not, running, view.running)):
            view = replace(view, running=tuple(running), pending=tuple(pending))
        elif len(pending) < len(view.pending) or any(map(is_not, pending, view.pending)):
            view = replace(view, pending=tuple(pending))
        plan = self.inner.schedule(view)
        return _checked(plan, view, self.quotas, used, withheld)

    def _need(self, job: JobStatus, cluster: Cluster) -> Usage:
        """:func:`minimum_usage` of ``job``'s request, cached while its status is the same."""
        if self._needs_on is not cluster:
            self._needs.clear()
            self._needs_on = cluster
        hit = self._needs.get(job.id)
        if hit is not None and hit[0] is job:
            return hit[1]
        need = minimum_usage(job.request, cluster)
        self._needs[job.id] = (job, need)
        return need

    @staticmethod
    def _within(
        job: JobStatus, quotas: tuple[Quota, ...], used: Mapping[str, Usage], cluster: Cluster
    ) -> JobStatus:
        if not quotas or not job.request.elastic:
            return job
        request = job.request
        per_gpu = request.gpu_memory or int(cluster.arrays.gpu_memory.max(initial=1))
        return within_room(job, min(room(q, used[q.holder], per_gpu) for q in quotas))


def _usage(running: Iterable[JobStatus], quotas: Quotas) -> tuple[dict[str, Usage], list[int]]:
    """What the running jobs hold, by quota holder (every holder present, from zero), and
    the indices of the elastic ones with a quota (their ranges may need cutting)."""
    out = {q.holder: Usage() for q in (*quotas.projects.values(), *quotas.users.values())}
    elastic: list[int] = []
    projects, users = quotas.projects, quotas.users
    for i, job in enumerate(running):
        request = job.request
        if request.project not in projects and request.user not in users:
            continue
        holds = held(job.allocation)
        for quota in quotas.of(request):
            out[quota.holder] += holds
        if request.elastic:
            elastic.append(i)
    return out, elastic


def _checked(
    plan: Plan,
    view: ClusterView,
    quotas: Quotas,
    used: Mapping[str, Usage],
    withheld: dict[str, str],
) -> Plan:
    """``plan`` without the starts and resizes that would pass a quota, taken in plan order
    (each one's growth counts against the ones after it), and with ``withheld``'s reasons.
    When one is dropped the next round is due at once (``recheck_at`` 0): the GPUs it
    would have taken may go to another project's job then, which this plan left waiting."""
    if not plan.starts and not plan.resizes and not withheld:
        return plan
    moved = {m.job_id for m in plan.starts} | {m.job_id for m in plan.resizes}
    requests = {j.id: j.request for j in (*view.running, *view.pending) if j.id in moved}
    before = {j.id: held(j.allocation) for j in view.running if j.id in moved}
    grown: dict[str, Usage] = {}

    def fits(move: Start | Resize) -> str | None:
        after = held(move.allocation)
        old = before.get(move.job_id, Usage())
        growth = Usage(max(0.0, after.gpus - old.gpus), max(0, after.gpu_memory - old.gpu_memory))
        if growth.gpus <= 0 and growth.gpu_memory <= 0:
            return None
        mine = quotas.of(requests[move.job_id])
        for quota in mine:
            why = excess(quota, used[quota.holder], grown.get(quota.holder, Usage()) + growth)
            if why is not None:
                return why
        for quota in mine:
            grown[quota.holder] = grown.get(quota.holder, Usage()) + growth
        return None

    starts: list[Start] = []
    waiting = {**plan.waiting, **withheld}
    for start in plan.starts:
        why = fits(start)
        if why is None:
            starts.append(start)
        else:
            waiting[start.job_id] = f"waiting for quota: {why}"
    resizes = tuple(r for r in plan.resizes if fits(r) is None)
    dropped = len(starts) < len(plan.starts) or len(resizes) < len(plan.resizes)
    if not withheld and not dropped:
        return plan
    recheck = 0.0 if dropped else plan.recheck_at
    return replace(plan, starts=tuple(starts), resizes=resizes, waiting=waiting, recheck_at=recheck)
