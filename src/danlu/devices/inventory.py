"""What GPUs a host has: value types, and a fake inventory for machines without GPUs.

An :class:`Inventory` is a tuple of :class:`NodeInventory`, each with GPUs of ONE type (a host
with two GPU models becomes two nodes, since a :class:`~danlu.core.cluster.Node` has one GPU
type). :meth:`Inventory.cluster` gives the scheduler's view; :meth:`Inventory.device_map` the
``(node, gpu) -> CUDA_VISIBLE_DEVICES`` value map for the local executor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from danlu.core.cluster import GPU_TYPES, Cluster, GpuType, Node, gpu_type, gpu_type_from_device
from danlu.core.errors import ConfigError, SpecError, UnknownNameError
from danlu.core.units import format_bytes, parse_bytes

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


@dataclass(frozen=True, slots=True)
class Inventory:
    """All GPUs an executor can use; ``source`` is ``"nvml"``, ``"fake"``, ``"slurm"`` or
    ``"ray"`` (a cluster's nodes, whose GPUs this host cannot read)."""

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


_FLAG = "--fake-gpus"
_GROUP = re.compile(r"^\s*(\d+)\s*[xX]\s*([^:\s]+)\s*(?::\s*(\S+))?\s*$")


_LEAST_FAKE_MEMORY = 1 << 30
"""The smallest fake GPU (1 GiB): anything less is a size written without its unit."""


def _known_type(name: str) -> GpuType | None:
    """The GPU type ``name`` names (a type or an alias such as ``4090``), or None."""
    try:
        return gpu_type(name)
    except UnknownNameError:
        return None


def _sized_type(spec: str, group: str, type_name: str, memory: int) -> GpuType:
    """The type ``COUNTxSIZE:TYPE`` names: a family name without a size (``A100``,
    ``V100``) is resolved by ``memory`` as a device's name is
    (:func:`~danlu.core.cluster.gpu_type_from_device`: 40 GiB is an A100-40GB); a variant
    named with its size (``A100-80GB``, ``v100m16``) that ``memory`` contradicts is refused."""
    named = gpu_type(type_name)
    by_memory = gpu_type_from_device(named.name, memory)
    if by_memory.name == named.name or by_memory.name not in GPU_TYPES:
        return named
    # what follows the model number ("A100", "v100") names a size: "-80GB", "m16", "-40"
    if re.search(r"\d", re.sub(r"^[A-Za-z]*\d+", "", type_name.strip())):
        raise _fake_error(
            spec,
            f"{group!r}: a {format_bytes(memory)} GPU is of type {by_memory.name}, not "
            f"{named.name}; write {group.partition(':')[0]}:{by_memory.name}",
        )
    return GPU_TYPES[by_memory.name]


def _fake_error(spec: str, why: str) -> ConfigError:
    return ConfigError(
        f"{_FLAG} {spec!r}: {why}; write COUNTxSIZE or COUNTxTYPE, comma-separated, optionally "
        f"COUNTxSIZE:TYPE, e.g. {_FLAG} 4x80GiB or {_FLAG} 2xH100,4x40GiB:A100-40GB "
        f"(types: {', '.join(GPU_TYPES)})"
    )


def fake_inventory(spec: str, hostname: str = "localhost") -> Inventory:
    """An inventory of fake GPUs from ``--fake-gpus``: ``NxSIZE[,NxSIZE...]``, where SIZE is a
    byte size with its unit (``80GiB``, at least 1 GiB) or a GPU type (``H100``; a type name or
    alias is read as the type even when it is a number, as ``4090``), optionally
    ``NxSIZE:TYPE`` (a type with size variants named without its size is resolved by SIZE:
    ``4x40GiB:A100`` is four A100-40GB; a variant SIZE contradicts, as ``40GiB:A100-80GB``,
    is refused). Each group is one node; device indices run across the groups. Raises
    :class:`ConfigError` naming the flag."""
    nodes: list[NodeInventory] = []
    index = 0
    groups = [g for g in spec.split(",")] if spec.strip() else []
    if not groups:
        raise _fake_error(spec, "no GPUs given")
    for number, group in enumerate(groups):
        match = _GROUP.match(group)
        if match is None:
            raise _fake_error(spec, f"{group.strip()!r} is not COUNTxSIZE")
        count, size, type_name = int(match.group(1)), match.group(2), match.group(3)
        if count <= 0:
            raise _fake_error(spec, f"{group.strip()!r} has no GPUs")
        known = _known_type(size)
        try:
            if known is not None:
                if type_name:
                    raise _fake_error(spec, f"{group.strip()!r} names a type twice")
                kind = known
                memory = kind.memory
            elif size[0].isdigit():
                if size.isdigit():
                    raise _fake_error(
                        spec,
                        f"{group.strip()!r}: {size} bytes? give the size a unit (e.g. "
                        f"{count}x{size}GiB) or name a GPU type",
                    )
                memory = parse_bytes(size, _FLAG)
                if memory < _LEAST_FAKE_MEMORY:
                    raise _fake_error(
                        spec,
                        f"{group.strip()!r}: a GPU of {format_bytes(memory)} is too small "
                        f"(at least {format_bytes(_LEAST_FAKE_MEMORY)}); is the unit right?",
                    )
                kind = (
                    _sized_type(spec, group.strip(), type_name, memory)
                    if type_name
                    else GpuType("generic", memory)
                )
            else:
                kind = gpu_type(size)
                memory = kind.memory
        except (SpecError, UnknownNameError) as exc:
            raise _fake_error(spec, str(exc)) from None
        if memory <= 0:
            raise _fake_error(spec, f"{group.strip()!r} has no memory")
        kind = GpuType(kind.name, memory)
        gpus = []
        for _ in range(count):
            gpus.append(GpuInfo(index, f"GPU-fake-{index:04d}", f"Fake {kind.name}", kind, memory))
            index += 1
        name = hostname if len(groups) == 1 else f"{hostname}-{number}"
        nodes.append(NodeInventory(name, hostname, tuple(gpus)))
    return Inventory(tuple(nodes), "fake")
