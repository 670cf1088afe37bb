"""Nodes closed to new work: cordon, drain, uncordon, and closing a node that keeps failing
launches.

A **cordoned** node takes no new work: the scheduler starts, grows and moves nothing onto
its GPUs (:attr:`~danlu.sched.view.ClusterView.closed_nodes`), and the jobs already there
run on as they are. A **drain** is a cordon whose jobs are also stopped: every preemptible
job with a GPU there is preempted by checkpoint in the next scheduling round and resumes
elsewhere; a job that is not preemptible runs to its end. Either lasts until an
**uncordon**. A cordon or a drain may also be scheduled for a later time (a maintenance
window): the node stays open until then, and the reconcile loop applies it when the time
comes (:func:`close_due`); jobs started meanwhile are preempted by checkpoint then, like
any drained node's. A cordon or a drain, now or scheduled, may have an end (``until``: the
window's end): the reconcile loop uncordons the node then (:func:`open_due`); one without an
end lasts until an uncordon. The reconcile loop cordons a node by itself once
:data:`DEFAULT_LAUNCH_FAILURE_LIMIT` launches in a row failed there for the node's own
reasons (a full disk, no processes left; :func:`~danlu.executors.is_node_fault`; or a run
a poll found could not start there, :attr:`~danlu.executors.ExecStatus.start_failed_on`), so
the queue stops feeding jobs to a broken machine. A node's state survives inventory refreshes
and restarts: its row stays while it keeps its name.

One **GPU** may be cordoned or drained on its own (``danlu cordon NODE --gpu N``, or the GPU
health check, :mod:`danlu.server.health`): the same, for that GPU alone, while the node's
other GPUs take work as before. Uncordoning a node leaves its GPUs' cordons as they are;
``uncordon(..., gpu=N)`` opens one GPU.

Each close and opening that changes something is told in the node's history, by whom
(:mod:`~danlu.server.services.node_events`), in the transaction that makes it.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Final

from sqlalchemy import Select, select
from sqlalchemy.orm import InstrumentedAttribute, Session

from danlu.core.cluster import Cluster
from danlu.core.errors import SpecError
from danlu.core.values import check_values
from danlu.sched.view import JobStatus, Plan, Preempt
from danlu.server.db.models import Gpu, Node, User
from danlu.server.errors import NotFoundError
from danlu.server.services import node_events
from danlu.server.services.common import resolve_now, shown_time

DEFAULT_LAUNCH_FAILURE_LIMIT: Final = 3
"""Launches in a row failing for the node's reasons after which the node is cordoned."""

MAX_REASON: Final = 500
"""Characters of an operator's cordon reason that are kept."""


@dataclass(frozen=True, slots=True)
class Closed:
    """The nodes closed to new work, by index in a cluster, and those of them draining."""

    nodes: frozenset[int] = frozenset()
    draining: Mapping[int, str] = field(default_factory=dict)
    """Draining node index -> its name."""
    gpus: frozenset[int] = frozenset()
    """GPUs closed on their own, in the cluster's flat GPU numbering."""
    draining_gpus: Mapping[int, str] = field(default_factory=dict)
    """Draining GPU (flat numbering) -> ``NODE GPU N``."""


STATES: Final = ("ready", "cordoned", "draining")
"""A node's states (:func:`state`)."""


def state(node: Node | Gpu) -> str:
    """``ready``, ``cordoned`` or ``draining`` (a drain asked for: the jobs there are being
    stopped; it stays so, taking no new work, until uncordoned), of a node or of one GPU."""
    if node.cordoned_at is None:
        return "ready"
    return "draining" if node.draining else "cordoned"


def _seen(node: Node | Gpu) -> node_events.Closing:
    """The close of ``node`` (or of one GPU) as it stands, to tell what a change of it did
    (:func:`~danlu.server.services.node_events.close_told`)."""
    if isinstance(node, Gpu):
        return node_events.Closing(state(node), node.cordon_reason)
    scheduled = None
    if node.close_at is not None:
        scheduled = node_events.Scheduled(
            node.close_drain, node.close_at, node.close_until, node.close_reason
        )
    return node_events.Closing(state(node), node.cordon_reason, node.open_at, scheduled)


