"""A node's history (``GET /cluster/nodes/{name}/events``, ``danlu node show NAME``): what
happened to it, one :class:`~danlu.server.db.models.NodeEvent` row a change, written in the
change's own transaction (so a change rolled back leaves none).

The kinds (:data:`KINDS`):

- ``joined``: the inventory lists a name it never listed before (with its GPUs);
- ``lost``: a reading of the inventory no longer lists it, or its backend reports it out of
  service (Slurm: down, drained; with the backend's why);
- ``back``: listed again, or served again by its backend, after it was lost;
- ``gpus_changed``: listed still, with other GPUs (``8x H100 -> 4x H100``; their memory
  too where only that changed);
- ``changed``: listed still, in another rack or with other CPUs or host memory (``rack r1 ->
  r2; 64 -> 32 CPUs; 512.0GiB -> 256.0GiB memory``, what changed alone); a reading that
  changes its GPUs too writes both;
- ``cordoned``, ``drained``: closed to new work now, with the reason and the end; one GPU's
  own close names it (``GPU 2: ...``). A close again that changes its reason or its end is
  one more; one that changes nothing is told of not at all;
- ``scheduled``: a cordon or drain set for a later time (``drain at ... until ...``);
- ``uncordoned``: open again (what it was, and why), or a scheduled close dropped.

``actor`` is the name of the user who did it, null for the control plane itself: the
inventory's readings, the backend's reports, the health checks' closes and reopenings, the
cordon after failed launches, a scheduled close taking effect and a window's end. A close
the backend makes (its node ``lost``) and takes back (``back``) is told by those two alone.

``joined``, ``lost`` and ``back`` say whether the node is there: each is written only when
it changes that (:func:`presence`, the last of them), so readings that keep finding a node
gone, or the backend reporting it down again and again, add nothing. The history is kept by
the node's name, not its row: a node gone from the inventory loses its row (unless an admin's
close holds it) and finds its history again when it is listed under that name.

Kept for good, as job and user events are: ``DANLU_RETENTION_DAYS`` deletes what finished
jobs left behind, never a history. Rows come from admins' changes and from a node's
comings, goings and closes, a few a node; and the history is what an operator asks after
long after (who drained it and why, when it was lost, since when it has 4 GPUs). A node
whose backend reports it down and up at every reading adds two a reading: that flapping is
what the history is for.

Events of one node take ids in the order they commit: each is written while its
transaction holds the node's row locked (a cordon's and uncordon's, the closes the control
plane makes, the inventory's replacement lock the rows they change; :func:`backend_told`
locks those it tells of), so reading on after the last id seen (``after_id``) misses none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from sqlalchemy import func, insert, select
from sqlalchemy.orm import Session

from danlu.core.cluster import Node as CoreNode
from danlu.core.units import format_bytes
from danlu.server.db.models import Node, NodeEvent, User
from danlu.server.errors import NotFoundError
from danlu.server.services import history
from danlu.server.services.common import resolve_now, shown_time

JOINED: Final = "joined"
LOST: Final = "lost"
BACK: Final = "back"
GPUS_CHANGED: Final = "gpus_changed"
CHANGED: Final = "changed"
CORDONED: Final = "cordoned"
DRAINED: Final = "drained"
SCHEDULED: Final = "scheduled"
UNCORDONED: Final = "uncordoned"
KINDS: Final = (
    JOINED,
    LOST,
    BACK,
    GPUS_CHANGED,
    CHANGED,
    CORDONED,
    DRAINED,
    SCHEDULED,
    UNCORDONED,
)
PRESENCE: Final = (JOINED, LOST, BACK)
"""The kinds that say whether the node is there (:func:`presence`)."""

MAX_EVENTS: Final = history.MAX_EVENTS

NODES_LISTED: Final = "danlu nodes, GET /cluster/nodes, lists them"
"""The hint of a 404 for a node name that is neither listed nor has a history (as a
listing's unknown user or project names ``danlu user ls, GET /users``)."""


def record(
    session: Session,
    node: str,
    kind: str,
    actor: User | None = None,
    detail: str = "",
    now: float | None = None,
) -> NodeEvent:
    """Add the event ``kind`` (one of :data:`KINDS`) of node ``node`` (its name), done by
    ``actor`` (None: the control plane), ``detail`` saying what; the caller's transaction
    holds the node's row locked (see the module's docstring)."""
    if kind not in KINDS:
        raise ValueError(f"{kind!r} is not a node event's kind; one of {', '.join(KINDS)}")
    event = NodeEvent(
        node=node,
        time=resolve_now(now),
        kind=kind,
        actor=None if actor is None else actor.name,
        detail=detail,
    )
    session.add(event)
    session.flush()
    return event


def list_node_events(
    session: Session, name: str, *, after_id: int = 0, limit: int = 100, tail: bool = False
) -> list[NodeEvent]:
    """Node ``name``'s events with ``id > after_id``, oldest first; at most ``limit``: the
    oldest such, or with ``tail`` the newest (in order too)."""
    query = select(NodeEvent).where(NodeEvent.node == name)
    return history.page(session, query, NodeEvent.id, after_id=after_id, limit=limit, tail=tail)


def has_history(session: Session, name: str) -> bool:
    """Whether node ``name`` has any event (a node gone from the inventory may have)."""
    found = session.scalar(select(NodeEvent.id).where(NodeEvent.node == name).limit(1))
    return found is not None


def check_known(session: Session, name: str) -> None:
    """:class:`NotFoundError` on ``name`` (saying where the nodes are listed) unless node
    ``name`` has a row (listed, or kept for an admin's close while missing) or a history."""
    row = session.scalar(select(Node.id).where(Node.name == name))
    if row is None and not has_history(session, name):
        raise NotFoundError("node", name, "name", NODES_LISTED)


def presence(session: Session) -> dict[str, str]:
    """Each node's last ``joined``, ``lost`` or ``back`` event's kind, by name: ``lost``,
    it is gone (from the inventory, or out of its backend's service); else it is there."""
    last = (
        select(func.max(NodeEvent.id))
        .where(NodeEvent.kind.in_(PRESENCE))
        .group_by(NodeEvent.node)
        .scalar_subquery()
    )
    rows = session.execute(select(NodeEvent.node, NodeEvent.kind).where(NodeEvent.id.in_(last)))
    return {str(name): str(kind) for name, kind in rows}


# -- closes --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Scheduled:
    """A cordon or drain set for ``at`` (POSIX seconds), ending ``until``, with ``reason``."""

    drain: bool
    at: float
    until: float | None
    reason: str

    def text(self) -> str:
        """``drain at 2026-12-01T02:00:00+00:00 until ...: new DIMMs``."""
        action = "drain" if self.drain else "cordon"
        ends = "" if self.until is None else f" until {shown_time(self.until)}"
        return f"{action} at {shown_time(self.at)}{ends}" + (
            f": {self.reason}" if self.reason else ""
        )


@dataclass(frozen=True, slots=True)
class Closing:
    """A node's close (or one GPU's) as it stood at one moment: ``state`` (``ready``,
    ``cordoned``, ``draining``), its reason, its end (``ends``) and what is scheduled."""

    state: str
    reason: str
    ends: float | None = None
    scheduled: Scheduled | None = None


def close_told(
    session: Session,
    node: str,
    before: Closing,
    after: Closing,
    actor: User | None = None,
    *,
    gpu: int | None = None,
    how: str = "",
    now: float | None = None,
) -> NodeEvent | None:
    """Record what a change of node ``node``'s close (``gpu``: of its GPU at that index)
    from ``before`` to ``after`` did, by ``actor``, ``how`` saying why where that is not
    the actor's own doing (``as scheduled``); None when it changed nothing."""
    if before == after:
        return None
    where = "" if gpu is None else f"GPU {gpu}: "
    now_closed = (after.state, after.reason, after.ends)
    if after.state != "ready" and now_closed != (before.state, before.reason, before.ends):
        kind = DRAINED if after.state == "draining" else CORDONED
        parts = [after.reason, "" if after.ends is None else f"until {shown_time(after.ends)}"]
    elif after.state == "ready" and before.state != "ready":
        kind = UNCORDONED
        parts = [f"was {before.state}" + (f": {before.reason}" if before.reason else "")]
        if before.scheduled is not None and after.scheduled is None:
            parts.append(f"dropped the scheduled {before.scheduled.text()}")
    elif after.scheduled is not None:
        kind, parts = SCHEDULED, [after.scheduled.text()]
    elif before.scheduled is not None:
        kind, parts = UNCORDONED, [f"dropped the scheduled {before.scheduled.text()}"]
    else:
        return None
    detail = where + "; ".join(part for part in (*parts, how) if part)
    return record(session, node, kind, actor, detail, now)


# -- the inventory -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Gpus:
    """A node's GPUs as the inventory lists them: how many, their type and memory (bytes)."""

    count: int
    type: str
    memory: int

    @classmethod
    def of(cls, node: CoreNode) -> Gpus:
        """The GPUs of ``node``, a reading's."""
        return cls(node.gpus, node.gpu_type.name, node.gpu_type.memory)

    def text(self, memory: bool = False) -> str:
        """``8x H100`` (``memory``: ``8x H100 80.0GiB``), ``no GPUs``."""
        if self.count <= 0:
            return "no GPUs"
        return f"{self.count}x {self.type}" + (f" {format_bytes(self.memory)}" if memory else "")


@dataclass(frozen=True, slots=True)
class Host:
    """A node's place and host resources as the inventory lists them: its rack, its CPUs
    (milli-cores) and its host memory (bytes)."""

    rack: str
    cpu_milli: int
    memory: int

    @classmethod
    def of(cls, node: CoreNode | Node) -> Host:
        """The rack, CPUs and memory of ``node``, a reading's or its stored row's."""
        return cls(node.rack, node.cpu_milli, node.memory)

    def changes(self, new: Host) -> str:
        """What differs in ``new``, the fields that changed alone: ``rack r1 -> r2; 64 ->
        32 CPUs; 512.0GiB -> 256.0GiB memory``; empty when nothing did."""
        parts: list[str] = []
        if new.rack != self.rack:
            parts.append(f"rack {self.rack} -> {new.rack}")
        if new.cpu_milli != self.cpu_milli:
            parts.append(f"{_cpus(self.cpu_milli)} -> {_cpus(new.cpu_milli)} CPUs")
        if new.memory != self.memory:
            parts.append(f"{format_bytes(self.memory)} -> {format_bytes(new.memory)} memory")
        return "; ".join(parts)


def _cpus(milli: int) -> str:
    """``64`` for 64000 milli-cores, ``0.5`` for 500."""
    return f"{milli / 1000:g}"


def inventory_told(
    session: Session,
    before: Mapping[str, Gpus],
    after: Sequence[CoreNode],
    now: float | None = None,
    hosts: Mapping[str, Host] | None = None,
) -> int:
    """Record what a new reading of the inventory, ``after``, changed from ``before`` (the
    nodes the last reading listed, by name, with their GPUs; ``hosts``: with their racks,
    CPUs and memory, none compared where left out): ``joined`` for a name never listed,
    ``back`` for one listed again, ``lost`` for one no longer listed (none where it was lost
    already), ``gpus_changed`` for one listed with other GPUs, ``changed`` for one listed in
    another rack or with other CPUs or memory, each at ``now`` (None: the clock). The caller
    holds the nodes' rows (:func:`~danlu.server.services.cluster.replace_inventory`).
    Returns how many events were written."""
    t = resolve_now(now)
    hosts = hosts or {}
    listed = {node.name: Gpus.of(node) for node in after}
    listed_hosts = {node.name: Host.of(node) for node in after}
    came = [name for name in listed if name not in before]
    gone = [name for name in before if name not in listed]
    rows: list[tuple[str, str, str]] = []
    if came or gone:
        last = presence(session)
        for name in gone:
            if last.get(name) != LOST:
                rows.append((name, LOST, "not in the inventory's reading"))
        for name in came:
            what = listed[name].text()
            if name in last:
                rows.append((name, BACK, f"in the inventory again: {what}"))
            else:
                rows.append((name, JOINED, f"in the inventory: {what}"))
    for name, new in listed.items():
        old = before.get(name)
        if old is not None and old != new:
            memory = old.text() == new.text()  # only the memory changed: say it
            rows.append((name, GPUS_CHANGED, f"{old.text(memory)} -> {new.text(memory)}"))
        old_host = hosts.get(name) if old is not None else None
        if old_host is not None and (changes := old_host.changes(listed_hosts[name])):
            rows.append((name, CHANGED, changes))
    if rows:
        session.execute(
            insert(NodeEvent),
            [
                {"node": name, "time": t, "kind": kind, "actor": None, "detail": detail}
                for name, kind, detail in rows
            ],
        )
    return len(rows)


def backend_told(session: Session, closed: Mapping[str, str], now: float | None = None) -> int:
    """Record the nodes the executor's backend reports out of service (``closed``: name ->
    why) as ``lost``, and those it served again after that as ``back``: of the nodes the
    last reading of the inventory listed, each when that changes whether it is there. Their
    rows are locked first (in the order of their ids, as a flush writes them). Returns how
    many events were written."""
    last = presence(session)
    wanted = [n for n in closed if last.get(n) != LOST]
    wanted += [n for n, kind in last.items() if kind == LOST and n not in closed]
    if not wanted:
        return 0
    held = (
        select(Node.name)
        # a node the last reading lacked is kept at position -1 (cluster.ABSENT): its
        # coming back is the inventory's to tell
        .where(Node.name.in_(sorted(wanted)), Node.position >= 0)
        .order_by(Node.id)
        .with_for_update()
    )
    t = resolve_now(now)
    told = 0
    for name in session.scalars(held):
        if name in closed:
            why = f"its backend reports it out of service: {closed[name]}"
            record(session, name, LOST, None, why, t)
        else:
            record(session, name, BACK, None, "its backend serves it again", t)
        told += 1
    return told
