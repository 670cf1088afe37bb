"""The adapter from the store to ``danlu.sched``: build the :class:`ClusterView` a policy
reads (:func:`build_snapshot`), with a cache of the statuses of unchanged jobs
(:class:`StatusCache`), and convert between stored and core allocations. Recording the
policy's :class:`Plan` is :mod:`danlu.server.services.record`'s.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import compress, repeat
from operator import is_
from typing import Any

import numpy as np
from sqlalchemy import Select, or_, select
from sqlalchemy.orm import Session, defer, lazyload

from danlu.core.cluster import MILLI_PER_GPU, Allocation, Cluster, GpuShare
from danlu.core.errors import PlacementError
from danlu.core.spec import JobSpec
from danlu.core.state import JobState
from danlu.sched.project_usage import ProjectShare, add_stretch, shares_with_usage
from danlu.sched.quota import (
    Quota,
    Usage,
    can_bind,
    least_held,
    minimum_usage,
    room_for,
    within_quota_sizes,
    within_room,
)
from danlu.sched.view import ClusterView, IntArray, JobRequest, JobStatus
from danlu.server.db.models import Job, Project
from danlu.server.errors import AdmissionError
from danlu.server.services import admission, jobs, nodes, observe, user_quotas, users
from danlu.server.services.cluster import InventoryMemo, load_cluster
from danlu.server.services.common import IN_CHUNK, plain_rows, resolve_now
from danlu.server.services.projects import (
    HOLDING,
    project_quota,
    quota_excess,
    with_quota,
)
from danlu.server.services.usage import RecentUsage, unlaunched_jobs
from danlu.server.services.user_quotas import UserQuota

ShareDict = dict[str, int | str]
HELD_DRAIN = "held: preempted by checkpoint until released"
"""The reason of the preemption of a running job its owner or an admin held
(:attr:`Snapshot.drains`); :func:`~danlu.server.services.record.apply_plan` drops it when
the job was released since the snapshot."""


@dataclass(frozen=True)
class Snapshot:
    """A view plus the pending jobs kept out of it, with the reason (quota, inventory)."""

    view: ClusterView
    withheld: dict[str, str] = field(default_factory=dict)
    project_usage: dict[int, Usage] = field(default_factory=dict)
    """What the holding jobs of each project with a quota hold (by project id)."""
    user_quotas: dict[str, UserQuota] = field(default_factory=dict)
    """The users with a GPU quota of their own, by name."""
    user_usage: dict[int, float] = field(default_factory=dict)
    """The GPUs the holding jobs of each user with a quota hold (by user id)."""
    drains: dict[str, str] = field(default_factory=dict)
    """The preemptible running jobs on draining nodes, to preempt (id -> reason): the
    view hands them to the policy as not preemptible, like every job on a closed node
    (:func:`danlu.server.services.nodes.with_drains` adds them to its plan)."""
    keys: tuple[Sequence[_Key], ...] = ()
    """The key rows the view was built from (:data:`_Key`): the holding jobs', then the
    pending ones', each in submission order (:meth:`version_of` reads them)."""

    @property
    def preempting(self) -> frozenset[str]:
        """The running jobs of the view that are PREEMPTING (checkpointing on their way
        out): the view's draining jobs."""
        return self.view.draining

    def version_of(self, seq: int) -> int | None:
        """The ``version`` of the row of job ``seq`` (its submission number) that the view's
        status of it was built from, or None when the view has no such job. A row whose
        version is another now was changed since (``PATCH /jobs/{id}``, a hold, a cancel):
        :func:`~danlu.server.services.record.apply_plan` makes no move planned for it. A
        binary search of the key rows (no dictionary of every job is built a round)."""
        probe = (seq,)  # before every row of that seq: a shorter tuple sorts first
        for rows in self.keys:
            i = bisect_left(rows, probe)
            if i < len(rows) and rows[i][_SEQ] == seq:
                return int(rows[i][_VERSION])
        return None


