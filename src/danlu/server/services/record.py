"""Recording a scheduling plan in the store (:func:`apply_plan`): preempts, moves, starts,
rebatches, waiting reasons and policy marks, in the caller's transaction, checked GPU by GPU
against what the holding jobs hold (compute and memory) and against project and user quotas.

A plan comes from a policy that sees GPUs free as soon as a job is preempted or moved (as
the simulator does). In the store a preempted job holds its GPUs until it has
checkpointed and exited, so what the plan puts there waits (``Applied.deferred``, with the
reason), and a move that waits keeps its job's GPUs, which may hold up more of the plan.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from sqlalchemy import Select, or_, select, tuple_, union_all, update
from sqlalchemy.orm import Session, defer, lazyload

from danlu.core.cluster import MILLI_PER_GPU, Allocation, Cluster
from danlu.core.errors import PlacementError
from danlu.core.state import JobState
from danlu.sched.quota import Usage, growth
from danlu.sched.quota import held as held_usage
from danlu.sched.view import (
    BoolArray,
    ClusterView,
    IntArray,
    Plan,
    Resize,
    preempts_for_dropped,
)
from danlu.server.db.models import REASON_PREFIX, REASON_PREFIX_LENGTH, Job, Project
from danlu.server.services import jobs, user_quotas, users
from danlu.server.services.bulk import EventBatch, WaitingReasons
from danlu.server.services.cluster import load_cluster
from danlu.server.services.common import resolve_now
from danlu.server.services.outdated import (
    CHANGED,
    changed_rows,
    gone_starts,
    not_due,
    resizes_not_made,
)
from danlu.server.services.projects import (
    HOLDING,
    allocation_usage,
    quota_excess,
    with_quota,
)
from danlu.server.services.user_quotas import UserQuota
from danlu.server.services.view import HELD_DRAIN, Snapshot, to_allocation, to_records

log = logging.getLogger(__name__)


@dataclass
class Applied:
    """What :func:`apply_plan` recorded: the reconcile loop acts on ``started`` (spawn),
    ``preempted`` (SIGTERM, checkpoint) and ``resized`` (restart on the new allocation);
    ``rebatched`` jobs only got a new batch size recorded (nothing to stop or launch)."""

    started: list[Job] = field(default_factory=list)
    preempted: list[Job] = field(default_factory=list)
    resized: list[Job] = field(default_factory=list)
    rebatched: list[Job] = field(default_factory=list)
    deferred: dict[str, str] = field(default_factory=dict)
    """Starts or resizes not recorded this round, with the reason (the job stays as it was)."""
    skipped: dict[str, str] = field(default_factory=dict)
    """Plan entries about jobs that changed since the view was built (e.g. cancelled, or
    given new resources: the policy chose for what they were)."""


def _over_quota(
    project: Project,
    used: Mapping[int, Usage],
    grown: dict[int, Usage],
    old: Allocation,
    resize: Resize,
) -> tuple[str | None, dict[int, Usage]]:
    """Why moving a job of ``project`` from ``old`` to ``resize.allocation`` would exceed
    its quota, on top of its usage and what the round's moves before it grew by (``grown``,
    by project), or None with ``grown`` updated."""
    more = growth(held_usage(old), held_usage(resize.allocation))
    if more.gpus <= 0 and more.gpu_memory <= 0:
        return None, grown
    total = grown.get(project.id, Usage()) + more
    reason = quota_excess(project, used.get(project.id, Usage()), total)
    if reason is None:
        grown[project.id] = total
    return reason, grown


def _over_user_quota(
    quota: UserQuota,
    used: Mapping[int, float],
    grown: dict[int, float],
    old: Allocation,
    resize: Resize,
) -> str | None:
    """Why moving a job of ``quota``'s user from ``old`` to ``resize.allocation`` would take
    the user past its quota, on top of its usage and what the round's moves before it grew
    by (``grown``, by user: updated when the move fits), or None."""
    more = growth(held_usage(old), held_usage(resize.allocation)).gpus
    if more <= 0:
        return None
    total = grown.get(quota.id, 0.0) + more
    reason = user_quotas.excess(quota, used.get(quota.id, 0.0), total)
    if reason is None:
        grown[quota.id] = total
    return reason


class _Usage:
    """Per-GPU milli and memory held, checked against the GPUs' capacity."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        size = cluster.total_gpus
        self.milli: IntArray = np.zeros(size, dtype=np.int64)
        self.memory: IntArray = np.zeros(size, dtype=np.int64)
        self.capacity = cluster.arrays.gpu_memory

    def _indices(self, alloc: Allocation) -> list[int]:
        return [self.cluster.gpu_offset(s.node) + s.gpu for s in alloc.shares]

    def add_records(self, held: Iterable[Iterable[Mapping[str, Any]] | None]) -> list[list[int]]:
        """Add stored allocations (node names) without building :class:`Allocation` objects
        (the round reads every holding job's) in one numpy update; shares on nodes or GPUs
        no longer in the inventory are skipped, as :func:`to_allocation` drops them. Returns
        each allocation's flat GPU indices."""
        index, nodes, offset = self.cluster.node_index, self.cluster.nodes, self.cluster.gpu_offset
        flat: list[int] = []
        milli: list[int] = []
        memory: list[int] = []
        out: list[list[int]] = []
        for records in held:
            mine = []
            for share in records or ():
                node = index.get(share["node"])
                gpu = int(share["gpu"])
                if node is None or not 0 <= gpu < nodes[node].gpus:
                    continue
                i = offset(node) + gpu
                mine.append(i)
                milli.append(int(share["milli"]))
                memory.append(int(share["memory"]))
            flat.extend(mine)
            out.append(mine)
        np.add.at(self.milli, np.asarray(flat, dtype=np.int64), np.asarray(milli, dtype=np.int64))
        np.add.at(self.memory, np.asarray(flat, dtype=np.int64), np.asarray(memory, dtype=np.int64))
        return out

    def add(self, alloc: Allocation, sign: int = 1) -> None:
        for i, s in zip(self._indices(alloc), alloc.shares, strict=True):
            self.milli[i] += sign * s.milli
            self.memory[i] += sign * s.memory

    def overflow(self, alloc: Allocation, other: _Usage | None = None) -> list[int]:
        """Flat GPU indices that ``alloc`` on top of this usage (and ``other``) overfills."""
        bad = []
        for i, s in zip(self._indices(alloc), alloc.shares, strict=True):
            milli = self.milli[i] + s.milli + (other.milli[i] if other else 0)
            memory = self.memory[i] + s.memory + (other.memory[i] if other else 0)
            if milli > MILLI_PER_GPU or memory > self.capacity[i]:
                bad.append(i)
        return bad


