"""The adapter between the store and ``danlu.sched``: build a :class:`ClusterView` from the DB,
and record a policy's :class:`Plan` as state changes and allocations.

Only records: the executor's side effects (spawn, SIGTERM) are the reconcile loop's, outside
this transaction, driven by what :func:`apply_plan` returns. A preempted job keeps its GPUs
while it checkpoints (PREEMPTING), so a start that would land on them is deferred to a later
round; the stored allocations never exceed a GPU's compute (1000 milli) or memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from itertools import compress
from typing import Any

import numpy as np
from sqlalchemy import Select, or_, select, update
from sqlalchemy.orm import Session, defer, lazyload

from danlu.core.cluster import MILLI_PER_GPU, Allocation, Cluster, GpuShare
from danlu.core.errors import PlacementError
from danlu.core.spec import JobSpec
from danlu.core.state import JobState
from danlu.sched.view import ClusterView, IntArray, JobRequest, JobStatus, Plan, Resize
from danlu.server.db.models import Job, Project
from danlu.server.errors import AdmissionError
from danlu.server.services import admission, jobs, observe
from danlu.server.services.bulk import EventBatch, WaitingReasons
from danlu.server.services.cluster import InventoryMemo, load_cluster
from danlu.server.services.common import resolve_now, tuple_rows
from danlu.server.services.projects import HOLDING, Usage, allocation_usage, quota_excess

ShareDict = dict[str, int | str]


@dataclass(frozen=True)
class Snapshot:
    """A view plus the pending jobs kept out of it, with the reason (quota, inventory)."""

    view: ClusterView
    withheld: dict[str, str] = field(default_factory=dict)
    preempting: frozenset[str] = frozenset()
    """The running jobs of the view that are PREEMPTING (checkpointing on their way out)."""
    project_usage: dict[int, Usage] = field(default_factory=dict)
    """What the holding jobs of each project with a quota hold (by project id)."""


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
    """Plan entries about jobs that changed since the view was built (e.g. cancelled)."""


def to_allocation(shares: Iterable[Mapping[str, object]] | None, cluster: Cluster) -> Allocation:
    """A stored allocation (node names) as a core :class:`Allocation` (node indices); shares
    on nodes no longer in the inventory are dropped."""
    index = cluster.node_index
    out = []
    for s in shares or ():
        node = index.get(str(s["node"]))
        if node is not None:
            out.append(
                GpuShare(node, int(str(s["gpu"])), int(str(s["milli"])), int(str(s["memory"])))
            )
    return Allocation(tuple(out))


def _held(allocation: Allocation) -> Usage:
    """What ``allocation`` holds, as a project's quota counts it."""
    return Usage(
        allocation.gpu_milli / MILLI_PER_GPU, sum(share.memory for share in allocation.shares)
    )


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
    """The request the scheduler sees for ``job``, whose stored spec parses to ``spec``."""
    return admission.build_request(
        job.id,
        spec,
        submit_time=job.submitted_at,
        seq=job.seq,
        priority=job.priority + project.priority,
        gpu_memory=job.gpu_memory_per_gpu,
        gpu_types=admission.canonical_gpu_types(spec, cluster),
    )


