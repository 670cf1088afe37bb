"""GPUs, nodes, topology and allocations: the cluster as value types.

A cluster is an immutable tuple of :class:`Node`; each node has ``gpus`` identical GPUs of one
:class:`GpuType` and sits in a rack (under a switch). GPUs are addressed by ``(node, gpu)``
indices. An :class:`Allocation` is a tuple of :class:`GpuShare`: a whole GPU
(``milli == 1000``) or a memory-sized / fractional share of one GPU.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import numpy.typing as npt

from danlu.core.errors import UnknownNameError
from danlu.core.units import GiB

MILLI_PER_GPU = 1000
"""A whole GPU in milli-GPU units (fractional requests use less, as in the Alibaba trace)."""


@dataclass(frozen=True, slots=True)
class GpuType:
    """A GPU model: its name and usable device memory in bytes."""

    name: str
    memory: int


def _gpu(name: str, gib: float) -> GpuType:
    return GpuType(name, int(gib * GiB))


GPU_TYPES: Mapping[str, GpuType] = {
    g.name: g
    for g in (
        _gpu("H200", 141),
        _gpu("H100", 80),
        _gpu("H100-NVL", 94),
        _gpu("A100-80GB", 80),
        _gpu("A100-40GB", 40),
        _gpu("V100-32GB", 32),
        _gpu("V100-16GB", 16),
        _gpu("P100", 16),
        _gpu("T4", 16),
        _gpu("A10", 24),
        _gpu("L4", 24),
        _gpu("RTX4090", 24),
        _gpu("K80", 12),
        _gpu("generic", 80),
    )
}
"""Known GPU types by canonical name (memory as sold; usable memory is calibrated elsewhere)."""

_ALIASES = {
    "a100": "A100-80GB",
    "a100-80": "A100-80GB",
    "a100-40": "A100-40GB",
    "v100": "V100-32GB",
    "v100m32": "V100-32GB",
    "v100m16": "V100-16GB",
    "v100-32": "V100-32GB",
    "v100-16": "V100-16GB",
    "rtx-4090": "RTX4090",
    "4090": "RTX4090",
    "h100nvl": "H100-NVL",
}


GPU_SIZES: Mapping[str, tuple[str, ...]] = {
    "a100": ("A100-80GB", "A100-40GB"),
    "v100": ("V100-32GB", "V100-16GB"),
}
"""A GPU model sold in several memory sizes, named without one (in lower case) -> the types
of its sizes, largest first. A job's ``gpu_type: A100`` accepts every size
(:func:`gpu_type_names`); :func:`gpu_type`, for what needs one type with its memory
(``--fake-gpus 4xA100``, a Slurm or Ray node's model), gives the largest."""


def gpu_type_names(name: str) -> tuple[str, ...]:
    """The canonical names of the GPU types a job naming ``name`` in its ``gpu_type`` may run
    on: every size of a model named without one (``A100`` -> ``A100-80GB``, ``A100-40GB``),
    else the one type :func:`gpu_type` finds (``a100-40`` -> ``A100-40GB``). Raises
    :class:`~danlu.core.errors.UnknownNameError` for a name danlu does not know."""
    sizes = GPU_SIZES.get(name.lower())
    return sizes if sizes is not None else (gpu_type(name).name,)


def gpu_type(name: str) -> GpuType:
    """Look a GPU type up by name, case-insensitively (``h100``, ``A100-40GB``, ``V100M16``);
    a model named without its size (:data:`GPU_SIZES`: ``A100``, ``V100``) is its largest."""
    for key, value in GPU_TYPES.items():
        if key.lower() == name.lower():
            return value
    alias = _ALIASES.get(name.lower())
    if alias is not None:
        return GPU_TYPES[alias]
    raise UnknownNameError("GPU type", name, list(GPU_TYPES))


def listed_gpu_type(name: str, default: GpuType) -> GpuType:
    """The type of a node's GPUs that a cluster's listing names ``name`` (a Slurm ``Gres``
    type, a Ray accelerator): :func:`gpu_type`, but a model named without its size
    (:data:`GPU_SIZES`: ``a100``) is ``default`` where ``default`` is one of its sizes (the
    operator's setting, ``DANLU_SLURM_GPU_TYPE=A100-40GB``, tells the size the listing leaves
    out), else its largest. Raises :class:`~danlu.core.errors.UnknownNameError` as
    :func:`gpu_type` does."""
    if default.name in GPU_SIZES.get(name.lower(), ()):
        return default
    return gpu_type(name)


_DEVICE_RULES: tuple[tuple[str, str, str, int], ...] = (
    # (pattern in the device's name, type, type when memory > the GiB that follow); a model
    # number is matched whole: "GH200" (Grace Hopper: an H100-class GPU with 96 or 144 GB) is
    # not an H200 and "RTX A1000" not an A100, and both keep their device names
    (r"(?<![A-Z0-9])H200(?!\d)", "H200", "H200", 0),
    # "NVIDIA H100 NVL": the 94 GB card, not an 80 GB H100
    (r"(?<![A-Z0-9])H100(?!\d).*\bNVL\b", "H100-NVL", "H100-NVL", 0),
    (r"(?<![A-Z0-9])H100(?!\d)", "H100", "H100", 0),
    (r"(?<![A-Z0-9])A100(?!\d)", "A100-40GB", "A100-80GB", 48),
    (r"(?<![A-Z0-9])V100(?!\d)", "V100-16GB", "V100-32GB", 20),
    (r"(?<![A-Z0-9])P100(?!\d)", "P100", "P100", 0),
    (r"\bT4\b", "T4", "T4", 0),
    (r"\bA10G?\b", "A10", "A10", 0),
    (r"\bL4\b", "L4", "L4", 0),
    (r"(?<![A-Z0-9])4090(?!\d)", "RTX4090", "RTX4090", 0),
    (r"(?<![A-Z0-9])K80(?!\d)", "K80", "K80", 0),
)


def gpu_type_from_device(name: str, memory: int) -> GpuType:
    """danlu's :class:`GpuType` for the name a device reports (NVML,
    ``torch.cuda.get_device_name``), with the device's real memory in bytes.

    ``"NVIDIA A100-SXM4-80GB"`` -> ``A100-80GB``, ``"Tesla V100-SXM2-16GB"`` -> ``V100-16GB``
    (A100 and V100 sizes are told apart by ``memory``); an unknown model keeps the device's
    name."""
    up = name.upper()
    for pattern, small, large, threshold_gib in _DEVICE_RULES:
        if re.search(pattern, up):
            canonical = large if memory > threshold_gib * GiB else small
            return GpuType(GPU_TYPES[canonical].name, memory)
    return GpuType(name, memory)


@dataclass(frozen=True, slots=True)
class Node:
    """A machine with ``gpus`` GPUs of one type, CPUs in milli-cores and host memory in bytes."""

    name: str
    gpus: int
    gpu_type: GpuType = GPU_TYPES["generic"]
    cpu_milli: int = 0
    memory: int = 0
    rack: str = "rack-0"
    """Nodes under one top-of-rack switch share this label; topology-aware placement uses it."""


@dataclass(frozen=True, slots=True)
class GpuShare:
    """Part of one GPU given to a job: ``milli`` thousandths of its compute and ``memory`` bytes.

    A whole GPU is ``milli=1000`` with ``memory`` equal to the GPU's memory.
    """

    node: int
    gpu: int
    milli: int = MILLI_PER_GPU
    memory: int = 0

    @property
    def whole(self) -> bool:
        return self.milli >= MILLI_PER_GPU


@dataclass(frozen=True, slots=True)
class Allocation:
    """The GPUs (or GPU shares) given to one job, all at once (gang)."""

    shares: tuple[GpuShare, ...] = ()
    _milli: int = field(default=0, init=False, repr=False, compare=False)
    _gpus: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_milli", sum(s.milli for s in self.shares))
        object.__setattr__(self, "_gpus", len({(s.node, s.gpu) for s in self.shares}))

    @property
    def num_gpus(self) -> int:
        """Number of distinct GPUs touched."""
        return self._gpus

    @property
    def nodes(self) -> tuple[int, ...]:
        """Sorted distinct node indices."""
        return tuple(sorted({s.node for s in self.shares}))

    def node_counts(self) -> tuple[int, ...]:
        """GPU count on each node used, in the order the nodes first appear in ``shares``
        (the order a placement picked them)."""
        counts: dict[int, int] = {}
        for share in self.shares:
            counts[share.node] = counts.get(share.node, 0) + 1
        return tuple(counts.values())

    def per_node(self) -> tuple[int, ...]:
        """GPU count on each node used, in descending order (a Pollux-style placement shape)."""
        counts = Counter(s.node for s in self.shares)
        return tuple(sorted(counts.values(), reverse=True))

    @property
    def gpu_milli(self) -> int:
        """Total milli-GPU held."""
        return self._milli

    def __bool__(self) -> bool:
        return bool(self.shares)

    @classmethod
    def whole_gpus(cls, gpus: Iterable[tuple[int, int]], memory: int = 0) -> Allocation:
        """Whole GPUs at ``(node, gpu)`` indices."""
        return cls(tuple(GpuShare(n, g, MILLI_PER_GPU, memory) for n, g in gpus))


@dataclass(frozen=True)
class ClusterArrays:
    """Per-node and per-GPU arrays of a cluster (flat GPU numbering: node offset + index)."""

    offsets: npt.NDArray[np.int64]
    sizes: npt.NDArray[np.int64]
    gpu_node: npt.NDArray[np.int64]
    gpu_memory: npt.NDArray[np.int64]
    rack_ids: npt.NDArray[np.int64]
    type_names: tuple[str, ...]


@dataclass(frozen=True)
class Cluster:
    """An immutable set of nodes. Node indices are positions in ``nodes``."""

    nodes: tuple[Node, ...]
    name: str = "cluster"
    _gpu_offsets: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _total_gpus: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        offsets, total = [], 0
        for node in self.nodes:
            offsets.append(total)
            total += node.gpus
        object.__setattr__(self, "_gpu_offsets", tuple(offsets))
        object.__setattr__(self, "_total_gpus", total)

    @property
    def total_gpus(self) -> int:
        return self._total_gpus

    def gpu_offset(self, node: int) -> int:
        """Index of the node's first GPU in a flat numbering of all GPUs."""
        return self._gpu_offsets[node]

    @cached_property
    def node_index(self) -> Mapping[str, int]:
        """Node name -> index, computed once per cluster."""
        return {node.name: i for i, node in enumerate(self.nodes)}

    @cached_property
    def gpus_by_type(self) -> Mapping[str, Mapping[int, int]]:
        """Lower-case GPU type name -> {GPU memory in bytes: GPUs of that type and memory}
        (a node without GPUs counts 0 GPUs), computed once per cluster: what admission
        checks read instead of walking every node for every job."""
        out: dict[str, dict[int, int]] = {}
        for node in self.nodes:
            sizes = out.setdefault(node.gpu_type.name.lower(), {})
            memory = node.gpu_type.memory
            sizes[memory] = sizes.get(memory, 0) + node.gpus
        return out

    @cached_property
    def type_spelling(self) -> Mapping[str, str]:
        """Lower-case GPU type name -> the inventory's spelling."""
        return {node.gpu_type.name.lower(): node.gpu_type.name for node in self.nodes}

    @cached_property
    def arrays(self) -> ClusterArrays:
        """Numpy views of the cluster's shape, computed once per cluster."""
        sizes = np.array([n.gpus for n in self.nodes], dtype=np.int64)
        offsets = np.array(self._gpu_offsets, dtype=np.int64)
        rack_ids = np.unique([n.rack for n in self.nodes], return_inverse=True)[1]
        return ClusterArrays(
            offsets=offsets,
            sizes=sizes,
            gpu_node=np.repeat(np.arange(len(self.nodes), dtype=np.int64), sizes),
            gpu_memory=np.repeat(
                np.array([n.gpu_type.memory for n in self.nodes], dtype=np.int64), sizes
            ),
            rack_ids=rack_ids.astype(np.int64),
            type_names=tuple(n.gpu_type.name.lower() for n in self.nodes),
        )

    def racks(self) -> tuple[str, ...]:
        return tuple(sorted({n.rack for n in self.nodes}))

    @classmethod
    def homogeneous(
        cls,
        nodes: int,
        gpus_per_node: int,
        gpu: GpuType | str = "generic",
        nodes_per_rack: int = 0,
        cpu_milli: int = 0,
        memory: int = 0,
    ) -> Cluster:
        """``nodes`` identical nodes; ``nodes_per_rack`` > 0 groups them into racks."""
        kind = gpu if isinstance(gpu, GpuType) else gpu_type(gpu)
        per_rack = nodes_per_rack if nodes_per_rack > 0 else max(nodes, 1)
        return cls(
            tuple(
                Node(
                    name=f"node-{i}",
                    gpus=gpus_per_node,
                    gpu_type=kind,
                    cpu_milli=cpu_milli,
                    memory=memory,
                    rack=f"rack-{i // per_rack}",
                )
                for i in range(nodes)
            )
        )