def _by_id(session: Session, ids: Iterable[str]) -> dict[str, Job]:
    """The rows of the jobs ``ids`` that a plan changes, without their user and project and
    with their spec deferred (loaded on first access): recording the plan needs neither, and
    at ~3,000 jobs (a round that reshuffles 1,000 nodes) joining and decoding them was a
    fifth of the recording. As stored now: a row the session already holds (the snapshot
    loaded it) is read again, so that what another transaction committed since (PostgreSQL)
    is seen, not found only when the write of a start over it fails the round."""
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    query = (
        select(Job)
        .options(lazyload(Job.project), lazyload(Job.user), defer(Job.spec))
        .where(Job.id.in_(wanted))
        .execution_options(populate_existing=True)
    )
    return {j.id: j for j in session.scalars(query)}


@dataclass
class _Held:
    """What the holding jobs hold when a plan is recorded: per GPU, the RUNNING jobs'
    (``committed``) and the PREEMPTING ones' (``draining``, with their ids per GPU in
    ``owners``), and per project (``used``; the projects with a quota at least) and per user
    (``user_used``)."""

    committed: _Usage
    draining: _Usage
    owners: dict[int, list[str]]
    used: dict[int, Usage]
    user_used: dict[int, float] = field(default_factory=dict)
    """GPUs held per user (by id; the users with a quota at least)."""


