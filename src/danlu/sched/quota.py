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

The value types and their arithmetic live in :mod:`danlu.sched.quota_limits`, the check of
a plan in :mod:`danlu.sched.quota_check`; both are re-exported here (their import path of
old), beside :class:`QuotaPolicy`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from operator import is_not

from danlu.core.cluster import Cluster
from danlu.sched.policies.base import Policy
from danlu.sched.quota_check import Counted, checked, tightened
from danlu.sched.quota_limits import (
    Quota,
    Quotas,
    Usage,
    can_bind,
    excess,
    growth,
    held,
    least_held,
    least_request,
    minimum_usage,
    room,
    room_for,
    sizeable,
    start_usage,
    within_quota_sizes,
    within_room,
)
from danlu.sched.view import ClusterView, JobStatus, Plan

__all__ = [
    "Quota",
    "QuotaPolicy",
    "Quotas",
    "Usage",
    "can_bind",
    "excess",
    "growth",
    "held",
    "least_held",
    "least_request",
    "minimum_usage",
    "room",
    "room_for",
    "sizeable",
    "start_usage",
    "within_quota_sizes",
    "within_room",
]


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
        self._memo: dict[str, Counted] = {}
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
        counted: dict[str, Counted] = {}  # this round's jobs with a quota
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
        tighter = tightened(plan, view, counted, used, sizes_jobs)
        if tighter is not None:  # the plan passes a quota: ask again within shares of it
            view, more = tighter
            withheld = {**withheld, **more}
            plan = self.inner.schedule(view)
        return checked(plan, view, counted, used, withheld)

    def _counted(self, job: JobStatus, cluster: Cluster, running: bool) -> Counted:
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
        entry = Counted(job, self._binding.of(request), usage, key, least)
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
