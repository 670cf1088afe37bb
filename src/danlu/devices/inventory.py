"""What GPUs a host has: value types, and a fake inventory for machines without GPUs.

An :class:`Inventory` is a tuple of :class:`NodeInventory`, each with GPUs of ONE type (a host
with two GPU models becomes two nodes, since a :class:`~danlu.core.cluster.Node` has one GPU
type). :meth:`Inventory.cluster` gives the scheduler's view; :meth:`Inventory.device_map` the
``(node, gpu) -> CUDA_VISIBLE_DEVICES`` value map for the local executor.
"""

from __future__ import annotations

from dataclasses import dataclass

from danlu.core.cluster import Cluster, GpuType, Node
from danlu.core.fake_gpus import parse_fake_gpus
from danlu.core.units import format_bytes

GpuKey = tuple[str, int]
"""A GPU as allocations name it: its node's name and its position on the node."""


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """One GPU as discovered: host device ``index`` (NVML / PCI order), ``uuid``, NVML's
    ``name`` and the matching danlu :class:`GpuType`, memory in bytes, utilisation in percent,
    temperature in degrees C and power in watts (None where unknown)."""

    index: int
    uuid: str
    name: str
    gpu_type: GpuType
    memory_total: int
    memory_used: int = 0
    utilization: float | None = None
    temperature: float | None = None
    power: float | None = None

    @property
    def memory_free(self) -> int:
        """Bytes not in use."""
        return max(self.memory_total - self.memory_used, 0)


@dataclass(frozen=True, slots=True)
class NodeInventory:
    """The GPUs of one type on one host."""

    name: str
    hostname: str
    gpus: tuple[GpuInfo, ...]

    def node(self) -> Node:
        """The scheduler's :class:`Node`: its GPU type's memory is the smallest GPU's total."""
        if not self.gpus:
            return Node(self.name, 0)
        kind = self.gpus[0].gpu_type
        memory = min(g.memory_total for g in self.gpus)
        return Node(self.name, len(self.gpus), GpuType(kind.name, memory))


@dataclass(frozen=True, slots=True, weakref_slot=True)
class Inventory:
    """All GPUs an executor can use; ``source`` is ``"nvml"``, ``"fake"``, ``"slurm"`` or
    ``"ray"`` (a cluster's nodes, whose GPUs this host cannot read). Weakly referable: what
    is said about its GPUs is kept with it (:mod:`danlu.devices.metrics`)."""

    nodes: tuple[NodeInventory, ...]
    source: str

    def cluster(self, name: str = "local") -> Cluster:
        """The scheduler's view of these nodes."""
        return Cluster(tuple(n.node() for n in self.nodes), name)

    def device_map(self) -> dict[tuple[int, int], str]:
        """``(node, gpu)`` -> host device index, for ``CUDA_VISIBLE_DEVICES``."""
        return {
            (i, j): str(g.index) for i, n in enumerate(self.nodes) for j, g in enumerate(n.gpus)
        }

    def devices(self) -> dict[GpuKey, int]:
        """``(node name, position)`` -> host device index (NVML's), for every GPU."""
        return {
            (node.name, position): gpu.index
            for node in self.nodes
            for position, gpu in enumerate(node.gpus)
        }

    def uuids(self) -> dict[GpuKey, str]:
        """``(node name, position)`` -> the GPU's UUID, for every GPU."""
        return {
            (node.name, position): gpu.uuid
            for node in self.nodes
            for position, gpu in enumerate(node.gpus)
        }

    @property
    def gpus(self) -> tuple[GpuInfo, ...]:
        """Every GPU, node by node."""
        return tuple(g for n in self.nodes for g in n.gpus)

    def describe(self) -> str:
        """One line for the start-up banner, e.g. ``fake GPUs (no NVML): 4x A100-80GB 80.0GiB``."""
        parts = [
            f"{len(n.gpus)}x {n.gpus[0].gpu_type.name} {format_bytes(n.gpus[0].memory_total)}"
            for n in self.nodes
            if n.gpus
        ]
        labels = {
            "fake": "fake GPUs (not real hardware)",
            "slurm": "GPUs of Slurm's nodes",
            "ray": "GPUs of the Ray cluster's nodes",
        }
        label = labels.get(self.source, "GPUs from NVML")
        return f"{label}: {', '.join(parts) or 'none'}"


def inventory_from_cluster(cluster: Cluster, source: str = "fake") -> Inventory:
    """An :class:`Inventory` describing ``cluster``: that of an executor which reports its own
    nodes (``source`` ``"slurm"`` or ``"ray"``), or a fake one for an executor given without
    an inventory."""
    nodes = []
    index = 0
    for node in cluster.nodes:
        gpus = []
        for _ in range(node.gpus):
            gpus.append(
                GpuInfo(
                    index,
                    f"GPU-{source}-{index:04d}",
                    f"Fake {node.gpu_type.name}" if source == "fake" else node.gpu_type.name,
                    node.gpu_type,
                    node.gpu_type.memory,
                )
            )
            index += 1
        nodes.append(NodeInventory(node.name, node.name, tuple(gpus)))
    return Inventory(tuple(nodes), source)


def fake_inventory(spec: str, hostname: str = "localhost") -> Inventory:
    """An inventory of fake GPUs from ``--fake-gpus`` (the grammar of
    :func:`~danlu.core.fake_gpus.parse_fake_gpus`): each group is one node; device indices
    run across the groups. Raises :class:`ConfigError` naming the flag."""
    groups = parse_fake_gpus(spec)
    nodes: list[NodeInventory] = []
    index = 0
    for number, group in enumerate(groups):
        kind = group.gpu_type
        gpus = []
        for _ in range(group.count):
            gpus.append(
                GpuInfo(index, f"GPU-fake-{index:04d}", f"Fake {kind.name}", kind, kind.memory)
            )
            index += 1
        name = hostname if len(groups) == 1 else f"{hostname}-{number}"
        nodes.append(NodeInventory(name, hostname, tuple(gpus)))
    return Inventory(tuple(nodes), "fake")
