"""The GPU inventory: nodes and their GPUs, as reported by an executor or a fake config."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, selectinload

from danlu.core.cluster import GPU_TYPES, Cluster, GpuType
from danlu.core.cluster import Node as CoreNode
from danlu.core.errors import ConfigError
from danlu.core.state import JobState
from danlu.core.units import format_bytes
from danlu.server.db.models import Counter, Gpu, Job, Node
from danlu.server.errors import NotFoundError
from danlu.server.services import node_events
from danlu.server.services import nodes as node_states
from danlu.server.services.common import resolve_now, tuple_rows


@dataclass(frozen=True, slots=True)
class ShareRecord:
    """One GPU share held by a job (what ``danlu nodes`` / the cluster route show)."""

    job_id: str
    state: str
    node: str
    gpu: int
    milli: int
    memory: int
    user_id: int | None = None
    """The id of the job's owner (who may see the job's id: its owner and the admins)."""


ABSENT: Final = -1
"""The ``position`` of a node, and the ``memory`` of a GPU, that the last inventory reading
did not report but whose row is kept for what an admin set on it (:func:`replace_inventory`):
no such node or GPU is listed or scheduled onto."""


def replace_inventory(
    session: Session,
    nodes: Sequence[CoreNode],
    uuids: Mapping[str, Sequence[str]] | None = None,
    fake: bool = False,
    now: float | None = None,
) -> list[Node]:
    """Make the stored inventory exactly ``nodes`` (in this order), with optional GPU UUIDs
    per node name (a node ``uuids`` does not name keeps those it had). Nodes keep their
    names, so allocations stored by name stay valid.

    What an admin set outlives a reading without the node or GPU (a node rebooting, a GPU
    off the bus): a node that is not in ``nodes`` keeps its row, at position
    :data:`ABSENT`, while an admin's cordon or drain, a scheduled close or an admin's cordon
    of one of its GPUs holds, and a GPU past the number its node reports keeps its row, with
    memory :data:`ABSENT`, while an admin's cordon of it holds; both apply again when they
    are reported again under that name and index. The closes the control plane made itself
    (:func:`_automatic`) and the count of failed launches are forgotten with them, and the
    rows of what nothing holds are deleted. The nodes' histories tell what the reading
    changed (:func:`~danlu.server.services.node_events.inventory_told`)."""
    t = resolve_now(now)
    names = [n.name for n in nodes]
    if len(set(names)) != len(names):
        raise ConfigError(f"duplicate node names in the inventory: {names}")
    uuids = uuids or {}
    # every GPU, absent ones too (list_nodes may have loaded only the others); the nodes'
    # rows locked until the transaction ends (in the order of their ids, as a flush writes
    # them), so that an admin's cordon of a node or of one of its GPUs committed meanwhile
    # is seen: a node missing from the reading whose admin cordon came after the read was
    # deleted with it
    query = (
        select(Node)
        .options(selectinload(Node.gpus))
        .order_by(Node.id)
        .with_for_update(of=Node)
        .execution_options(populate_existing=True)
    )
    existing = {n.name: n for n in session.scalars(query)}
    listed = {n.name: _gpus(n) for n in existing.values() if n.position != ABSENT}
    hosts = {name: node_events.Host.of(existing[name]) for name in listed}
    for name in set(existing) - set(names):
        gone = existing.pop(name)
        if not _keep_absent(gone):
            session.delete(gone)
    session.flush()
    rows: list[Node] = []
    for position, spec in enumerate(nodes):
        ids = list(uuids.get(spec.name, ()))
        row = existing.get(spec.name)
        if row is None:
            row = Node(name=spec.name, position=position, gpu_type="", updated_at=t)
            session.add(row)
        row.position = position
        row.gpu_type = spec.gpu_type.name
        row.rack = spec.rack
        row.cpu_milli = spec.cpu_milli
        row.memory = spec.memory
        row.fake = fake
        row.updated_at = t
        by_index = {gpu.index: gpu for gpu in row.gpus}
        for extra in list(row.gpus):  # those past the count: delete-orphan, or kept absent
            if extra.index >= spec.gpus:
                _absent_gpu(row, extra)
        for i in range(spec.gpus):
            gpu = by_index.get(i)
            if gpu is None:
                gpu = Gpu(index=i, gpu_type="", memory=0)
                row.gpus.append(gpu)
            gpu.gpu_type = spec.gpu_type.name
            gpu.memory = spec.gpu_type.memory
            if spec.name in uuids:
                gpu.uuid = ids[i] if i < len(ids) else None
        rows.append(row)
    _count_inventory_change(session)
    session.flush()
    node_events.inventory_told(session, listed, nodes, t, hosts)
    return rows


def _gpus(node: Node) -> node_events.Gpus:
    """The GPUs of ``node``'s row that the last reading listed (those kept :data:`ABSENT`
    left out), as its history compares them with a new reading's."""
    listed = [gpu for gpu in node.gpus if gpu.memory != ABSENT]
    return node_events.Gpus(len(listed), node.gpu_type, listed[0].memory if listed else 0)