def to_allocation(shares: Iterable[Mapping[str, object]] | None, cluster: Cluster) -> Allocation:
    """A stored allocation (node names) as a core :class:`Allocation` (node indices); shares
    on GPUs no longer in the inventory (their node gone, or left with fewer GPUs) are
    dropped (:func:`lost_gpus` names them)."""
    return Allocation(
        tuple(
            GpuShare(node, gpu, int(str(s["milli"])), int(str(s["memory"])))
            for s, node, gpu in _located(shares, cluster)
            if node is not None
        )
    )


def lost_gpus(shares: Iterable[Mapping[str, object]] | None, cluster: Cluster) -> list[str]:
    """The GPUs of a stored allocation that are no longer in the inventory, as ``node:gpu``."""
    return [f"{s['node']}:{gpu}" for s, node, gpu in _located(shares, cluster) if node is None]


def _located(
    shares: Iterable[Mapping[str, object]] | None, cluster: Cluster
) -> Iterator[tuple[Mapping[str, object], int | None, int]]:
    """Each stored share with its node's index in ``cluster`` (None when the node is gone or
    has no such GPU any more) and its GPU index."""
    index = cluster.node_index
    nodes = cluster.nodes
    for s in shares or ():
        node = index.get(str(s["node"]))
        gpu = int(str(s["gpu"]))
        yield s, node if node is not None and 0 <= gpu < nodes[node].gpus else None, gpu


def to_records(allocation: Allocation, cluster: Cluster) -> list[ShareDict]:
    """A core allocation as stored records (node names); bad indices are a PlacementError."""
    out: list[ShareDict] = []
    for s in allocation.shares:
        if not 0 <= s.node < len(cluster.nodes) or not 0 <= s.gpu < cluster.nodes[s.node].gpus:
            raise PlacementError(f"allocation names GPU {s.gpu} of node {s.node}, which is absent")
        if not 0 < s.milli <= MILLI_PER_GPU or s.memory < 0:
            raise PlacementError(f"share of GPU {s.gpu} of node {s.node} is malformed: {s}")
        out.append(
            {"node": cluster.nodes[s.node].name, "gpu": s.gpu, "milli": s.milli, "memory": s.memory}
        )
    return out


def _request(job: Job, spec: JobSpec, project: Project, cluster: Cluster) -> JobRequest:
    """The request the scheduler sees for ``job``, whose stored spec parses to ``spec``. A
    GPU type it names that no longer resolves (a model only the inventory knew, whose last
    node left) is kept as named, matching no GPU: a running job keeps its place, and a
    pending one naming only such types is withheld as not fitting the inventory."""
    return admission.build_request(
        job.id,
        spec,
        submit_time=job.submitted_at,
        seq=job.seq,
        priority=job.priority + project.priority,
        gpu_memory=job.gpu_memory_per_gpu,
        gpu_types=admission.canonical_gpu_types(spec, cluster, strict=False),
    )


def _status(
    job: Job, project: Project, cluster: Cluster, running: bool, statuses: StatusCache
) -> JobStatus:
    spec, request = statuses.request(job, project, cluster)
    if job.state == JobState.PREEMPTING.value or job.cancel_requested_at is not None:
        # already on its way out (preempted, or being cancelled: preempting it would count a
        # preemption, and a requeue, of a job that is ending)
        request = replace(request, preemptible=False)
    return JobStatus(
        request=request,
        allocation=to_allocation(job.allocation, cluster) if running else Allocation(),
        attained_service=job.attained_service,
        run_time=job.run_time,
        last_start=job.last_start,
        preemptions=job.preemptions,
        restarts=job.restarts,
        marks=dict(job.marks or {}),
        observed=observe.observed(
            spec,
            job.observed,
            job.allocation if running else None,
            micro_batch_limit=job.micro_batch_limit,
        ),
    )


