"""The quota layer's check of a plan: what :class:`~danlu.sched.quota.QuotaPolicy` does
with the plan its inner policy made.

The plan is checked on what each holder holds after it: its shrinks and preemptions free
room, its starts and growths are counted in plan order, and those that would take a holder
past a quota are dropped (:func:`checked`, with the moves they block and the preemptions
made only for them). A policy that sizes jobs may plan growths that together pass a quota:
:func:`tightened` gives the view to ask it again with the holder's sized jobs sharing what
the quota leaves.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import NamedTuple

from danlu.core.cluster import MILLI_PER_GPU, Allocation, Cluster
from danlu.sched.quota_limits import SLACK, Quota, Usage, excess, growth, held, sizeable
from danlu.sched.view import (
    ClusterView,
    JobStatus,
    Plan,
    Preempt,
    Resize,
    Start,
    preempts_for_dropped,
)


class Counted(NamedTuple):
    """What one job with a quota counts: its quotas and its usage (what it holds when
    running, the least its start holds when waiting)."""

    status: JobStatus
    quotas: tuple[Quota, ...]
    usage: Usage
    key: tuple[str, str, float, int]
    """Its project, user and usage: waiting jobs with the same key share one verdict."""
    least: Usage
    """What a running job holds at its least (:func:`~.quota_limits.least_held`); a waiting
    one's usage."""


def checked(
    plan: Plan,
    view: ClusterView,
    counted: Mapping[str, Counted],
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
    counted: Mapping[str, Counted],
    resizes: Sequence[Resize],
    preempts: Sequence[Preempt],
) -> dict[str, Usage]:
    """``used`` less what ``preempts`` and the shrinking parts of ``resizes`` give back, per
    holder (a move that gives up GPUs and takes memory frees the one and grows the other)."""
    out = dict(used)
    given: list[tuple[Counted, Usage]] = []
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
    counted: Mapping[str, Counted],
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


def tightened(
    plan: Plan,
    view: ClusterView,
    counted: Mapping[str, Counted],
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
    :func:`checked` drops."""
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
    left = {h: math.floor(sized[h].gpus * scale[h] + SLACK) for h in over}  # GPUs to share
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