def _status(
    job: Job, project: Project, cluster: Cluster, running: bool, statuses: StatusCache
) -> JobStatus:
    spec, request = statuses.request(job, project, cluster)
    if job.state == JobState.PREEMPTING.value:
        request = replace(request, preemptible=False)  # already on its way out
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
state (a pending job's is PENDING). Plain integers but the one state: at 12,000 jobs the
pending jobs' rows are read and hashed every round (the job's id, a string, is its status's
:attr:`~danlu.sched.view.JobStatus.id`; its priority and project only change with
``version``)."""
_SEQ = 0
"""The job's submission number's place in a :data:`_Key`."""
_PROJECT = 3
"""The project id's place in a :data:`_Key`."""
_STATE = 4
"""A holding job's state's place in its :data:`_Key`."""


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
    only progress, waiting reasons and locks, which a status does not carry, and the
    measurement, which bumps ``observed_version``), its state, priority and project, its
    project's priority (a change drops that project's jobs) and the cluster (any inventory
    change drops everything) are the key. What admission says of a pending job on the inventory
    (never fits; the least its start uses) is kept with its status.
    Keep one per process (the reconcile loop does); it holds only the jobs of the last
    snapshot, and the inventory it was built on (:class:`InventoryMemo`).
    """

    def __init__(self) -> None:
        self.inventory = InventoryMemo()
        self._cluster: Cluster | None = None
        self._priorities: dict[int, int] = {}
        self._last: dict[_Key, _Entry] = {}
        self._next: dict[_Key, _Entry] = {}
        self._requests: dict[int, tuple[tuple[object, ...], JobSpec, JobRequest]] = {}
        """By job seq: what a job's request was built from, its parsed spec and the request.
        A job's spec never changes after submission, so a job whose status changed (it
        started, moved, measured itself) gets its request again without parsing its spec
        (a tenth of a millisecond each: ~260 jobs in a round at 12,000 jobs)."""
        self.hits = 0
        self.misses = 0

    def begin(self, cluster: Cluster, priorities: Mapping[int, int] | None = None) -> None:
        """Start a snapshot on ``cluster`` with these project priorities (by project id)."""
        known = dict(priorities or {})
        if cluster != self._cluster:
            self._last.clear()
            self._requests.clear()
        elif known != self._priorities:  # only the jobs of the projects that changed
            every = known.keys() | self._priorities.keys()
            changed = {pid for pid in every if known.get(pid) != self._priorities.get(pid)}
            self._last = {k: e for k, e in self._last.items() if k[_PROJECT] not in changed}
        self._cluster, self._priorities = cluster, known
        self._next = {}

    def lookup(self, keys: list[_Key]) -> list[_Entry | None]:
        """The last snapshot's entry of each key row (None: changed or new; :meth:`put` it);
        the entries found are kept for the next snapshot."""
        entries = list(map(self._last.get, keys))
        missed = entries.count(None)
        self.misses += missed
        self.hits += len(entries) - missed
        self._next = dict(zip(compress(keys, entries), filter(None, entries), strict=True))
        return entries

    def put(self, key: _Key, entry: _Entry) -> None:
        """A new entry for the job of ``key`` in this snapshot."""
        self._next[key] = entry

    def end(self) -> None:
        """Finish the snapshot: only its jobs are kept."""
        self._last, self._next = self._next, {}
        if len(self._requests) > 2 * len(self._last) + 64:  # amortised: jobs that left
            live = {key[0] for key in self._last}
            self._requests = {seq: r for seq, r in self._requests.items() if seq in live}

    def request(self, job: Job, project: Project, cluster: Cluster) -> tuple[JobSpec, JobRequest]:
        """:func:`_request` of ``job`` on this snapshot's ``cluster``, reused while the
        fields it is built from (besides the spec, which never changes) are the same; the
        parsed spec is reused in any case (the row's ``spec`` is not read then: it may be
        deferred, see :meth:`parsed`)."""
        inputs = (job.id, job.submitted_at, job.priority + project.priority, job.gpu_memory_per_gpu)
        hit = self._requests.get(job.seq)
        if hit is not None and hit[0] == inputs:
            return hit[1], hit[2]
        spec = hit[1] if hit is not None else jobs.job_spec(job)
        request = _request(job, spec, project, cluster)
        self._requests[job.seq] = (inputs, spec, request)
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
    return _Entry(job.id, status, None, admission.minimum_usage(status.request, cluster))


_LOAD_CHUNK = 500
"""Rows per ``IN (...)`` when loading the jobs whose status changed."""


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
        for i in range(0, len(wanted), _LOAD_CHUNK):
            query = select(Job).options(*options).where(Job.seq.in_(wanted[i : i + _LOAD_CHUNK]))
            out.update((job.seq, job) for job in session.scalars(query))
    return out


_KEY_COLUMNS = (Job.seq, Job.version, Job.observed_version, Job.project_id)
_PREEMPTING = JobState.PREEMPTING.value


def key_row_queries(
    now: float,
) -> tuple[Select[int, int, int, int, str], Select[int, int, int, int]]:
    """The snapshot's two key-row queries at ``now`` (:data:`_Key`): the holding jobs, and
    the pending jobs past their backoff, each in submission order. The index
    ``ix_jobs_state_seq_key`` holds every column they read, so they are answered from it
    alone."""
    holding = select(*_KEY_COLUMNS, Job.state).where(Job.state.in_(HOLDING)).order_by(Job.seq)
    pending = (
        select(*_KEY_COLUMNS)
        .where(Job.state == JobState.PENDING.value)
        .where(or_(Job.next_attempt_at.is_(None), Job.next_attempt_at <= now))
        .order_by(Job.seq)
    )
    return holding, pending


def build_snapshot(
    session: Session, now: float | None = None, cache: StatusCache | None = None
) -> Snapshot:
    """The scheduler's view at ``now``: inventory, RUNNING/PREEMPTING jobs with their
    allocations, and PENDING jobs past their backoff in submission order (minus those whose
    project quota or the current inventory keeps them out, listed in ``withheld``).
    ``cache``: reuse the statuses of unchanged jobs (see :class:`StatusCache`); only the rows
    of the others are loaded whole.

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
    held = tuple_rows(connection, holding)  # plain tuples: the cache's keys
    waiting = tuple_rows(connection, pending_due)
    held_entries = statuses.lookup(held + waiting)
    waiting_entries = held_entries[len(held) :]
    del held_entries[len(held) :]
    if None in held_entries or None in waiting_entries:
        missing = [row[_SEQ] for row, e in zip(held, held_entries, strict=True) if e is None]
        missing += [row[_SEQ] for row, e in zip(waiting, waiting_entries, strict=True) if e is None]
        loaded = _load_rows(session, missing, statuses.parsed(missing))
        _fill(statuses, cluster, projects, loaded, held, held_entries, running=True)
        _fill(statuses, cluster, projects, loaded, waiting, waiting_entries, running=False)
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
    preempting = frozenset(
        status.id
        for row, status in zip(held, running_jobs, strict=True)
        if row[_STATE] == _PREEMPTING
    )
    limited = {
        pid
        for pid, p in projects.items()
        if p.quota_gpus is not None or p.quota_gpu_memory is not None
    }
    usage: dict[int, Usage] = {}  # by project, from the holding jobs
    if limited:
        for row, entry in zip(held, held_entries, strict=True):
            project_id = row[_PROJECT]
            if project_id in limited and entry is not None:
                usage[project_id] = usage.get(project_id, Usage()) + entry.held
    pending: list[JobStatus] = []
    withheld: dict[str, str] = {}
    for row, entry in zip(waiting, waiting_entries, strict=True):
        if entry is None:  # gone since its key row was read (another session deleted it)
            continue
        if entry.withheld is not None or entry.status is None:
            withheld[entry.job_id] = entry.withheld or "cannot build the job's request"
            continue
        project_id = row[_PROJECT]
        if project_id in limited:
            excess = quota_excess(projects[project_id], usage.get(project_id, Usage()), entry.need)
            if excess is not None:
                withheld[entry.job_id] = f"waiting for quota: {excess}"
                continue
        pending.append(entry.status)
    milli, memory = _gpu_usage(cluster, held_entries)
    view = ClusterView(
        time=t,
        cluster=cluster,
        running=tuple(running_jobs),
        pending=tuple(pending),
        used_milli=milli,
        used_memory=memory,
    )
    return Snapshot(view, withheld, preempting, usage)