_Key = tuple[Any, ...]
"""A job's key row: seq, version, observed_version, project id, and for a holding job its
state (a pending job's is PENDING) and ``held_at``. Plain integers but the state and time:
at 12,000 jobs the pending jobs' rows are read and hashed every round (the job's id, a
string, is its status's :attr:`~danlu.sched.view.JobStatus.id`; its priority and project
only change with ``version``)."""
_SEQ = 0
"""The job's submission number's place in a :data:`_Key`."""
_VERSION = 1
"""The row's ``version``'s place in a :data:`_Key`."""
_PROJECT = 3
"""The project id's place in a :data:`_Key`."""
_STATE = 4
"""A holding job's state's place in its :data:`_Key`."""
_HELD_AT = 5
"""A holding job's ``held_at``'s place in its :data:`_Key` (set: its owner held it, and it
is preempted by checkpoint)."""


@dataclass(frozen=True, slots=True, eq=False)
class _Entry:
    """A job's cached status with what admission said of it on this inventory (compared by
    identity: ``None in entries`` stays a C-level scan)."""

    job_id: str
    status: JobStatus | None
    """None when the job's request cannot be built (``withheld`` says why)."""
    withheld: str | None = None
    """Why a pending job can never run on this inventory, or None."""
    need: Usage = field(default_factory=Usage)
    """The least a pending job's start adds to its project's usage (the quota check)."""
    shares: IntArray | None = None
    """A running job's shares as rows of (flat GPU index, milli, memory) on this inventory:
    the view's per-GPU usage is summed from them without walking allocations."""

    @property
    def held(self) -> Usage:
        """What a running job holds (its project's usage), from its shares."""
        if self.shares is None:
            return Usage()
        return Usage(int(self.shares[:, 1].sum()) / MILLI_PER_GPU, int(self.shares[:, 2].sum()))


