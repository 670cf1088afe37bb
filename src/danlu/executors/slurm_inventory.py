"""The nodes of the Slurm executor (:class:`~danlu.executors.slurm.SlurmExecutor`): its
partition's nodes and their GPUs as Slurm lists them (:func:`partition_nodes`), those Slurm
reports closed (down, drained, failing, or all of them while the partition itself is), and
the check of a launch's nodes against Slurm's states of them."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

from danlu.core.cluster import Cluster, GpuType, Node, listed_gpu_type
from danlu.core.errors import UnknownNameError
from danlu.executors.base import MultiNodeExecutor, refreshed_cluster
from danlu.executors.errors import ExecutorError, NodeLaunchError
from danlu.executors.slurmctl import (
    SlurmCommands,
    SlurmError,
    SlurmNode,
    SlurmUnavailableError,
    node_closed,
)


class SlurmInventory(MultiNodeExecutor):
    """The node inventory of :class:`~danlu.executors.slurm.SlurmExecutor`, which sets the
    attributes below."""

    _commands: SlurmCommands
    _partition: str | None
    _gpu_type: GpuType
    _poll_interval: float
    _clock: Callable[[], float]
    _nodes: list[SlurmNode] | None
    _partition_state: str
    _cluster: Cluster | None
    _node_states: dict[str, str]
    _node_states_at: float

    def inventory(self) -> Cluster:
        """The partition's nodes and their GPUs (``Gres=gpu:...``), as Slurm listed them
        first or at the last :meth:`refresh_inventory`."""
        if self._cluster is None:
            self._cluster = self._read_inventory()
        return self._cluster

    def refresh_inventory(self) -> Cluster:
        """The partition's nodes read from Slurm again: nodes added to or taken out of the
        partition (``scontrol update PartitionName=...``), or given other GPUs. A node Slurm
        reports down or drained stays (:meth:`closed_nodes` names it, and a launch there
        fails as the node's fault); a partition listed with no nodes is refused, keeping the
        inventory as it was (an :class:`ExecutorError`)."""
        self._cluster = self._read_inventory()
        return self._cluster

    def _read_inventory(self) -> Cluster:
        nodes = partition_nodes(self._commands, self._partition)
        cluster = refreshed_cluster(self._cluster, [self._node(n) for n in nodes], "slurm")
        partition = self._commands.partition_state(self._partition) if self._partition else ""
        self._nodes, self._partition_state = nodes, partition
        # what the launches' node check reads, fresh now (see _check_nodes)
        self._node_states = {n.name: n.state for n in nodes}
        self._node_states_at = self._clock()
        return cluster

    def closed_nodes(self) -> dict[str, str]:
        """The partition's nodes Slurm reports down, drained, failing or not responding (as
        read at the last inventory reading; :func:`~danlu.executors.slurmctl.node_closed`),
        with Slurm's state and reason; and all of them while Slurm reports the partition
        itself other than ``UP`` (``scontrol update PartitionName=gpu State=DOWN``, as an
        admin does before a maintenance: Slurm starts none of its jobs, or with ``DRAIN``
        and ``INACTIVE`` takes none), where a run placed would wait until the pending limit
        failed it, or be refused. A node Slurm's power saving powered off
        (``IDLE+POWERED_DOWN``) is open: the controller boots it for a job given to it."""
        closed: dict[str, str] = {}
        shut = self._partition_state not in ("", "UP")
        held = (
            f"Slurm reports partition {self._partition} {self._partition_state}: no run "
            f"starts there until scontrol update PartitionName={self._partition} State=UP"
        )
        for node in self._nodes or ():
            if node_closed(node.state):
                why = f": {node.reason}" if node.reason else ""
                closed[node.name] = f"Slurm reports it {node.state}{why}"
                if shut:
                    closed[node.name] += f"; {held}"
            elif shut:
                closed[node.name] = held
        return closed

    def _node(self, node: SlurmNode) -> Node:
        kind = self._gpu_type
        if node.gpu_type is not None:
            with contextlib.suppress(UnknownNameError):
                kind = listed_gpu_type(node.gpu_type, self._gpu_type)
        return Node(node.name, node.gpus, kind, cpu_milli=node.cpus * 1000, memory=node.memory)

    def max_nodes_per_job(self) -> int:
        """Every node of the partition."""
        return len(self.inventory().nodes)

    def _check_nodes(self, names: Sequence[str]) -> None:
        """Raise :class:`NodeLaunchError` when Slurm reports one of ``names`` unusable, or
        no longer in the partition (taken out since the inventory was last read)."""
        if not names:
            return
        now = self._clock()
        if now - self._node_states_at >= self._poll_interval:
            try:
                listed = self._commands.nodes(self._partition)
                self._node_states = {n.name: n.state for n in listed}
            except SlurmError as exc:
                raise SlurmUnavailableError(f"cannot read the nodes' states: {exc}") from exc
            self._node_states_at = now
        for name in names:
            state = self._node_states.get(name)
            if state is None:
                where = f"partition {self._partition}" if self._partition else "Slurm's nodes"
                raise NodeLaunchError(f"node {name} is no longer in {where}", nodes=(name,))
            if node_closed(state):
                raise NodeLaunchError(f"Slurm reports node {name} as {state}", nodes=(name,))


def partition_nodes(commands: SlurmCommands, partition: str | None) -> list[SlurmNode]:
    """The nodes of ``partition`` (None: every node) as Slurm lists them, with no executor
    made (``danlu server`` asks before it makes its home: :func:`danlu.server.main.prepare`).
    Raises :class:`SlurmUnavailableError` when Slurm's controller cannot be reached, and
    :class:`ExecutorError` when Slurm lists no nodes there or no such partition."""
    nodes = commands.nodes(partition)
    if not nodes:
        raise ExecutorError("Slurm lists no nodes; check SLURM_CONF and the partition")
    return nodes