def _fill(
    statuses: StatusCache,
    cluster: Cluster,
    projects: Mapping[int, Project],
    loaded: Mapping[int, Job],
    rows: list[_Key],
    entries: list[_Entry | None],
    running: bool,
) -> None:
    """Build (and cache) the entries of ``rows`` that ``entries`` lacks, in place, from the
    jobs' full rows ``loaded`` (by seq)."""
    for i, key in enumerate(rows):
        job = loaded.get(key[0]) if entries[i] is None else None
        if job is None:  # cached, or gone since the key read (another session): left out
            continue
        project = projects[key[_PROJECT]]
        if running:
            entry = _running_entry(job, project, cluster, statuses)
        else:
            entry = _pending_entry(job, project, cluster, statuses)
        entries[i] = entry
        statuses.put(key, entry)


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
    fifth of the recording."""
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    query = (
        select(Job)
        .options(lazyload(Job.project), lazyload(Job.user), defer(Job.spec))
        .where(Job.id.in_(wanted))
    )
    return {j.id: j for j in session.scalars(query)}


@dataclass
class _Held:
    """What the holding jobs hold when a plan is recorded: per GPU, the RUNNING jobs'
    (``committed``) and the PREEMPTING ones' (``draining``, with their ids per GPU in
    ``owners``), and per project (``used``; the projects with a quota at least)."""

    committed: _Usage
    draining: _Usage
    owners: dict[int, list[str]]
    used: dict[int, Usage]


def _read_held(session: Session, cluster: Cluster) -> _Held:
    """:class:`_Held` read from the store (every holding job's stored allocation)."""
    holding = session.execute(
        select(Job.id, Job.state, Job.project_id, Job.allocation).where(Job.state.in_(HOLDING))
    )
    held = _Held(_Usage(cluster), _Usage(cluster), {}, {})
    staying: list[list[dict[str, Any]] | None] = []
    leaving: list[tuple[str, list[dict[str, Any]] | None]] = []
    for held_id, held_state, project_id, held_allocation in holding:
        held.used[project_id] = held.used.get(project_id, Usage()) + allocation_usage(
            held_allocation
        )
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


def _snapshot_held(snapshot: Snapshot) -> _Held:
    """:class:`_Held` from the snapshot the plan was made from (no reading): its view's
    per-GPU usage less what its PREEMPTING jobs hold, and its per-project usage."""
    view = snapshot.view
    cluster = view.cluster
    held = _Held(_Usage(cluster), _Usage(cluster), {}, dict(snapshot.project_usage))
    milli, memory = view.usage()
    held.committed.milli += milli
    held.committed.memory += memory
    for status in view.running:
        if status.id in snapshot.preempting:
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


def apply_plan(
    session: Session,
    plan: Plan,
    now: float | None = None,
    withheld: Mapping[str, str] | None = None,
    snapshot: Snapshot | None = None,
) -> Applied:
    """Record ``plan`` in the caller's transaction: preempts (RUNNING -> PREEMPTING), resizes
    and starts (PENDING -> RUNNING with the allocation), rebatches (the running job's batch
    size only: same attempt, nothing relaunched), waiting reasons and policy marks.

    ``snapshot``: the snapshot ``plan`` was made from, built in this transaction. Its
    inventory and usage are used instead of being read again (~45 ms a round at 1,000 nodes
    and 2,000 running jobs). They cannot have grown since: only the reconcile loop's
    ``apply_plan`` adds allocations, and other writers only release them. So the checks
    below are at least as strict as on a fresh read.

    A placement (start or move) onto GPUs that a job preempted now or before still holds
    waits (``Applied.deferred``, with the reason), and so does one onto the GPUs of a job
    whose own move waits. Raises :class:`PlacementError` (the caller rolls back) when the
    plan would over-allocate a GPU beyond its compute or memory, or preempts a
    non-preemptible job."""
    t = resolve_now(now)
    if snapshot is not None:
        cluster = snapshot.view.cluster
        held = _snapshot_held(snapshot)
    else:
        cluster = load_cluster(session)
        held = _read_held(session, cluster)
    committed, draining, owners, used = held.committed, held.draining, held.owners, held.used
    out = Applied()
    events = EventBatch()
    reasons = WaitingReasons()
    touched = [p.job_id for p in plan.preempts] + [r.job_id for r in plan.resizes]
    touched += [b.job_id for b in plan.rebatches]
    rows = _by_id(
        session,
        [*touched, *(s.job_id for s in plan.starts), *plan.waiting, *plan.marks, *(withheld or {})],
    )
    # read before any row changes: a query after them would autoflush them row by row
    projects = {p.id: p for p in session.scalars(select(Project))}

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
    for preempt in plan.preempts:
        job = rows.get(preempt.job_id)
        if job is None or job.state != JobState.RUNNING.value:
            out.skipped[preempt.job_id] = "not running any more"
            continue
        alloc = to_allocation(job.allocation, cluster)
        committed.add(alloc, -1)
        draining.add(alloc)
        for i in draining._indices(alloc):
            owners.setdefault(i, []).append(job.id)
        jobs.change_state_batched(job, JobState.PREEMPTING, preempt.reason, t, events)
        out.preempted.append(job)

    movers: set[str] = set()  # jobs whose move waits: their GPUs stay theirs this round

    def blocked(alloc: Allocation, job_id: str) -> str | None:
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
        job = rows.get(resize.job_id)
        if job is None or job.state != JobState.RUNNING.value:
            out.skipped[resize.job_id] = "not running any more"
            continue
        old = to_allocation(job.allocation, cluster)
        committed.add(old, -1)
        moving.append((resize, job, old))
    waits: dict[str, str] = {}
    settled = False
    while not settled:
        settled = True
        for resize, job, old in moving:
            if job.id in waits:
                continue
            reason = blocked(resize.allocation, job.id)
            if reason is not None:
                waits[job.id] = reason
                movers.add(job.id)
                draining.add(old)
                for i in draining._indices(old):
                    owners.setdefault(i, []).append(job.id)
                settled = False
    for resize, job, _ in moving:
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
        jobs.resize(session, job, records, resize.batch_size, t, flush=False)
        out.resized.append(job)

    moved = {r.job_id for r in plan.resizes} | {p.job_id for p in plan.preempts}
    for rebatch in plan.rebatches:
        if rebatch.job_id in moved:
            raise PlacementError(f"plan moves and rebatches {rebatch.job_id} at once")
        job = rows.get(rebatch.job_id)
        if job is None or job.state != JobState.RUNNING.value:
            out.skipped[rebatch.job_id] = "not running any more"
            continue
        jobs.rebatch(session, job, rebatch.batch_size, flush=False)
        out.rebatched.append(job)

    for start in plan.starts:
        job = rows.get(start.job_id)
        if job is None or job.state != JobState.PENDING.value:
            out.skipped[start.job_id] = "not pending any more"
            continue
        records = to_records(start.allocation, cluster)
        reason = blocked(start.allocation, job.id)
        extra = _held(start.allocation)
        project = projects[job.project_id]
        current = used.get(project.id, Usage())
        reason = reason or quota_excess(project, current, extra)
        if reason is not None:
            out.deferred[job.id] = reason
            reasons.add(job, reason)
            continue
        committed.add(start.allocation)
        used[project.id] = current + extra
        if start.batch_size is not None:
            job.batch_size = start.batch_size
        why = f"scheduled: {start.reason}" if start.reason else "scheduled"
        jobs.change_state_batched(job, JobState.RUNNING, why, t, events, allocation=records)
        out.started.append(job)

    for job_id, reason in {**(withheld or {}), **plan.waiting}.items():
        job = rows.get(job_id)
        if job is not None and job.state == JobState.PENDING.value and job_id not in out.deferred:
            reasons.add(job, reason)
    if plan.waiting_default:
        # Every other pending job waits for the plan's shared reason (one UPDATE, not a row
        # per queued job). Started jobs are no longer PENDING; listed ones keep their reason.
        listed = {*plan.waiting, *(withheld or {}), *out.deferred}
        jobs.flush_or_conflict(session)
        reason = plan.waiting_default
        session.execute(
            update(Job)
            .where(Job.state == JobState.PENDING.value, Job.id.not_in(listed))
            .where(or_(Job.pending_reason.is_(None), Job.pending_reason != reason))
            .values(pending_reason=reason)
            .execution_options(synchronize_session=False)
        )
    for job_id, marks in plan.marks.items():
        job = rows.get(job_id)
        if job is not None and dict(job.marks or {}) != dict(marks):
            job.marks = dict(marks)
    jobs.flush_or_conflict(session)  # the changed rows in a few statements
    events.write(session)  # then their events, in one
    reasons.write(session)  # and the new waiting reasons, in one
    return out