class StatusCache:
    """The :class:`JobStatus` objects of the last snapshot, reused while their job is unchanged.

    A policy may memoise per status object (``danlu`` does: a job's options and rank inputs),
    so a round costs in proportion to the jobs that changed, as in the simulator; and
    :func:`build_snapshot` loads the full rows (their JSON spec, allocation, marks) of those
    jobs only. A job's status depends on its row, its project's priority and the inventory:
    the row's ``version`` (bumped by every ORM update; the Core UPDATEs that skip it touch
    only progress, waiting reasons, locks and energy, which a status does not carry, and the
    measurement, which bumps ``observed_version``), its state, priority and project, its
    project's priority (a change drops that project's jobs) and the cluster (any inventory
    change drops everything) are the key. What admission says of a pending job on the inventory
    (never fits; the least its start uses) is kept with its status.
    Keep one per process (the reconcile loop does); it holds the inventory it was built on
    (:class:`InventoryMemo`) and the entries of recent snapshots: those of jobs that changed
    (an old key never comes back: versions only grow, and job rows are never deleted) or
    left are dropped once they outnumber the last snapshot's (amortised: copying 12,000
    entries into a new dictionary every round was a tenth of the snapshot).
    """

    def __init__(self) -> None:
        self.inventory = InventoryMemo()
        self._cluster: Cluster | None = None
        self._priorities: dict[int, int] = {}
        self._last: dict[_Key, _Entry] = {}
        self._keys: list[_Key] = []
        """The key rows of the snapshot under way (or the last one)."""
        self._requests: dict[int, tuple[tuple[object, ...], JobSpec, JobRequest, int]] = {}
        """By job seq: what a job's request was built from, its parsed spec, the request and
        the row's ``version`` the spec was parsed at. A job's spec changes only while it is
        PENDING (``PATCH /jobs/{id}``: its resources; a change bumps the version) but for
        its ``time_limit`` (a column too), so a job whose status changed otherwise (it
        started, moved, measured itself) gets its request again without parsing its spec
        (a tenth of a millisecond each: ~260 jobs in a round at 12,000 jobs)."""
        self.hits = 0
        self.misses = 0

    def begin(self, cluster: Cluster, priorities: Mapping[int, int] | None = None) -> None:
        """Start a snapshot on ``cluster`` with these project priorities (by project id)."""
        known = dict(priorities or {})
        # the inventory memo hands back the same object while the inventory is unchanged
        # (comparing 1,000 nodes every round was a millisecond)
        if cluster is not self._cluster and cluster != self._cluster:
            self._last.clear()
            self._requests.clear()
        elif known != self._priorities:  # only the jobs of the projects that changed
            every = known.keys() | self._priorities.keys()
            changed = {pid for pid in every if known.get(pid) != self._priorities.get(pid)}
            self._last = {k: e for k, e in self._last.items() if k[_PROJECT] not in changed}
        self._cluster, self._priorities = cluster, known
        self._keys = []

    def __len__(self) -> int:
        """Entries held (the last snapshot's, and those not dropped yet)."""
        return len(self._last)

    def lookup(self, keys: list[_Key]) -> list[_Entry | None]:
        """The cached entry of each key row (None: changed or new; :meth:`put` it)."""
        entries = list(map(self._last.get, keys))
        missed = entries.count(None)
        self.misses += missed
        self.hits += len(entries) - missed
        self._keys = keys
        return entries

    def put(self, key: _Key, entry: _Entry) -> None:
        """A new entry for the job of ``key`` in this snapshot."""
        self._last[key] = entry

    def end(self) -> None:
        """Finish the snapshot: the entries of keys it did not read are dropped once they
        outnumber those it did (jobs that changed or left)."""
        keys, last = self._keys, self._last
        if len(last) > 2 * len(keys) + 64:
            self._last = {key: last[key] for key in keys if key in last}
        if len(self._requests) > 2 * len(keys) + 64:  # amortised: jobs that left
            live = {key[0] for key in keys}
            self._requests = {seq: r for seq, r in self._requests.items() if seq in live}

    def request(self, job: Job, project: Project, cluster: Cluster) -> tuple[JobSpec, JobRequest]:
        """:func:`_request` of ``job`` on this snapshot's ``cluster``, reused while the
        fields it is built from are the same; the parsed spec is reused unless it may have
        changed (the row's ``spec`` is not read then: it may be deferred, see
        :meth:`parsed`): a PENDING job's row changed since it was parsed, or its
        ``time_limit`` is not the spec's (changed while it ran)."""
        inputs = (job.id, job.submitted_at, job.priority + project.priority, job.gpu_memory_per_gpu)
        hit = self._requests.get(job.seq)
        if hit is not None and hit[1].time_limit != job.time_limit:
            hit = None  # its time limit changed while it ran
        if hit is not None and job.state == JobState.PENDING.value and hit[3] != job.version:
            hit = None  # its spec may have changed (resources, max_restarts)
        if hit is not None and hit[0] == inputs:
            return hit[1], hit[2]
        spec, parsed_at = (hit[1], hit[3]) if hit is not None else (jobs.job_spec(job), job.version)
        request = _request(job, spec, project, cluster)
        self._requests[job.seq] = (inputs, spec, request, parsed_at)
        return spec, request

    def parsed(self, seqs: Iterable[int]) -> set[int]:
        """The jobs of ``seqs`` whose parsed spec this cache holds."""
        return {seq for seq in seqs if seq in self._requests}


def _running_entry(job: Job, project: Project, cluster: Cluster, statuses: StatusCache) -> _Entry:
    """A holding job's status, with its shares by flat GPU index (the view's per-GPU usage
    and its project's)."""
    status = _status(job, project, cluster, True, statuses)
    shares = np.array(
        [
            (cluster.gpu_offset(share.node) + share.gpu, share.milli, share.memory)
            for share in status.allocation.shares
        ],
        dtype=np.int64,
    ).reshape(-1, 3)
    return _Entry(job.id, status, shares=shares)


