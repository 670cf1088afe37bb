"""Keeping the stored inventory in step with a cluster whose nodes come and go.

A Slurm partition gains and loses nodes (``scontrol update PartitionName=...``), a Ray
cluster too (``ray start``, an autoscaler, a node that dies). Every
``DANLU_INVENTORY_REFRESH`` seconds the reconcile loop asks :class:`InventoryRefresh` to
read the executor's nodes again (:meth:`~danlu.executors.base.Executor.refresh_inventory`,
outside any transaction). When they differ from what the store holds, the new inventory is
recorded in one transaction: nodes keep their rows, and so their cordons, while they keep
their names; the scheduler's next round places onto the new nodes, and the reconcile loop
re-queues the jobs whose GPUs left (they resume from their last checkpoint). A backend that
cannot be asked leaves the inventory as it was, and is logged once while it keeps failing: an
outage (:class:`~danlu.executors.ExecutorUnavailableError`, e.g. the Ray head's GCS
unreachable), an expected failure, in one line, no traceback, then a count once a minute.
With each reading (and at start-up) the nodes the backend has taken out of service (Slurm
reports them down or drained) are cordoned, with the backend's reason, and reopened once it
serves them again; a node an admin closed is left as it is. A GPU read smaller than the
memory its jobs hold keeps them (they run on) and is logged (:func:`log_over_commits`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import select

from danlu.core.cluster import Cluster, Node
from danlu.executors import Executor, ExecutorError, ExecutorUnavailableError
from danlu.server.db import Database
from danlu.server.db.models import Node as NodeRow
from danlu.server.failures import REPEAT_LOG_SECONDS, RepeatedFailure
from danlu.server.loops import clock_due
from danlu.server.metrics import ServerMetrics
from danlu.server.services import nodes
from danlu.server.services.cluster import OverCommit, over_committed, replace_inventory

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class InventoryChange:
    """What a refresh changed, by node name."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    resized: tuple[str, ...] = ()
    """Nodes still there with other GPUs, CPUs, memory or rack."""

    def describe(self) -> list[str]:
        """``+name``, ``-name`` and ``~name`` entries (for :class:`RoundReport` and logs)."""
        return [
            *(f"+{n}" for n in self.added),
            *(f"-{n}" for n in self.removed),
            *(f"~{n}" for n in self.resized),
        ]


def compare(before: Sequence[Node], after: Sequence[Node]) -> InventoryChange:
    """The nodes added, removed and changed from ``before`` to ``after`` (by name)."""
    old = {n.name: n for n in before}
    new = {n.name: n for n in after}
    return InventoryChange(
        added=tuple(n.name for n in after if n.name not in old),
        removed=tuple(n.name for n in before if n.name not in new),
        resized=tuple(n.name for n in after if n.name in old and old[n.name] != n),
    )


