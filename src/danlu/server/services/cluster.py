"""The GPU inventory: nodes and their GPUs, as reported by an executor or a fake config."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, selectinload

from danlu.core.cluster import GPU_TYPES, Cluster, GpuType
from danlu.core.cluster import Node as CoreNode
from danlu.core.errors import ConfigError
from danlu.core.state import JobState
from danlu.server.db.models import Counter, Gpu, Job, Node
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


def replace_inventory(
    session: Session,
    nodes: Sequence[CoreNode],
    uuids: Mapping[str, Sequence[str]] | None = None,
    fake: bool = False,
    now: float | None = None,
) -> list[Node]:
    """Make the stored inventory exactly ``nodes`` (in this order), with optional GPU UUIDs
    per node name (a node ``uuids`` does not name keeps those it had). Nodes keep their
    names, so allocations stored by name stay valid."""
    t = resolve_now(now)
    names = [n.name for n in nodes]
    if len(set(names)) != len(names):
        raise ConfigError(f"duplicate node names in the inventory: {names}")
    uuids = uuids or {}
    existing = {n.name: n for n in session.scalars(select(Node).options(selectinload(Node.gpus)))}
    for name in set(existing) - set(names):
        session.delete(existing.pop(name))
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
        gpus = list(row.gpus)
        del row.gpus[spec.gpus :]  # extra GPUs (delete-orphan) go first
        for i in range(spec.gpus):
            gpu = gpus[i] if i < len(gpus) else None
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
    return rows


def list_nodes(session: Session) -> list[Node]:
    """The inventory in node order, GPUs loaded."""
    query = select(Node).options(selectinload(Node.gpus)).order_by(Node.position, Node.id)
    return list(session.scalars(query))


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
    """The inventory as a :class:`danlu.core.cluster.Cluster` (node index = position).

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
        .group_by(Gpu.node_id)
        .order_by(Gpu.node_id),
    )
    node_rows = tuple_rows(
        connection,
        select(Node.id, Node.name, Node.gpu_type, Node.cpu_milli, Node.memory, Node.rack).order_by(
            Node.position, Node.id
        ),
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


def list_shares(session: Session) -> list[ShareRecord]:
    """Every GPU share held now (RUNNING and PREEMPTING jobs), by node and GPU."""
    holding = (JobState.RUNNING.value, JobState.PREEMPTING.value)
    rows = session.execute(select(Job.id, Job.state, Job.allocation).where(Job.state.in_(holding)))
    out = [
        ShareRecord(job_id, state, s["node"], int(s["gpu"]), int(s["milli"]), int(s["memory"]))
        for job_id, state, allocation in rows
        for s in allocation or ()
    ]
    return sorted(out, key=lambda r: (r.node, r.gpu, r.job_id))