def _pending_entry(job: Job, project: Project, cluster: Cluster, statuses: StatusCache) -> _Entry:
    """A pending job's status and what admission says of it on ``cluster``."""
    try:
        status = _status(job, project, cluster, False, statuses)
    except AdmissionError as exc:
        return _Entry(job.id, None, str(exc))
    problem = admission.never_fits(status.request, cluster)
    if problem is not None:
        return _Entry(job.id, status, f"cannot fit the current inventory: {problem}")
    return _Entry(job.id, status, None, minimum_usage(status.request, cluster))


def _load_rows(session: Session, seqs: list[int], parsed: set[int]) -> dict[int, Job]:
    """The rows of the jobs ``seqs`` (without their user and project: not needed here), the
    spec deferred for those in ``parsed`` (the cache holds their parsed spec: a spec never
    changes, and decoding it was a tenth of a rebuilt status)."""
    out: dict[int, Job] = {}
    for deferred in (False, True):
        wanted = [seq for seq in seqs if (seq in parsed) == deferred]
        options = [lazyload(Job.project), lazyload(Job.user)]
        if deferred:
            options.append(defer(Job.spec))
        for i in range(0, len(wanted), IN_CHUNK):
            query = select(Job).options(*options).where(Job.seq.in_(wanted[i : i + IN_CHUNK]))
            out.update((job.seq, job) for job in session.scalars(query))
    return out


_KEY_COLUMNS = (Job.seq, Job.version, Job.observed_version, Job.project_id)
_PREEMPTING = JobState.PREEMPTING.value


def key_row_queries(
    now: float,
) -> tuple[Select[int, int, int, int, str, float | None], Select[int, int, int, int]]:
    """The snapshot's two key-row queries at ``now`` (:data:`_Key`): the holding jobs, and
    the pending jobs past their backoff, not held and not waiting for a dependency, each in
    submission order. The index ``ix_jobs_state_seq_key`` holds every column they read, so
    they are answered from it alone."""
    holding = (
        select(*_KEY_COLUMNS, Job.state, Job.held_at)
        .where(Job.state.in_(HOLDING))
        .order_by(Job.seq)
    )
    pending = (
        select(*_KEY_COLUMNS)
        .where(Job.state == JobState.PENDING.value, Job.held_at.is_(None))
        .where(Job.waiting_on.is_(None))
        .where(or_(Job.next_attempt_at.is_(None), Job.next_attempt_at <= now))
        .order_by(Job.seq)
    )
    return holding, pending