def _read_held(session: Session, cluster: Cluster) -> _Held:
    """:class:`_Held` read from the store (every holding job's stored allocation)."""
    holding = session.execute(
        select(Job.id, Job.state, Job.project_id, Job.user_id, Job.allocation).where(
            Job.state.in_(HOLDING)
        )
    )
    held = _Held(_Usage(cluster), _Usage(cluster), {}, {})
    staying: list[list[dict[str, Any]] | None] = []
    leaving: list[tuple[str, list[dict[str, Any]] | None]] = []
    for held_id, held_state, project_id, user_id, held_allocation in holding:
        holds = allocation_usage(held_allocation)
        held.used[project_id] = held.used.get(project_id, Usage()) + holds
        held.user_used[user_id] = held.user_used.get(user_id, 0.0) + holds.gpus
        if held_state == JobState.PREEMPTING.value:
            leaving.append((held_id, held_allocation))
        else:
            staying.append(held_allocation)
    held.committed.add_records(staying)
    for (held_id, _), flat in zip(
        leaving, held.draining.add_records(a for _, a in leaving), strict=True
    ):
        for i in flat:
            held.owners.setdefault(i, []).append(held_id)
    return held


def _closed_places(view: ClusterView, alloc: Allocation, opened: BoolArray) -> str:
    """Where ``alloc`` lies on GPUs closed to new work (``opened``: the view's
    :meth:`~danlu.sched.view.ClusterView.open_gpus`), as ``a`` for a closed node and ``a GPU
    2`` for a GPU closed on its own; empty when nowhere."""
    cluster = view.cluster
    places: list[str] = []
    for node, gpu in sorted({(s.node, s.gpu) for s in alloc.shares}):
        if opened[cluster.gpu_offset(node) + gpu]:
            continue
        name = cluster.nodes[node].name
        place = name if node in view.closed_nodes else f"{name} GPU {gpu}"
        if place not in places:
            places.append(place)
    return ", ".join(places)


def reason_differs(reason: str) -> Select[int, int]:
    """The key and version of the pending jobs whose ``pending_reason`` is not ``reason``.
    For a reason shorter than the indexed prefix (the policies' shared reasons are) they are
    those whose prefix is null, below or above it: three ranges of
    ``ix_jobs_state_reason_prefix``, so only the jobs that differ are read; a longer one is
    compared row by row."""
    pending = Job.state == JobState.PENDING.value
    if len(reason) >= REASON_PREFIX_LENGTH:
        differs = or_(Job.pending_reason.is_(None), Job.pending_reason != reason)
        return select(Job.seq, Job.version).where(pending, differs)
    prefix = REASON_PREFIX
    ranges = union_all(
        *(
            select(Job.seq, Job.version).where(pending, condition)
            for condition in (prefix.is_(None), prefix < reason, prefix > reason)
        )
    ).subquery()
    return select(ranges.c.seq, ranges.c.version)


def _snapshot_held(snapshot: Snapshot) -> _Held:
    """:class:`_Held` from the snapshot the plan was made from (no reading): its view's
    per-GPU usage less what its PREEMPTING jobs hold, and its per-project and per-user
    usage."""
    view = snapshot.view
    cluster = view.cluster
    held = _Held(
        _Usage(cluster),
        _Usage(cluster),
        {},
        dict(snapshot.project_usage),
        dict(snapshot.user_usage),
    )
    milli, memory = view.usage()
    held.committed.milli += milli
    held.committed.memory += memory
    preempting = snapshot.preempting
    for status in view.running:
        if status.id in preempting:
            held.committed.add(status.allocation, -1)
            held.draining.add(status.allocation)
            for i in held.draining._indices(status.allocation):
                held.owners.setdefault(i, []).append(status.id)
    return held