def _automatic(node: Node | Gpu) -> bool:
    """Whether the cordon of ``node`` (or of a GPU) is one the control plane made itself and
    takes back by itself or forgets with the node: the health check's of a GPU, the health
    program's or the backend's (their marks), or the one after failed launches."""
    reason = node.cordon_reason
    if isinstance(node, Gpu):
        return reason.startswith(node_states.HEALTH_REASON)
    marks = (node_states.PROGRAM_REASON, node_states.EXECUTOR_REASON)
    launches = node.launch_failures > 0 and reason.startswith(
        f"{node.launch_failures}{node_states.LAUNCHES_REASON}"
    )
    return reason.startswith(marks) or launches


def _absent_gpu(node: Node, gpu: Gpu) -> None:
    """Mark ``gpu`` of ``node`` absent when an admin's cordon holds it, else delete it."""
    if gpu.cordoned_at is not None and not _automatic(gpu):
        gpu.memory = ABSENT
    else:
        node.gpus.remove(gpu)  # delete-orphan


def _keep_absent(node: Node) -> bool:
    """Mark ``node``, missing from the reading, absent with what an admin set on it (its
    automatic closes forgotten); False: nothing an admin set holds, delete its row."""
    if node.cordoned_at is not None and _automatic(node):
        node.cordoned_at, node.cordon_reason, node.draining = None, "", False
    node.launch_failures = 0
    for gpu in list(node.gpus):
        _absent_gpu(node, gpu)
    node.position = ABSENT
    return node.cordoned_at is not None or node.close_at is not None or bool(node.gpus)


def list_nodes(session: Session) -> list[Node]:
    """The inventory in node order, GPUs loaded: the nodes and GPUs the last reading reported
    (those kept :data:`ABSENT` are left out)."""
    query = (
        select(Node)
        .where(Node.position != ABSENT)
        .options(selectinload(Node.gpus.and_(Gpu.memory != ABSENT)))
        .order_by(Node.position, Node.id)
        .execution_options(populate_existing=True)  # GPUs loaded before with absent ones
    )
    return list(session.scalars(query))


def get_node(session: Session, name: str) -> Node:
    """Node ``name`` as :func:`list_nodes` lists it, GPUs loaded; :class:`NotFoundError` on
    ``name`` for a name the last reading did not report (a node kept :data:`ABSENT` too),
    saying where its history is when it has one, else where the nodes are listed."""
    query = (
        select(Node)
        .where(Node.name == name, Node.position != ABSENT)
        .options(selectinload(Node.gpus.and_(Gpu.memory != ABSENT)))
        .execution_options(populate_existing=True)
    )
    node = session.scalar(query)
    if node is None:
        hint = node_events.NODES_LISTED
        if node_events.has_history(session, name):
            hint = f"not in the inventory now; GET /cluster/nodes/{name}/events has its history"
        raise NotFoundError("node", name, "name", hint)
    return node


def clear_inventory(session: Session) -> None:
    """Remove every node and GPU."""
    session.execute(delete(Node))
    _count_inventory_change(session)
    session.flush()


INVENTORY = "inventory"
"""The :class:`~danlu.server.db.models.Counter` row that counts inventory changes."""

_Rows = tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]


def _count_inventory_change(session: Session) -> None:
    """Count an inventory change, in the caller's transaction. The row is made by the
    migrations; a store without it (emptied, or made from the models alone) gets it here,
    and a transaction that finds it made meanwhile by another counts on top of it."""
    bump = (
        update(Counter)
        .where(Counter.name == INVENTORY)
        .values(value=Counter.value + 1)
        .execution_options(synchronize_session=False)
    )
    if _rowcount(session.execute(bump)):
        return
    values = {"name": INVENTORY, "value": 1}
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        made = session.execute(postgresql.insert(Counter).values(values).on_conflict_do_nothing())
    elif dialect == "sqlite":
        made = session.execute(sqlite.insert(Counter).values(values).on_conflict_do_nothing())
    else:  # no other dialect is supported: a plain INSERT
        made = session.execute(insert(Counter).values(values))
    if not _rowcount(made):
        session.execute(bump)


def _rowcount(result: object) -> int:
    return int(getattr(result, "rowcount", 0) or 0)


class InventoryMemo:
    """The last inventory :func:`load_cluster` built, with the inventory revision and the rows
    it was built from: while the revision is the same (or, without one, the rows read the
    same), the same :class:`Cluster` object is returned. Building the nodes and the cluster's
    arrays is most of the cost at 1,000 nodes, and reading the rows ~6 ms. Keep one per
    process."""

    def __init__(self) -> None:
        self._revision: int | None = None
        self._rows: _Rows | None = None
        self._cluster: Cluster | None = None

    def at(self, revision: int | None) -> Cluster | None:
        """The cluster built at inventory ``revision`` last time, or None (no revision known)."""
        if revision is None or revision != self._revision:
            return None
        return self._cluster

    def get(self, rows: _Rows) -> Cluster | None:
        """The cluster built from ``rows`` last time, or None."""
        return self._cluster if rows == self._rows else None

    def put(self, rows: _Rows, cluster: Cluster, revision: int | None = None) -> None:
        """Remember ``cluster`` as built from ``rows`` at inventory ``revision``."""
        self._rows, self._cluster, self._revision = rows, cluster, revision