def build_snapshot(
    session: Session,
    now: float | None = None,
    cache: StatusCache | None = None,
    recent: RecentUsage | None = None,
) -> Snapshot:
    """The scheduler's view at ``now``: inventory (with the nodes closed to new work),
    RUNNING/PREEMPTING jobs with their allocations, and PENDING jobs past their backoff in
    submission order (minus those whose project quota or the current inventory keeps them
    out, listed in ``withheld``, as are those of a disabled owner), and the jobs to preempt:
    those on a draining node and those held while running.
    ``cache``: reuse the statuses of unchanged jobs (see :class:`StatusCache`); only the rows
    of the others are loaded whole. The view's projects carry their fair-share weights and,
    with ``recent``, their recent usage. A run waiting for its launch has run nothing yet
    (:func:`_from_launch`; the jobs are ``recent``'s :attr:`RecentUsage.unlaunched`, read
    without it).

    The key rows are read on the session's connection (Core rows, no ORM row processing:
    at 12,000 jobs that was a tenth of the round), after a flush of what the session holds."""
    t = resolve_now(now)
    statuses = cache if cache is not None else StatusCache()
    cluster = load_cluster(session, statuses.inventory)  # flushes the session
    projects = {p.id: p for p in session.scalars(select(Project))}
    base = {pid: p.priority for pid, p in projects.items()}
    statuses.begin(cluster, base)
    connection = session.connection()
    holding, pending_due = key_row_queries(t)
    held = plain_rows(connection, holding)  # plain tuples: the cache's keys
    waiting = plain_rows(connection, pending_due)
    held_entries = statuses.lookup(held + waiting)
    waiting_entries = held_entries[len(held) :]
    del held_entries[len(held) :]
    held_todo, waiting_todo = _uncached(held_entries), _uncached(waiting_entries)
    if held_todo or waiting_todo:
        missing = [held[i][_SEQ] for i in held_todo] + [waiting[i][_SEQ] for i in waiting_todo]
        loaded = _load_rows(session, missing, statuses.parsed(missing))
        _fill(statuses, cluster, projects, loaded, held, held_entries, held_todo, running=True)
        _fill(
            statuses,
            cluster,
            projects,
            loaded,
            waiting,
            waiting_entries,
            waiting_todo,
            running=False,
        )
    statuses.end()
    running_jobs = [
        entry.status for entry in held_entries if entry is not None and entry.status is not None
    ]
    if len(running_jobs) != len(held):
        lost = next(
            entry.job_id if entry is not None else f"#{row[_SEQ]}"
            for row, entry in zip(held, held_entries, strict=True)
            if entry is None or entry.status is None
        )
        raise PlacementError(f"job {lost} holds GPUs but its row could not be read")
    unlaunched = recent.unlaunched if recent is not None else unlaunched_jobs(session)
    if unlaunched:  # not cached: the launch is no change of the job's key row
        running_jobs = [
            _from_launch(status, t) if status.id in unlaunched else status
            for status in running_jobs
        ]
    preempting = frozenset(
        status.id
        for row, status in zip(held, running_jobs, strict=True)
        if row[_STATE] == _PREEMPTING
    )
    limited = with_quota(projects.values())
    # A quota limits its holder's total, not each job's size: a pending job waits when its
    # start passes the quota on top of what is held, and a running elastic job may grow
    # into what the holder's other jobs could give up (their GPUs past their ``least``).
    # A quota the cluster cannot pass is not applied (the round is the one without it).
    binding = {i for i in limited if can_bind(project_quota(projects[i]), cluster)}
    usage: dict[int, Usage] = {}  # by project, from the holding jobs
    least: dict[int, Usage] = {}  # the same with each elastic job at its least
    quotas = user_quotas.read_quotas(session)
    leasts = [_least(entry, preempting) for entry in held_entries] if limited or quotas else []
    if limited:
        for row, entry, fewest in zip(held, held_entries, leasts, strict=True):
            project_id = row[_PROJECT]
            if project_id in limited and entry is not None:
                usage[project_id] = usage.get(project_id, Usage()) + entry.held
                least[project_id] = least.get(project_id, Usage()) + fewest
    user_used: dict[str, float] = {}  # by user name, from the holding jobs
    user_least: dict[str, float] = {}
    if quotas:
        for entry, fewest in zip(held_entries, leasts, strict=True):
            if entry is not None and entry.status is not None:
                owner = entry.status.request.user
                if owner in quotas:
                    user_used[owner] = user_used.get(owner, 0.0) + entry.held.gpus
                    user_least[owner] = user_least.get(owner, 0.0) + fewest.gpus
    bound = {n for n, q in quotas.items() if can_bind(user_quotas.as_quota(q), cluster)}
    # the disabled owners: their queued jobs are withheld, their running ones grow no more
    disabled_reasons = users.disabled_reasons(session) if waiting or held else {}
    disabled = frozenset(disabled_reasons)
    pending: list[JobStatus] = []
    withheld: dict[str, str] = {}
    for row, entry in zip(waiting, waiting_entries, strict=True):
        if entry is None:  # gone since its key row was read (another session deleted it)
            continue
        if entry.withheld is not None or entry.status is None:
            withheld[entry.job_id] = entry.withheld or "cannot build the job's request"
            continue
        if entry.status.request.user in disabled:  # not started until enabled again
            withheld[entry.job_id] = disabled_reasons[entry.status.request.user]
            continue
        project_id = row[_PROJECT]
        status = entry.status
        limits: list[Quota] = []  # the quotas it counts against, and what they count
        counts: dict[str, Usage] = {}
        if project_id in binding:
            project, used = projects[project_id], usage.get(project_id, Usage())
            excess = quota_excess(project, used, entry.need)
            if excess is not None:
                withheld[entry.job_id] = f"waiting for quota: {excess}"
                continue
            if status.request.elastic:
                status = within_quota(status, project, used, cluster)
            limits.append(limit := project_quota(project))
            counts[limit.holder] = used
        quota = quotas.get(status.request.user) if status.request.user in bound else None
        if quota is not None:
            mine = user_used.get(quota.name, 0.0)
            why = user_quotas.excess(quota, mine, entry.need.gpus)
            if why is not None:
                withheld[entry.job_id] = f"waiting for quota: {why}"
                continue
            if status.request.elastic:
                status = within_room(status, user_quotas.room(quota, mine))
            limits.append(limit := user_quotas.as_quota(quota))
            counts[limit.holder] = Usage(mine)
        if limits:  # on the GPUs the start fits its quotas on (several sizes)
            status = within_quota_sizes(status, limits, counts, cluster)
        pending.append(status)
    # the elastic running jobs of a holder with a quota grow within what it leaves while
    # the holder's other jobs shrink to their least (GPUs may move between them)
    for i, (row, entry, fewest) in enumerate(zip(held, held_entries, leasts, strict=False)):
        status = running_jobs[i]  # (no ``leasts`` without quotas: nothing to cut)
        if entry is None or not status.request.elastic:
            continue
        if row[_PROJECT] in binding:
            project = projects[row[_PROJECT]]
            others = least[project.id] - fewest + entry.held
            running_jobs[i] = status = within_quota(status, project, others, cluster)
        quota = quotas.get(status.request.user) if status.request.user in bound else None
        if quota is not None:
            others_gpus = user_least[quota.name] - fewest.gpus + entry.held.gpus
            running_jobs[i] = within_room(status, user_quotas.room(quota, others_gpus))
    if disabled:  # a disabled owner's running jobs run on as they are: none takes more GPUs
        running_jobs = [_not_growing(status, disabled) for status in running_jobs]
    milli, memory = _gpu_usage(cluster, held_entries)
    closed = nodes.closed(session, cluster)
    view = ClusterView(
        time=t,
        cluster=cluster,
        running=tuple(running_jobs),
        pending=tuple(pending),
        used_milli=milli,
        used_memory=memory,
        draining=preempting,
        closed_nodes=closed.nodes,
        closed_gpus=closed.gpus,
        projects=_project_shares(projects.values(), running_jobs, t, recent),
    )
    drains = nodes.to_drain(running_jobs, closed, cluster)
    for row, status in zip(held, running_jobs, strict=True):
        if row[_HELD_AT] is not None and row[_STATE] != _PREEMPTING:
            drains[status.id] = HELD_DRAIN
    by_id = {quotas[name].id: gpus for name, gpus in user_used.items()}
    return Snapshot(view, withheld, usage, quotas, by_id, drains, (held, waiting))