def _waiting_for(names: list[str], movers: set[str]) -> str:
    """Why a placement waits: the jobs holding its GPUs, preempted ones (still checkpointing)
    or ones whose own move waits."""
    preempted = [n for n in names if n not in movers]
    moving = [n for n in names if n in movers]
    parts = []
    if preempted:
        parts.append(f"preempted job(s) {', '.join(preempted)} to checkpoint and exit")
    if moving:
        parts.append(f"job(s) {', '.join(moving)} to move off (their move waits too)")
    return "waiting for " + " and for ".join(parts)


@dataclass
class _Quotas:
    """The quotas a plan's moves are checked against, and what their holders hold."""

    projects: Mapping[int, Project]
    limited: set[int]
    """The ids of the projects with a quota."""
    users: Mapping[int, UserQuota]
    """The users with a quota, by id."""
    used: Mapping[int, Usage]
    user_used: Mapping[int, float]

    def counts(self, job: Job) -> bool:
        """Whether ``job`` counts against a quota (its project's or its user's)."""
        return job.project_id in self.limited or job.user_id in self.users

    def refusal(
        self, job: Job, base: Mapping[int, Usage], users: Mapping[int, float], more: Usage
    ) -> str | None:
        """Why ``more`` on top of ``base`` (by project) and ``users`` (GPUs by user) takes
        ``job``'s project or user past a quota, or None."""
        if job.project_id in self.limited:
            on = base.get(job.project_id, Usage())
            if (reason := quota_excess(self.projects[job.project_id], on, more)) is not None:
                return reason
        if job.user_id in self.users:
            mine = users.get(job.user_id, 0.0)
            return user_quotas.excess(self.users[job.user_id], mine, more.gpus)
        return None


def _checked_first(
    plan: Plan, rows: Mapping[str, Job], cluster: Cluster, gone: set[str], quotas: _Quotas
) -> tuple[dict[str, str], dict[str, list[str]]]:
    """The quota checks of ``plan``'s starts and growths, made before its preemptions are
    applied: the starts and resizes that would take a project or a user past its quota,
    each with the reason, and the running jobs preempted only to make room for moves that
    will not be made (those refused, or ``gone``), each with those moves' ids
    (:func:`~danlu.sched.view.preempts_for_dropped`): those are left running.

    As the simulator's quota layer checks a plan (:class:`~danlu.sched.quota.QuotaPolicy`):
    the kept preemptions and the shrinking parts of the kept resizes free room first, then
    the starts and growths are counted in plan order (starts, then resizes), each on top of
    those kept before it; a victim left running frees nothing, so the check runs again
    until nothing more is refused. A move that passes may still wait when it is placed
    (its GPUs, or its quota's room, still held by a job checkpointing)."""
    holds = {  # the victims' GPUs, as preempts_for_dropped reads them
        p.job_id: to_allocation(job.allocation, cluster)
        for p in plan.preempts
        if (job := rows.get(p.job_id)) is not None and job.state == JobState.RUNNING.value
    }
    # each start or resize with a quota: its job, what it holds now, what it would hold
    moves: list[tuple[Job, Usage, Usage]] = []
    for start in plan.starts:
        if start.job_id not in gone and quotas.counts(starting := rows[start.job_id]):
            moves.append((starting, Usage(), held_usage(start.allocation)))
    for resize in plan.resizes:
        mover = rows.get(resize.job_id)
        if mover is None or mover.id in gone:  # a resize not made counts nothing
            continue
        if mover.state == JobState.RUNNING.value and quotas.counts(mover):
            now_held = allocation_usage(mover.allocation)
            moves.append((mover, now_held, held_usage(resize.allocation)))
    refused: dict[str, str] = {}
    while True:
        idle = preempts_for_dropped(plan, holds, gone | refused.keys())
        if not moves:
            return refused, idle
        base, users = dict(quotas.used), dict(quotas.user_used)  # less what the plan frees
        freed = [
            (rows[job_id], allocation_usage(rows[job_id].allocation))
            for job_id in holds
            if job_id not in idle
        ]
        freed += [(job, growth(new, old)) for job, old, new in moves if job.id not in refused]
        for job, back in freed:
            base[job.project_id] = base.get(job.project_id, Usage()) - back
            users[job.user_id] = users.get(job.user_id, 0.0) - back.gpus
        over: dict[str, str] = {}
        for job, old, new in moves:
            more = growth(old, new)
            if job.id in refused or (more.gpus <= 0 and more.gpu_memory <= 0):
                continue
            if (reason := quotas.refusal(job, base, users, more)) is not None:
                over[job.id] = reason
                continue
            base[job.project_id] = base.get(job.project_id, Usage()) + more
            users[job.user_id] = users.get(job.user_id, 0.0) + more.gpus
        if not over:
            return refused, idle
        refused.update(over)