def load_cluster(session: Session, memo: InventoryMemo | None = None) -> Cluster:
    """The inventory as a :class:`danlu.core.cluster.Cluster` (node index = position), the
    nodes and GPUs kept :data:`ABSENT` left out.

    Two column queries, no ORM objects: at 1,000 nodes loading ``Node`` rows with their
    ``Gpu`` children took tens of ms. ``memo``: when the inventory revision is the one it
    last saw, its cluster (the same object) is returned without reading the inventory; when
    the rows read are those it last saw, without building anything."""
    session.flush()  # the queries below run on the connection, without the ORM's autoflush
    connection = session.connection()
    revision: int | None = None
    if memo is not None:
        revision = connection.execute(
            select(Counter.value).where(Counter.name == INVENTORY)
        ).scalar_one_or_none()
        known_cluster = memo.at(revision)
        if known_cluster is not None:
            return known_cluster
    gpu_rows = tuple_rows(  # plain tuples: the memo compares them
        connection,
        select(Gpu.node_id, func.count(Gpu.id), func.min(Gpu.memory))
        .where(Gpu.memory != ABSENT)
        .group_by(Gpu.node_id)
        .order_by(Gpu.node_id),
    )
    node_rows = tuple_rows(
        connection,
        select(Node.id, Node.name, Node.gpu_type, Node.cpu_milli, Node.memory, Node.rack)
        .where(Node.position != ABSENT)
        .order_by(Node.position, Node.id),
    )
    rows = (gpu_rows, node_rows)
    if memo is not None:
        known_cluster = memo.get(rows)
        if known_cluster is not None:
            memo.put(rows, known_cluster, revision)
            return known_cluster
    per_node = {node_id: (count, memory) for node_id, count, memory in gpu_rows}
    nodes: list[CoreNode] = []
    for node_id, name, type_name, cpu_milli, memory, rack in node_rows:
        count, gpu_memory = per_node.get(node_id, (0, 0))
        known = GPU_TYPES.get(type_name)
        kind = (
            known
            if known is not None and known.memory == gpu_memory
            else GpuType(type_name, gpu_memory)
        )
        nodes.append(
            CoreNode(
                name=name,
                gpus=int(count),
                gpu_type=kind,
                cpu_milli=cpu_milli,
                memory=memory,
                rack=rack,
            )
        )
    cluster = Cluster(tuple(nodes), name="danlu")
    if memo is not None:
        memo.put(rows, cluster, revision)
    return cluster


@dataclass(frozen=True, slots=True)
class OverCommit:
    """A GPU whose jobs hold more memory than it has: the inventory reported it smaller
    after they were placed (``--fake-gpus 4x40GiB`` after ``4x80GiB`` on the same home, a
    MIG or driver change). Its jobs run on (they are alive); nothing new is placed on it
    while they hold more than it has (the scheduler sees no free memory there)."""

    node: str
    gpu: int
    memory: int
    """The GPU's memory now, in bytes."""
    held: int
    """The memory its jobs' shares hold, in bytes (more than :attr:`memory`)."""
    jobs: tuple[str, ...]
    """The ids of the jobs holding a share of it."""

    def describe(self) -> str:
        """``GPU node:0 has 40.0 GiB, its jobs hold 65.0 GiB`` (for logs and ``why``)."""
        return (
            f"GPU {self.node}:{self.gpu} has {format_bytes(self.memory)}, "
            f"its jobs hold {format_bytes(self.held)}"
        )


def over_committed(session: Session) -> list[OverCommit]:
    """The GPUs of the inventory (those the last reading reported) whose holding jobs'
    shares hold more memory than the GPU has, in node and GPU order."""
    held: dict[tuple[str, int], list[ShareRecord]] = {}
    for share in list_shares(session):
        held.setdefault((share.node, share.gpu), []).append(share)
    if not held:
        return []
    out: list[OverCommit] = []
    for node in list_nodes(session):
        for gpu in node.gpus:
            shares = held.get((node.name, gpu.index), [])
            total = sum(s.memory for s in shares)
            if shares and total > gpu.memory:
                jobs = tuple(sorted({s.job_id for s in shares}))
                out.append(OverCommit(node.name, gpu.index, gpu.memory, total, jobs))
    return out


def list_shares(session: Session) -> list[ShareRecord]:
    """Every GPU share held now (RUNNING and PREEMPTING jobs), by node and GPU."""
    holding = (JobState.RUNNING.value, JobState.PREEMPTING.value)
    rows = session.execute(
        select(Job.id, Job.state, Job.allocation, Job.user_id).where(Job.state.in_(holding))
    )
    out = [
        ShareRecord(
            job_id, state, s["node"], int(s["gpu"]), int(s["milli"]), int(s["memory"]), user_id
        )
        for job_id, state, allocation, user_id in rows
        for s in allocation or ()
    ]
    return sorted(out, key=lambda r: (r.node, r.gpu, r.job_id))