def _not_growing(status: JobStatus, disabled: frozenset[str]) -> JobStatus:
    """A running job's status as a policy is to see it when its owner is one of
    ``disabled`` (user names): an elastic one with its most GPUs cut to those it holds (as a
    quota with no room left cuts it: :func:`~danlu.sched.quota.within_room`), so that no
    policy plans its growth; it may still shrink or be preempted. ``status`` itself for
    any other job (:func:`~danlu.server.services.record.apply_plan` refuses the growth of
    a job a policy sizes itself)."""
    if status.request.user not in disabled or not status.request.elastic:
        return status
    return within_room(status, 0)


def _from_launch(status: JobStatus, now: float) -> JobStatus:
    """The status of a run waiting for its launch
    (:func:`~danlu.server.services.jobs.waits_for_launch`) as of ``now``: its run counts
    from its launch (which moves the job's ``last_start`` to then), as its GPU-hours and its
    time limit do, so at ``now`` it has run 0 s and attained nothing more: a policy takes
    no wait for GPUs another run holds for run time (fair share's minimum run time,
    tiresias' attained service, the estimates of the work done)."""
    if status.last_start is None or status.last_start >= now:
        return status
    return replace(status, last_start=now)


def _project_shares(
    projects: Iterable[Project],
    running: Iterable[JobStatus],
    now: float,
    recent: RecentUsage | None,
) -> dict[str, ProjectShare]:
    """The projects' weights (those not 1) and, with ``recent``, their recent usage: the
    finished stretches' plus the running jobs' current ones (not a run waiting for its
    launch: :attr:`RecentUsage.unlaunched`)."""
    weights = {p.name: p.share for p in projects if p.share != 1.0}
    if recent is None:
        return shares_with_usage(weights, {})
    usage, half_life = dict(recent.finished), recent.half_life
    for job in running:
        if job.last_start is not None and job.id not in recent.unlaunched:
            milli = job.allocation.gpu_milli
            add_stretch(usage, job.request.project, milli, job.last_start, now, now, half_life)
    return shares_with_usage(weights, usage)