def apply_plan(
    session: Session,
    plan: Plan,
    now: float | None = None,
    withheld: Mapping[str, str] | None = None,
    snapshot: Snapshot | None = None,
) -> Applied:
    """Record ``plan`` in the caller's transaction: preempts (RUNNING -> PREEMPTING), resizes
    and starts (PENDING -> RUNNING with the allocation), rebatches (the running job's batch
    size only: same attempt, nothing relaunched), waiting reasons and policy marks (added to
    the job's: only the keys given change, as in the simulator).

    ``snapshot``: the snapshot ``plan`` was made from, built in this transaction. Its
    inventory and usage are used instead of being read again (~45 ms a round at 1,000 nodes
    and 2,000 running jobs). They cannot have grown since: only the reconcile loop's
    ``apply_plan`` adds allocations, and other writers only release them. So the checks
    below are at least as strict as on a fresh read. A start, move or batch change of a job
    whose row changed since the snapshot read it (its ``version``: new resources, a hold, a
    cancel) is not made (``Applied.skipped``: :func:`~.outdated.changed_rows`), nor a move
    that gives a job of a disabled owner more GPUs (``Applied.deferred``): each job stays
    as it was.

    The quotas are checked before the preemptions are applied (:func:`_checked_first`): a
    start or growth that a quota refuses waits with the quota's reason, and a job preempted
    only to make room for such moves keeps running (``Applied.skipped``, with the reason).
    A placement (start or move) onto GPUs that a job preempted now or before still holds
    waits (``Applied.deferred``, with the reason), and so does one onto the GPUs of a job
    whose own move waits. Raises :class:`PlacementError` (the caller rolls back) when the
    plan would over-allocate a GPU beyond its compute or memory, places a job on a node the
    snapshot has closed to new work, or preempts a non-preemptible job."""
    t = resolve_now(now)
    if snapshot is not None:
        cluster = snapshot.view.cluster
        held = _snapshot_held(snapshot)
    else:
        cluster = load_cluster(session)
        held = _read_held(session, cluster)
    committed, draining, owners, used = held.committed, held.draining, held.owners, held.used
    user_used = held.user_used
    out = Applied()
    events = EventBatch()
    reasons = WaitingReasons()
    touched = [p.job_id for p in plan.preempts] + [r.job_id for r in plan.resizes]
    touched += [b.job_id for b in plan.rebatches]
    rows = _by_id(
        session,
        [*touched, *(s.job_id for s in plan.starts), *plan.waiting, *plan.marks, *(withheld or {})],
    )
    plan = _without_released(plan, rows, out)
    # compared before any row changes: the round's own writes bump versions too
    changed = changed_rows(plan, rows, snapshot)
    # read before any row changes: a query after them would autoflush them row by row
    projects = {p.id: p for p in session.scalars(select(Project))}
    quotas = {
        q.id: q
        for q in (snapshot.user_quotas if snapshot else user_quotas.read_quotas(session)).values()
    }
    # the owners disabled since the view was built (PostgreSQL: a disable committed since),
    # read after their jobs' rows: a disable committed later changed those rows' versions,
    # which the reasons' write is guarded on
    disabled = users.disabled_ids(session)

    # the running jobs the snapshot saw as preemptible (its spec's flag): their specs need
    # not be parsed again (~35 us a job); any other is checked on its spec
    preemptible_ids = (
        {s.id for s in snapshot.view.running if s.request.preemptible} if snapshot else set()
    )
    for preempt in plan.preempts:  # before any row changes: a spec loaded later autoflushes
        job = rows.get(preempt.job_id)
        if job is None or job.state != JobState.RUNNING.value or job.id in preemptible_ids:
            continue
        if not jobs.job_spec(job).preemptible:
            raise PlacementError(f"plan preempts {job.id}, which is not preemptible")

    def not_free_yet(alloc: Allocation, job_id: str) -> None:
        """``alloc``'s GPUs stay ``job_id``'s this round: what lands on them waits."""
        draining.add(alloc)
        for i in draining._indices(alloc):
            owners.setdefault(i, []).append(job_id)

    def release(job_id: str) -> tuple[Job, Allocation] | None:
        """The running job's row and its GPUs, taken out of ``committed`` (None, and the
        entry skipped, when it is not running any more)."""
        job = rows.get(job_id)
        if job is None or job.state != JobState.RUNNING.value:
            out.skipped[job_id] = "not running any more"
            return None
        alloc = to_allocation(job.allocation, cluster)
        committed.add(alloc, -1)
        return job, alloc

    # the quota checks first: a job preempted only for moves that a quota refuses (or that
    # will not happen) keeps running, and those moves are not placed (they wait)
    limited = with_quota(projects.values())
    not_made = resizes_not_made(plan, rows, disabled, changed)
    gone = gone_starts(plan, rows, t, disabled, changed) | not_made.keys()
    refused: dict[str, str] = {}
    idle: dict[str, str] = {}
    if plan.preempts:
        limits = _Quotas(projects, limited, quotas, used, user_used)
        refused, spared = _checked_first(plan, rows, cluster, gone, limits)
        for job_id, names in spared.items():
            why = "not to start any more" if gone.issuperset(names) else "kept waiting by a quota"
            idle[job_id] = f"not preempted: its GPUs were for {', '.join(names)}, {why}"
    out.skipped.update(idle)
    for preempt in plan.preempts:
        if preempt.job_id in idle or (found := release(preempt.job_id)) is None:
            continue
        job, alloc = found
        not_free_yet(alloc, job.id)
        jobs.change_state_batched(job, JobState.PREEMPTING, preempt.reason, t, events)
        out.preempted.append(job)

    movers: set[str] = set()  # jobs whose move waits: their GPUs stay theirs this round

    view = snapshot.view if snapshot is not None else None
    opened = view.open_gpus() if view is not None else None

    def blocked(alloc: Allocation, job_id: str) -> str | None:
        if opened is not None and view is not None:
            shut = _closed_places(view, alloc, opened)
            if shut:
                raise PlacementError(f"plan places {job_id} on {shut}, closed to new work")
        bad = committed.overflow(alloc)
        if bad:
            raise PlacementError(
                f"plan over-allocates GPU(s) {bad} (flat numbering) when placing {job_id}"
            )
        bad = committed.overflow(alloc, draining)
        if bad:
            return _waiting_for(sorted({o for i in bad for o in owners.get(i, [])}), movers)
        return None

    # Every moving job's GPUs are released first: a plan may move a job onto GPUs that
    # another job of the same plan leaves, in any order. A move onto GPUs that are not free
    # this round (a preempted job's, still checkpointing) waits, and its job keeps its GPUs,
    # which may hold up another move onto them, and so on: to a fixed point.
    moving: list[tuple[Resize, Job, Allocation]] = []
    for resize in plan.resizes:
        if (found := release(resize.job_id)) is not None:
            moving.append((resize, *found))
    waits: dict[str, str] = {}
    for _, job, old in moving:
        # not made (changed since the view, or an owner disabled), or a growth past a
        # quota: the job keeps its GPUs
        if (stays := not_made.get(job.id, refused.get(job.id))) is not None:
            waits[job.id] = stays
            movers.add(job.id)
            not_free_yet(old, job.id)
    settled = False
    while not settled:
        settled = True
        grown: dict[int, Usage] = {}  # per project, by the moves that go ahead
        grown_by_user: dict[int, float] = {}  # the same per user with a quota
        for resize, job, old in moving:
            if job.id in waits:
                continue
            reason = blocked(resize.allocation, job.id)
            if reason is None and job.project_id in limited:
                # a move that grows must fit the project's quota (what other moves of the
                # same round give back is not counted: it is checked again next round)
                reason, grown = _over_quota(projects[job.project_id], used, grown, old, resize)
            if reason is None and job.user_id in quotas:  # and its user's
                quota = quotas[job.user_id]
                reason = _over_user_quota(quota, user_used, grown_by_user, old, resize)
            if reason is not None:
                waits[job.id] = reason
                movers.add(job.id)
                not_free_yet(old, job.id)
                settled = False
    for resize, job, _ in moving:
        if job.id in changed:
            out.skipped[job.id] = CHANGED
            continue
        if job.id in waits:
            out.deferred[job.id] = waits[job.id]
            continue
        bad = committed.overflow(resize.allocation)
        if bad:  # two moves onto one GPU
            raise PlacementError(
                f"plan over-allocates GPU(s) {bad} (flat numbering) when placing {job.id}"
            )
        committed.add(resize.allocation)
        records = to_records(resize.allocation, cluster)
        used[job.project_id] = (
            used.get(job.project_id, Usage())
            - allocation_usage(job.allocation)
            + allocation_usage(records)
        )
        user_used[job.user_id] = (
            user_used.get(job.user_id, 0.0)
            - allocation_usage(job.allocation).gpus
            + allocation_usage(records).gpus
        )
        jobs.resize(session, job, records, resize.batch_size, t, flush=False, events=events)
        out.resized.append(job)

    moved = {r.job_id for r in plan.resizes} | {p.job_id for p in plan.preempts}
    for rebatch in plan.rebatches:
        if rebatch.job_id in moved:
            raise PlacementError(f"plan moves and rebatches {rebatch.job_id} at once")
        job = rows.get(rebatch.job_id)
        if job is None or job.state != JobState.RUNNING.value:
            out.skipped[rebatch.job_id] = "not running any more"
            continue
        if job.id in changed:
            out.skipped[job.id] = CHANGED
            continue
        jobs.rebatch(session, job, rebatch.batch_size, flush=False)
        out.rebatched.append(job)

    for start in plan.starts:
        job = rows.get(start.job_id)
        if job is None or job.state != JobState.PENDING.value:
            out.skipped[start.job_id] = "not pending any more"
            continue
        if (passed := not_due(job, t)) is not None:
            # held, or made to wait, since the snapshot: it stays PENDING, keeping its own
            # reason; its GPUs stay free (nothing of the plan is placed on them: each start
            # and move is checked against what is held)
            out.skipped[start.job_id] = passed
            continue
        if job.user_id in disabled:  # it stays PENDING; the next view withholds it
            out.skipped[start.job_id] = "its owner was disabled since the view was built"
            continue
        if job.id in changed:  # it stays PENDING: the next round plans its new request
            out.skipped[start.job_id] = CHANGED
            continue
        if (reason := refused.get(job.id)) is not None:  # checked before the preemptions
            out.deferred[job.id] = reason
            reasons.add(job, reason)
            continue
        records = to_records(start.allocation, cluster)
        reason = blocked(start.allocation, job.id)
        extra = held_usage(start.allocation)
        project = projects[job.project_id]
        current = used.get(project.id, Usage())
        reason = reason or quota_excess(project, current, extra)
        mine = user_used.get(job.user_id, 0.0)
        if reason is None and job.user_id in quotas:
            reason = user_quotas.excess(quotas[job.user_id], mine, extra.gpus)
        if reason is not None:
            out.deferred[job.id] = reason
            reasons.add(job, reason)
            continue
        committed.add(start.allocation)
        used[project.id] = current + extra
        user_used[job.user_id] = mine + extra.gpus
        if start.batch_size is not None:
            job.batch_size = start.batch_size
        why = f"scheduled: {start.reason}" if start.reason else "scheduled"
        jobs.change_state_batched(job, JobState.RUNNING, why, t, events, allocation=records)
        out.started.append(job)

    for job_id, reason in {**(withheld or {}), **plan.waiting}.items():
        job = rows.get(job_id)
        if job is None or job.state != JobState.PENDING.value or job_id in out.deferred:
            continue
        if job.user_id in disabled and job_id not in (withheld or {}):
            continue  # its owner was disabled since the view: it keeps the disable's reason
        if not_due(job, t) is None:  # a held or waiting job keeps its own reason
            reasons.add(job, reason)
    if plan.waiting_default:
        # Every other pending job waits for the plan's shared reason (one UPDATE, not a row
        # per queued job). Started jobs are no longer PENDING; listed ones keep their reason.
        # (a start skipped as changed keeps its reason until a round plans it anew)
        listed = {*plan.waiting, *(withheld or {}), *out.deferred, *out.skipped}
        jobs.flush_or_conflict(session)
        reason = plan.waiting_default
        # Each row at the version the statement read it (its key and version as the
        # subquery found them): on PostgreSQL a row another transaction changed while the
        # UPDATE ran is checked again as it is now, but not the subqueries, so a disable
        # committed meanwhile (a new version, and its own reason) would be written over.
        session.execute(
            update(Job)
            .where(tuple_(Job.seq, Job.version).in_(reason_differs(reason)))
            .where(Job.id.not_in(listed))
            .where(Job.held_at.is_(None))  # a held job keeps saying who held it
            # and so do those the policy never saw (the snapshot's pending key query): a
            # job waiting for a dependency, one backing off after a failed launch
            .where(Job.waiting_on.is_(None))
            .where(or_(Job.next_attempt_at.is_(None), Job.next_attempt_at <= t))
            .where(Job.user_id.not_in(users.disabled_query()))  # as the disable said
            .values(pending_reason=reason)
            .execution_options(synchronize_session=False)
        )
    # What changed, added to what the job has; not for a job whose start or move waits or
    # was skipped: those marks describe the step that did not happen (the danlu policy
    # counts the move, records the batch), and the next round plans it again.
    held_back = out.deferred.keys() | out.skipped.keys()
    for job_id, marks in plan.marks.items():
        job = rows.get(job_id)
        if job is not None and job_id not in held_back:
            merged = {**(job.marks or {}), **_finite(job_id, marks)}
            if merged != (job.marks or {}):
                job.marks = merged
    jobs.flush_or_conflict(session)  # the changed rows in a few statements
    events.write(session)  # then their events, in one
    reasons.write(session)  # and the new waiting reasons, in one
    return out