class InventoryRefresh:
    """Reads the executor's nodes every ``every`` seconds (0: never) and records a change."""

    def __init__(
        self,
        db: Database,
        executor: Executor,
        every: float,
        metrics: ServerMetrics | None = None,
    ) -> None:
        self.db = db
        self.executor = executor
        self.every = every
        self.metrics = metrics
        self._recorded: Cluster | None = None
        """The executor's cluster whose nodes the store holds (None until the first call:
        what the executor reported then, recorded by the app at start-up)."""
        self._read_at: float | None = None
        self._synced = False
        """Whether the backend's closed nodes were synced once (at the first call)."""
        self._closed: dict[str, str] = {}
        """The nodes the backend reported out of service at the last sync."""
        self._failures = RepeatedFailure(
            log, "reading the executor's nodes", "reading the executor's nodes works again"
        )
        self._outage: tuple[int, int, float] | None = None
        """While the backend is unavailable (:meth:`_unavailable`): the failed readings, those
        not logged yet, and when (the loop's clock) the last line was logged."""

    def due(self, t: float) -> bool:
        """Whether a reading is due at ``t`` (the first call only starts the clock: the
        app recorded the inventory at start-up); at once when the clock was set back more
        than ``every`` seconds before the last reading (:func:`clock_due`)."""
        if self.every <= 0:
            return False
        if self._read_at is None:
            self._read_at = t
            self._recorded = self.executor.inventory()
            return False
        return clock_due(self._read_at + self.every, t, self.every)

    def run(self, t: float) -> InventoryChange | None:
        """Read the nodes again when due; record them when they changed. Returns the
        change, or None when nothing changed (or nothing was read). A change read but not
        recorded (the store failed) is recorded at the next call, due or not: until then
        the scheduler's view and the executor's nodes disagree. The backend's closed nodes
        are synced with each reading (:meth:`sync_closed`); a sync that fails is made again
        at the next call, and a change recorded before it is still returned."""
        if self._unrecorded():
            return self.record(self.executor.inventory(), t)
        if not self.due(t):
            if not self._synced:  # the nodes the backend had out of service at start-up
                self.sync_closed(t)
            return None
        self._read_at = t
        try:
            cluster = self.executor.refresh_inventory()
        except ExecutorUnavailableError as exc:
            self._unavailable(exc, t)
            return None
        except ExecutorError as exc:
            self._failures.failed(exc)
            return None
        self._failures.worked()
        if self._outage is not None:
            log.warning(
                "reading the executor's nodes works again (after %d failures)", self._outage[0]
            )
            self._outage = None
        change = self.record(cluster, t)
        try:
            self.sync_closed(t)
        except Exception:
            # synced at the next call, due or not; a change recorded is returned all the
            # same: raised, it was lost (the next call found nothing to record), and the
            # reconcile loop never re-queued the jobs of the nodes that left
            self._synced = False
            if change is None:
                raise
            log.warning(
                "inventory changed (%s), but the nodes its backend has out of service could "
                "not be synced now; they are at the next pass",
                " ".join(change.describe()),
                exc_info=True,
            )
        return change

    def _unavailable(self, exc: ExecutorUnavailableError, t: float) -> None:
        """Log that the backend cannot be asked at ``t``: an expected failure (its text, which
        says what to check, is enough, and changes every time: "not answered for 25 s"), so
        one line without traceback, then one counting the failures at most every
        :data:`~danlu.server.failures.REPEAT_LOG_SECONDS` while it lasts, not one per
        reading (and at once when the clock was set back: :func:`clock_due`)."""
        failed, unlogged, logged_at = self._outage or (0, 0, t - REPEAT_LOG_SECONDS)
        failed, unlogged = failed + 1, unlogged + 1
        if not clock_due(logged_at + REPEAT_LOG_SECONDS, t, REPEAT_LOG_SECONDS):
            self._outage = (failed, unlogged, logged_at)
            return
        if failed == 1:
            log.warning(
                "cannot read the executor's nodes (kept as they were, read again every %g s): %s",
                self.every,
                exc,
            )
        else:
            log.warning("cannot read the executor's nodes, %d more times: %s", unlogged, exc)
        self._outage = (failed, 0, t)

    def sync_closed(self, t: float) -> tuple[list[str], list[str]]:
        """Close the nodes the backend reports out of service now
        (:meth:`~danlu.executors.base.Executor.closed_nodes`) and reopen those it closed
        that it no longer reports. Returns the names (closed, reopened)."""
        closed = self.executor.closed_nodes()
        if self._synced and not closed and not self._closed:
            return [], []  # nothing reported, now or at the last sync: nothing to write
        with self.db.session() as session:
            shut, opened = nodes.sync_backend(session, closed, t)
        self._synced, self._closed = True, closed
        for name in shut:
            log.warning("node %s closed to new work: %s", name, closed[name])
        for name in opened:
            log.warning("node %s open to new work again: its backend serves it", name)
        return shut, opened

    def _unrecorded(self) -> bool:
        """Whether the executor's nodes differ from those last recorded."""
        cluster = self.executor.inventory()
        recorded = self._recorded
        return recorded is not None and cluster is not recorded and cluster.nodes != recorded.nodes

    def record(self, cluster: Cluster, now: float | None = None) -> InventoryChange | None:
        """Record ``cluster``'s nodes in the store when they differ from those recorded, as
        read at ``now`` (the pass's time; None: the clock), which times their rows and the
        events of the nodes' histories."""
        nodes = tuple(cluster.nodes)
        before = tuple(self._recorded.nodes) if self._recorded is not None else ()
        if nodes == before:
            self._recorded = cluster
            return None
        with self.db.session() as session:
            fake = any(session.scalars(select(NodeRow.fake)))
            replace_inventory(session, nodes, fake=fake, now=now)
            over = over_committed(session)
        self._recorded = cluster
        change = compare(before, nodes)
        log.warning("inventory changed: %s", " ".join(change.describe()) or "order only")
        log_over_commits(over)
        if self.metrics is not None:
            self.metrics.set_cluster(cluster)
        return change


def log_over_commits(over: Sequence[OverCommit]) -> None:
    """Warn of each GPU whose jobs hold more memory than the inventory now gives it
    (:func:`~danlu.server.services.cluster.over_committed`): they run on, and nothing new
    is placed there until they free enough of it."""
    for gpu in over:
        log.warning(
            "%s (%s) since the inventory reported it smaller: they run on, but may run out "
            "of memory; nothing new is placed on it until they hold no more than it has",
            gpu.describe(),
            ", ".join(gpu.jobs),
        )