def _least(entry: _Entry | None, preempting: frozenset[str]) -> Usage:
    """What a holding job holds at its least (:func:`~danlu.sched.quota.least_held`): a
    PREEMPTING one keeps what it holds until it is gone."""
    if entry is None:
        return Usage()
    status = entry.status
    if status is None or not status.request.elastic or status.id in preempting:
        return entry.held
    return least_held(status, sized=False)


def within_quota(status: JobStatus, project: Project, used: Usage, cluster: Cluster) -> JobStatus:
    """An elastic job's status with its most GPUs (``max_gpus``) cut to what its project's
    quota leaves on top of ``used`` (what the quota counts: the project's other holding
    jobs at their least, this one's GPUs included; see :func:`build_snapshot`),
    so that a policy, which does not see quotas, plans no size the store would refuse
    every round; ``status`` itself when the quota leaves room for its whole range."""
    return within_room(status, room_for(project_quota(project), used, status.request, cluster))


def _fill(
    statuses: StatusCache,
    cluster: Cluster,
    projects: Mapping[int, Project],
    loaded: Mapping[int, Job],
    rows: list[_Key],
    entries: list[_Entry | None],
    todo: list[int],
    running: bool,
) -> None:
    """Build (and cache) the entries of ``rows`` that ``entries`` lacks (at the positions
    ``todo``), in place, from the jobs' full rows ``loaded`` (by seq)."""
    for i in todo:
        key = rows[i]
        job = loaded.get(key[0])
        if job is None:  # gone since the key read (another session): left out
            continue
        project = projects[key[_PROJECT]]
        if running:
            entry = _running_entry(job, project, cluster, statuses)
        else:
            entry = _pending_entry(job, project, cluster, statuses)
        entries[i] = entry
        statuses.put(key, entry)


def _uncached(entries: list[_Entry | None]) -> list[int]:
    """The positions of ``entries`` the cache had no entry for (a C-level scan)."""
    return list(compress(range(len(entries)), map(is_, entries, repeat(None))))


def _gpu_usage(cluster: Cluster, entries: list[_Entry | None]) -> tuple[IntArray, IntArray]:
    """Per-GPU milli and memory held by the holding jobs' entries (as
    :func:`danlu.sched.view.usage_from_allocations` sums their allocations)."""
    milli = np.zeros(cluster.total_gpus, dtype=np.int64)
    memory = np.zeros(cluster.total_gpus, dtype=np.int64)
    parts = [entry.shares for entry in entries if entry is not None and entry.shares is not None]
    if parts:
        shares = np.concatenate(parts)
        np.add.at(milli, shares[:, 0], shares[:, 1])
        np.add.at(memory, shares[:, 0], shares[:, 2])
    return milli, memory


def build_view(session: Session, now: float | None = None) -> ClusterView:
    """:attr:`Snapshot.view` of :func:`build_snapshot`."""
    return build_snapshot(session, now).view