def _node(session: Session, name: str) -> Node:
    """Node ``name``, its row locked until the transaction ends and read again: a cordon,
    an uncordon and :func:`close_due` each write what they read (the ORM writes the columns
    it saw change), so one waits for the other's commit and starts from what it wrote."""
    query = (
        select(Node)
        .where(Node.name == name)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    node = session.scalar(query)
    if node is None:
        raise NotFoundError("node", name, "name", node_events.NODES_LISTED)
    return node


def _locked(query: Select[Node]) -> Select[Node]:
    """``query`` (of nodes) with its rows locked until the transaction ends and read again,
    as :func:`_node` does for one: the closes and reopens the control plane makes by itself
    (the health program's, the backend's, after failed launches) write what they read, and
    read without a lock they wrote over an admin's cordon or drain committed meanwhile
    (which the program's passing then took back). Locked in the order of their ids, the
    order in which a flush writes several (an inventory's replacement): neither waits for a
    row the other holds while holding one it wants."""
    locked = query.order_by(Node.id).with_for_update()
    return locked.execution_options(populate_existing=True)


def _gpu(node: Node, index: int) -> Gpu:
    found = next((g for g in node.gpus if g.index == index), None)
    if found is None:
        raise NotFoundError("GPU", f"{node.name} GPU {index}", "gpu")
    return found


def _close_gpu(gpu: Gpu, reason: str, drain: bool, t: float) -> None:
    if gpu.cordoned_at is None:
        gpu.cordoned_at = t
    gpu.cordon_reason = reason.strip()[:MAX_REASON] or gpu.cordon_reason
    gpu.draining = gpu.draining or drain


def cordon(
    session: Session,
    name: str,
    reason: str = "",
    *,
    drain: bool = False,
    at: float | None = None,
    gpu: int | None = None,
    now: float | None = None,
    until: float | None = None,
    by: User | None = None,
) -> Node:
    """Close node ``name`` to new work (``drain``: and preempt its jobs by checkpoint).
    Cordoning a cordoned node keeps when it was cordoned and takes the new reason; a drain
    of a cordoned node turns it into a drain. ``at`` after ``now``: schedule it for then
    instead (replacing a schedule the node had); the node stays as it is until then. One done
    now drops a schedule it covers: a drain any, a cordon a scheduled cordon (a scheduled
    drain stays to come, the maintenance it was set for).
    ``gpu``: close only the node's GPU at that index, now (``at`` is for whole nodes). With
    no reason, a node the health program or the executor's backend had closed takes
    :data:`ADMIN_REASON`: it stays closed when what closed it passes; so does a GPU the
    health check had closed (it stays closed when a reading lacks it for a while). A reason
    that begins with such a close's mark is a :class:`SpecError` on ``reason``.

    ``until``: the close ends then (the end of a maintenance window: the node is uncordoned
    by :func:`open_due`); later than ``now``, and than ``at`` when that is later than now,
    else a :class:`SpecError` on ``until``; for whole nodes only. A close done now replaces
    the end the node's close had (none given: it lasts until uncordoned); a scheduled one
    keeps it, its own end coming with it.

    The node's history tells what it changed (:mod:`~danlu.server.services.node_events`),
    done by ``by`` (None: the control plane)."""
    check_values(reason, "reason")  # no NUL characters: PostgreSQL's text takes none
    _check_admin_reason(reason, gpu is not None)
    _check_until(until, at, gpu, resolve_now(now))
    return _close(session, name, reason, drain=drain, at=at, gpu=gpu, now=now, until=until, by=by)


def _check_until(until: float | None, at: float | None, gpu: int | None, t: float) -> None:
    """:class:`SpecError` on ``until`` for an end that is not later than the close's start
    (``at`` when later than ``t``, else ``t``: a window that would end before it began, or
    has ended already), or for one GPU's close."""
    if until is None:
        return
    if gpu is not None:
        raise SpecError(
            "until", "a cordon or drain of one GPU has no end; leave out until (or gpu)"
        )
    if not math.isfinite(until):
        raise SpecError("until", f"must be a time (POSIX seconds), got {until}")
    starts = at if at is not None and at > t else t
    if until <= starts:
        what = "at, when the window begins" if starts != t else "now: that end has passed"
        raise SpecError(
            "until",
            f"must be later than {what} ({shown_time(until)} is not later than "
            f"{shown_time(starts)}); give the time the window ends",
        )


def _check_admin_reason(reason: str, gpu: bool) -> None:
    """:class:`SpecError` on ``reason`` for an admin's reason that begins with a mark the
    control plane puts on the closes it makes itself and takes back by itself (a node's:
    the health program's, the backend's; a GPU's: the health check's): such a cordon was
    read as theirs, reopened when they passed (every start of the control plane reopened a
    node whose reason began ``executor: ``) or forgotten when a reading lacked the node."""
    marks = (HEALTH_REASON,) if gpu else _MARKS
    given = reason.strip()
    mark = next((m for m in marks if given.startswith(m)), None)
    if mark is not None:
        example = given[len(mark) :].strip()[:40] or "maintenance"
        raise SpecError(
            "reason",
            f"{given[:60]!r} begins with {mark!r}, the mark of a close the control plane "
            "makes itself and takes back by itself (the cordon would be undone when that "
            f"passes): word it otherwise, e.g. {example!r}",
        )


def _close(
    session: Session,
    name: str,
    reason: str,
    *,
    drain: bool,
    at: float | None,
    gpu: int | None,
    now: float | None,
    until: float | None = None,
    by: User | None = None,
    how: str = "",
) -> Node:
    """:func:`cordon` without the checks of an admin's reason and end (:func:`close_due`
    applies a reason and an end stored when the close was scheduled), told in the node's
    history as done by ``by``, ``how`` saying why (``as scheduled``)."""
    t = resolve_now(now)
    node = _node(session, name)
    if gpu is not None:
        if at is not None and at > t:
            raise SpecError("at", "a cordon or drain of one GPU is done now; leave out at")
        closing = _gpu(node, gpu)
        before = _seen(closing)
        given = reason
        if not given.strip() and closing.cordon_reason.startswith(HEALTH_REASON):
            # the cordon is an admin's now, as a node's is: a GPU closed by the health check
            # alone is forgotten when a reading lacks it (cluster._automatic), an admin's kept
            given = ADMIN_REASON
        _close_gpu(closing, given, drain, t)
        session.flush()
        after = _seen(closing)
        node_events.close_told(session, node.name, before, after, by, gpu=gpu, how=how, now=t)
        return node
    before = _seen(node)
    if at is not None and at > t:
        node.close_at = at
        node.close_drain = drain
        node.close_reason = reason.strip()[:MAX_REASON]
        node.close_until = until
    else:
        _close_now(node, reason, drain, t, until)
    session.flush()
    node_events.close_told(session, node.name, before, _seen(node), by, how=how, now=t)
    return node


def _close_now(node: Node, reason: str, drain: bool, t: float, until: float | None) -> None:
    """Close ``node`` at ``t`` with ``reason``, until ``until`` (see :func:`cordon`)."""
    if node.cordoned_at is None:
        node.cordoned_at = t
    given = reason.strip()[:MAX_REASON]
    if not given and node.cordon_reason.startswith(_MARKS):
        # the cordon is an admin's now: the health program's or the backend's passing must
        # not reopen the node (reopen_marked opens only nodes whose reason has their mark)
        given = ADMIN_REASON
    node.cordon_reason = given or node.cordon_reason
    node.draining = node.draining or drain
    node.open_at = until  # this close's end replaces the one before (none: no end)
    if node.close_at is not None and (node.draining or not node.close_drain):
        _drop_scheduled(node)


def _drop_scheduled(node: Node) -> None:
    """Forget the cordon or drain scheduled for ``node``, with its end."""
    node.close_at, node.close_drain, node.close_reason = None, False, ""
    node.close_until = None


def uncordon(
    session: Session,
    name: str,
    gpu: int | None = None,
    *,
    by: User | None = None,
    now: float | None = None,
) -> Node:
    """Open node ``name`` to new work again (and forget its launch failures, the end its
    close had, and a cordon or drain scheduled for it); its GPUs closed on their own stay
    closed. ``gpu``: open only the node's GPU at that index. Told in the node's history as
    done by ``by`` (None: the control plane)."""
    t = resolve_now(now)
    node = _node(session, name)
    target = node if gpu is None else _gpu(node, gpu)
    before = _seen(target)
    if isinstance(target, Gpu):
        target.cordoned_at = None
        target.cordon_reason = ""
        target.draining = False
    else:
        _open(target)
        _drop_scheduled(target)
    session.flush()
    node_events.close_told(session, node.name, before, _seen(target), by, gpu=gpu, now=t)
    return node


def _open(node: Node) -> None:
    """Open ``node`` (its own close, its end and its launch failures; not its GPUs')."""
    node.cordoned_at = None
    node.cordon_reason = ""
    node.draining = False
    node.launch_failures = 0
    node.open_at = None


def close_due(session: Session, now: float | None = None) -> list[str]:
    """Apply the cordons and drains scheduled for ``now`` or before: each node is closed as
    of its scheduled time, with its reason (``scheduled cordon`` / ``scheduled drain``
    without one) and its end (:func:`open_due` opens it then). Returns their names."""
    t = resolve_now(now)
    # locked until the transaction ends (and read again, as :func:`_node` does): an
    # uncordon committed meanwhile is waited for and seen (its node is no longer due), and
    # one that comes after waits, then opens the node; locked in the order of :func:`_locked`
    # (the health program's closes lock several nodes at once too), applied in the
    # inventory's
    due = _due(session, Node.close_at, t)
    names = []
    for node in due:
        at = node.close_at if node.close_at is not None else t
        kind = "drain" if node.close_drain else "cordon"
        reason = node.close_reason or f"scheduled {kind}"
        drain, until = node.close_drain, node.close_until
        # read again (locked), closed as of its time, with its end
        _close(
            session,
            node.name,
            reason,
            drain=drain,
            at=None,
            gpu=None,
            now=at,
            until=until,
            how=AS_SCHEDULED,
        )
        _drop_scheduled(node)
        names.append(node.name)
    return names


AS_SCHEDULED: Final = "as scheduled"
"""Why the history says a scheduled cordon or drain was made (:func:`close_due`)."""


def _due(session: Session, when: InstrumentedAttribute[float | None], t: float) -> list[Node]:
    """The nodes whose ``when`` (a scheduled close's ``close_at``, a close's end
    ``open_at``) is ``t`` or before, locked and read again (:func:`_locked`), in the
    inventory's order."""
    rows = session.scalars(_locked(select(Node).where(when <= t)))
    return sorted(rows, key=lambda node: node.position)


@dataclass(frozen=True, slots=True)
class Opened:
    """A node whose cordon or drain ended (:func:`open_due`): what it was, for the log."""

    name: str
    state: str
    """``cordoned`` or ``draining``: what it was until then."""
    reason: str
    at: float
    """When its close ended (its ``open_at``)."""


def open_due(session: Session, now: float | None = None) -> list[Opened]:
    """Open the nodes whose cordon or drain ends at ``now`` or before (their ``open_at``,
    the end of a maintenance window), as :func:`uncordon` does but for a cordon or drain
    scheduled to come, which stays; their GPUs closed on their own stay closed. Locked and
    read again as :func:`close_due` reads its nodes, applied in the inventory's order."""
    t = resolve_now(now)
    opened = []
    due = _due(session, Node.open_at, t)
    for node in due:
        at = node.open_at if node.open_at is not None else t
        if node.cordoned_at is None:  # opened otherwise meanwhile: only its end is left
            node.open_at = None
            continue
        opened.append(Opened(node.name, state(node), node.cordon_reason, at))
        before = _seen(node)
        _open(node)
        node_events.close_told(session, node.name, before, _seen(node), how=WINDOW_ENDED, now=at)
    session.flush()
    return opened


WINDOW_ENDED: Final = "its window ended"
"""Why the history says a node was uncordoned at its close's end (:func:`open_due`)."""


def closed(session: Session, cluster: Cluster) -> Closed:
    """The cordoned nodes and GPUs of ``cluster`` (two queries; no index on the cordon
    columns is needed: the inventory is a few thousand rows at most)."""
    rows = session.execute(
        select(Node.name, Node.draining).where(Node.cordoned_at.is_not(None))
    ).all()
    gpu_rows = session.execute(
        select(Node.name, Gpu.index, Gpu.draining)
        .join(Gpu, Gpu.node_id == Node.id)
        .where(Gpu.cordoned_at.is_not(None))
    ).all()
    if not rows and not gpu_rows:
        return Closed()
    index = cluster.node_index
    nodes = {index[name]: bool(draining) for name, draining in rows if name in index}
    names = cluster.nodes
    draining = {i: names[i].name for i, d in nodes.items() if d}
    gpus: dict[int, bool] = {}
    labels: dict[int, str] = {}
    for name, position, gpu_draining in gpu_rows:
        node = index.get(name)
        if node is None or position >= names[node].gpus:
            continue
        flat = cluster.gpu_offset(node) + position
        gpus[flat] = bool(gpu_draining)
        labels[flat] = f"{name} GPU {position}"
    draining_gpus = {flat: labels[flat] for flat, d in gpus.items() if d}
    return Closed(frozenset(nodes), draining, frozenset(gpus), draining_gpus)


def to_drain(running: Sequence[JobStatus], closed: Closed, cluster: Cluster) -> dict[str, str]:
    """The preemptible jobs of ``running`` (as their specs say) with a GPU on a draining
    node, or on a draining GPU (``closed`` as :func:`closed` read it for ``cluster``): job
    id -> the reason to preempt it with."""
    out: dict[str, str] = {}
    draining, gpus = closed.draining, closed.draining_gpus
    if not draining and not gpus:
        return out
    for job in running:
        if not job.request.preemptible:
            continue
        shares = job.allocation.shares
        node = next((s.node for s in shares if s.node in draining), None)
        if node is not None:
            out[job.id] = f"its node {draining[node]} is being drained"
            continue
        if gpus:
            flat = (cluster.gpu_offset(s.node) + s.gpu for s in shares)
            gpu = next((i for i in flat if i in gpus), None)
            if gpu is not None:
                out[job.id] = f"its GPU ({gpus[gpu]}) is being drained"
    return out


def with_drains(plan: Plan, drains: Mapping[str, str]) -> Plan:
    """``plan`` with the jobs of ``drains`` (id -> reason) preempted, and nothing else
    planned for them (the view handed them in as not preemptible, so a policy only rebatches
    them at most)."""
    if not drains:
        return plan
    planned = {p.job_id for p in plan.preempts}
    extra = tuple(Preempt(job_id, why) for job_id, why in drains.items() if job_id not in planned)
    return replace(
        plan,
        preempts=plan.preempts + extra,
        resizes=tuple(r for r in plan.resizes if r.job_id not in drains),
        rebatches=tuple(b for b in plan.rebatches if b.job_id not in drains),
    )


HEALTH_REASON: Final = "health check: "
"""How the reason of a GPU the health check closed begins."""


def close_faulty(
    session: Session,
    faults: Sequence[tuple[str, int, str]],
    now: float | None = None,
    *,
    drain: bool = False,
) -> list[str]:
    """Cordon each GPU of ``faults`` (node name, position, what is wrong) that is open, with
    the faults found on it as the reason (``drain``: drain it, so that its jobs are
    preempted by checkpoint); a GPU closed already (by an admin, or by an earlier check)
    stays as it is, and a node or GPU no longer in the inventory is passed over. Returns the
    GPUs closed now, as ``NODE GPU N: reason``."""
    if not faults:
        return []
    t = resolve_now(now)
    reasons: dict[tuple[str, int], list[str]] = {}
    for node_name, position, reason in faults:
        found = reasons.setdefault((node_name, position), [])
        if reason not in found:
            found.append(reason)
    names = sorted({name for name, _ in reasons})
    # the nodes' rows locked first, in the order of their ids, as a cordon and the
    # inventory's replacement lock them before their GPUs: the events this writes in their
    # histories then commit in the order of their ids (node_events)
    held = select(Node.id).where(Node.name.in_(names)).order_by(Node.id).with_for_update()
    session.execute(held).all()
    # the GPUs' rows locked and read again (an admin's cordon of one GPU committed
    # meanwhile is seen, and the GPU passed over: it was written over with the health
    # check's reason, and forgotten with it once a reading lacked the GPU)
    query = (
        select(Node.name, Gpu)
        .join(Gpu, Gpu.node_id == Node.id)
        .where(Node.name.in_(names), Gpu.cordoned_at.is_(None))
        .order_by(Gpu.id)  # the order a flush writes them in
        .with_for_update(of=Gpu)
        .execution_options(populate_existing=True)
    )
    closed: list[str] = []
    for node_name, gpu in session.execute(query):
        if gpu.cordoned_at is not None:  # closed meanwhile (read again under the lock)
            continue
        what = reasons.get((node_name, gpu.index))
        if what:
            before = _seen(gpu)
            _close_gpu(gpu, HEALTH_REASON + "; ".join(what), drain, t)
            closed.append(f"{node_name} GPU {gpu.index}: {gpu.cordon_reason}")
            node_events.close_told(session, node_name, before, _seen(gpu), gpu=gpu.index, now=t)
    session.flush()
    return sorted(closed)


def faulty_since(session: Session, places: Collection[tuple[str, int]], since: float) -> list[str]:
    """The GPUs of ``places`` (node name, position) the health check closed at or after
    ``since``, as ``GPU N on NODE (fault)``, sorted: what a run there that failed may have
    failed for."""
    names = sorted({name for name, _ in places})
    if not names:
        return []
    query = (
        select(Node.name, Gpu.index, Gpu.cordon_reason)
        .join(Gpu, Gpu.node_id == Node.id)
        .where(Node.name.in_(names), Gpu.cordoned_at >= since)
    )
    wanted = set(places)
    return sorted(
        f"GPU {index} on {name} ({reason.removeprefix(HEALTH_REASON)})"
        for name, index, reason in session.execute(query)
        if (name, index) in wanted and reason.startswith(HEALTH_REASON)
    )


PROGRAM_REASON: Final = "health program: "
"""How the reason of a node the admin's health program closed begins."""
EXECUTOR_REASON: Final = "executor: "
"""How the reason of a node closed because its backend took it out of service begins
(Slurm reports it down or drained)."""
_MARKS: Final = (PROGRAM_REASON, EXECUTOR_REASON)
"""The marks of the nodes closed by something that reopens them once it passes."""
ADMIN_REASON: Final = "cordoned by an admin"
"""The reason of an admin's cordon, with none given, of a node closed with a mark."""


def close_marked(
    session: Session, reasons: Mapping[str, str], mark: str, now: float | None = None
) -> list[str]:
    """Cordon each node of ``reasons`` (name -> why) that is open, with the reason ``mark``
    + why: a node closed before with ``mark`` takes the new reason, one closed otherwise (by
    an admin, after failing launches) stays as it is. Returns the names closed now."""
    if not reasons:
        return []
    t = resolve_now(now)
    closed: list[str] = []
    for node in session.scalars(_locked(select(Node).where(Node.name.in_(sorted(reasons))))):
        text = (mark + reasons[node.name].strip())[:MAX_REASON]
        if node.cordoned_at is None:
            before = _seen(node)
            node.cordoned_at, node.cordon_reason = t, text
            closed.append(node.name)
            if mark != EXECUTOR_REASON:  # the backend's: the node's lost (backend_told)
                node_events.close_told(session, node.name, before, _seen(node), now=t)
        elif node.cordon_reason.startswith(mark):
            node.cordon_reason = text
    session.flush()
    return sorted(closed)


def reopen_marked(
    session: Session, names: Collection[str], mark: str, now: float | None = None
) -> list[str]:
    """Open the nodes of ``names`` closed with ``mark`` (their reason still begins with it,
    and they are not draining): what closed them has passed. A scheduled cordon and the
    count of failed launches stay. Returns their names."""
    if not names:
        return []
    query = select(Node).where(
        Node.name.in_(sorted(names)),
        Node.cordoned_at.is_not(None),
        Node.cordon_reason.startswith(mark, autoescape=True),
        Node.draining.is_(False),
    )
    opened: list[str] = []
    t = resolve_now(now)
    for node in session.scalars(_locked(query)):
        before = _seen(node)
        node.cordoned_at, node.cordon_reason = None, ""
        opened.append(node.name)
        if mark != EXECUTOR_REASON:  # the backend's: the node's back (backend_told)
            node_events.close_told(session, node.name, before, _seen(node), how=PASSED, now=t)
    session.flush()
    return sorted(opened)


PASSED: Final = "what closed it passed"
"""Why the history says a node the control plane had closed was opened
(:func:`reopen_marked`)."""


def sync_backend(
    session: Session, closed: Mapping[str, str], now: float | None = None
) -> tuple[list[str], list[str]]:
    """Close the nodes the executor's backend reports out of service (``closed``: name ->
    why) and reopen those it closed that it no longer reports. Returns (closed, reopened)."""
    shut = close_marked(session, closed, EXECUTOR_REASON, now)
    others = session.scalars(
        select(Node.name).where(Node.cordon_reason.startswith(EXECUTOR_REASON, autoescape=True))
    )
    opened = reopen_marked(session, [n for n in others if n not in closed], EXECUTOR_REASON, now)
    node_events.backend_told(session, closed, now)
    return shut, opened


LAUNCHES_REASON: Final = " launches in a row failed for the node's reasons"
"""What the reason of a cordon after failed launches says after their number (the
inventory reading tells such a close, the control plane's own, by it)."""


def launch_failed(
    session: Session,
    names: Collection[str],
    error: str,
    limit: int = DEFAULT_LAUNCH_FAILURE_LIMIT,
    now: float | None = None,
) -> list[str]:
    """Count a launch that failed for the node's reasons on each of ``names``; cordon those
    that reach ``limit`` failures in a row (0: never). Returns the names cordoned now."""
    if not names:
        return []
    t = resolve_now(now)
    cordoned: list[str] = []
    for node in session.scalars(_locked(select(Node).where(Node.name.in_(sorted(names))))):
        node.launch_failures += 1
        if limit > 0 and node.launch_failures >= limit and node.cordoned_at is None:
            before = _seen(node)
            node.cordoned_at = t
            reason = f"{node.launch_failures}{LAUNCHES_REASON} (last: {error})"
            node.cordon_reason = reason[:MAX_REASON]
            cordoned.append(node.name)
            node_events.close_told(session, node.name, before, _seen(node), now=t)
    session.flush()
    return cordoned


def launched(session: Session, names: Collection[str]) -> None:
    """A launch went through on each of ``names``: their failures in a row start over."""
    if not names:
        return
    query = select(Node).where(Node.name.in_(sorted(names)), Node.launch_failures > 0)
    for node in session.scalars(_locked(query)):
        node.launch_failures = 0
    session.flush()