def _without_released(plan: Plan, rows: Mapping[str, Job], out: Applied) -> Plan:
    """``plan`` without the preemptions of held running jobs (:data:`HELD_DRAIN`) that were
    released since the view was built (their rows, ``rows``, as read in this transaction),
    noted in ``out.skipped``: a job released before its preemption keeps running (on
    PostgreSQL a release committed between the snapshot and the record was preempted all
    the same, and the job re-queued as if still held)."""
    released = {
        p.job_id
        for p in plan.preempts
        if p.reason == HELD_DRAIN
        and (job := rows.get(p.job_id)) is not None
        and job.state == JobState.RUNNING.value
        and job.held_at is None
    }
    if not released:
        return plan
    for job_id in sorted(released):
        out.skipped[job_id] = "released since the view was built"
    return replace(plan, preempts=tuple(p for p in plan.preempts if p.job_id not in released))


def _finite(job_id: str, marks: Mapping[str, float]) -> dict[str, float]:
    """``marks`` without values that are not finite numbers: the store's JSON (PostgreSQL's)
    cannot hold infinity or NaN, and one job's mark must not fail every round's commit."""
    kept = {k: v for k, v in marks.items() if isinstance(v, int | float) and math.isfinite(v)}
    if len(kept) < len(marks):
        dropped = sorted(set(marks) - set(kept))
        log.warning("policy marks of job %s not stored (not finite): %s", job_id, dropped)
    return kept
