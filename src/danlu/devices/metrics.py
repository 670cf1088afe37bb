"""Per-GPU metrics under the names of NVIDIA's DCGM exporter, for the server's ``/metrics``.

Units as DCGM reports them: utilisation in percent, framebuffer memory in MiB, temperature in
degrees C, power in watts. Labels: ``gpu`` (device index), ``UUID``, ``device``
(``nvidia<index>``), ``modelName`` and ``Hostname``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any
from weakref import WeakKeyDictionary

from danlu.core.cluster import MILLI_PER_GPU, Allocation
from danlu.devices.inventory import GpuInfo, Inventory
from danlu.devices.nvml import load_nvml, read_gpu

log = logging.getLogger(__name__)

_MiB = 1024**2

METRICS: Mapping[str, str] = {
    "DCGM_FI_DEV_GPU_UTIL": "GPU utilization (in %).",
    "DCGM_FI_DEV_FB_USED": "Framebuffer memory used (in MiB).",
    "DCGM_FI_DEV_FB_FREE": "Framebuffer memory free (in MiB).",
    "DCGM_FI_DEV_GPU_TEMP": "GPU temperature (in C).",
    "DCGM_FI_DEV_POWER_USAGE": "Power draw (in W).",
}
"""The exported metric names with DCGM-exporter's help texts (all gauges)."""

IDLE_TEMP, IDLE_POWER, MAX_POWER = 30.0, 60.0, 400.0
"""The fake GPUs' synthetic temperature (C) and power (W) at 0 % utilisation, and power at 100 %."""


def synthetic_power(milli: int) -> float:
    """Watts a fake GPU draws with ``milli`` thousandths of its compute held by jobs."""
    load = min(max(milli, 0), MILLI_PER_GPU) / MILLI_PER_GPU
    return IDLE_POWER + (MAX_POWER - IDLE_POWER) * load


@dataclass(frozen=True, slots=True)
class MetricSample:
    """One gauge value: DCGM metric ``name``, its labels and value."""

    name: str
    labels: Mapping[str, str]
    value: float


ENERGY_METRIC = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
"""The DCGM name of a GPU's energy counter, in mJ (danlu's counts from its meter's start:
:mod:`danlu.devices.energy`)."""


def gpu_labels(gpu: GpuInfo, hostname: str) -> dict[str, str]:
    """The DCGM labels of ``gpu`` on host ``hostname``."""
    return {
        "gpu": str(gpu.index),
        "UUID": gpu.uuid,
        "device": f"nvidia{gpu.index}",
        "modelName": gpu.name,
        "Hostname": hostname,
    }


def _samples(gpu: GpuInfo, hostname: str) -> list[MetricSample]:
    labels = gpu_labels(gpu, hostname)
    values = {
        "DCGM_FI_DEV_GPU_UTIL": gpu.utilization,
        "DCGM_FI_DEV_FB_USED": gpu.memory_used / _MiB,
        "DCGM_FI_DEV_FB_FREE": gpu.memory_free / _MiB,
        "DCGM_FI_DEV_GPU_TEMP": gpu.temperature,
        "DCGM_FI_DEV_POWER_USAGE": gpu.power,
    }
    return [MetricSample(k, labels, float(v)) for k, v in values.items() if v is not None]


def synthetic(inventory: Inventory, allocations: Iterable[Allocation]) -> Inventory:
    """The fake GPUs as if the allocations were running: memory used is the sum of the shares'
    memory (capped at the total), utilisation the shares' compute (milli-GPU / 10), temperature
    rising linearly with utilisation, power :func:`synthetic_power`."""
    used: dict[tuple[int, int], int] = {}
    milli: dict[tuple[int, int], int] = {}
    for allocation in allocations:
        for share in allocation.shares:
            key = (share.node, share.gpu)
            used[key] = used.get(key, 0) + share.memory
            milli[key] = milli.get(key, 0) + share.milli
    nodes = []
    for i, node in enumerate(inventory.nodes):
        gpus = []
        for j, gpu in enumerate(node.gpus):
            util = min(100.0, 100.0 * milli.get((i, j), 0) / MILLI_PER_GPU)
            gpus.append(
                GpuInfo(
                    gpu.index,
                    gpu.uuid,
                    gpu.name,
                    gpu.gpu_type,
                    gpu.memory_total,
                    min(used.get((i, j), 0), gpu.memory_total),
                    util,
                    IDLE_TEMP + 0.5 * util,
                    synthetic_power(milli.get((i, j), 0)),
                )
            )
        nodes.append(type(node)(node.name, node.hostname, tuple(gpus)))
    return Inventory(tuple(nodes), inventory.source)


_UNREADABLE: WeakKeyDictionary[Inventory, set[tuple[str, int, str]]] = WeakKeyDictionary()
"""The GPUs (host, index, UUID) of each inventory that :func:`sample_metrics` found
unreadable and said so: a lost GPU stays lost until it is reset, and a warning at every
scrape (every few seconds) says nothing new. One read again is said, and taken off (a later
failure is warned again). Kept with the inventory, and gone with it."""


def _say_unreadable(
    unreadable: set[tuple[str, int, str]], gpu: tuple[str, int, str], exc: BaseException
) -> None:
    """Log that ``gpu`` cannot be read: a warning the first time, debug while it lasts."""
    hostname, index, _ = gpu
    first = gpu not in unreadable
    unreadable.add(gpu)
    log.log(
        logging.WARNING if first else logging.DEBUG,
        "metrics: GPU %d of %s cannot be read (%s)%s",
        index,
        hostname,
        exc,
        "; its gauges are left out until it reads again (logged once)" if first else "",
    )


def sample_metrics(
    inventory: Inventory,
    allocations: Iterable[Allocation] = (),
    nvml: ModuleType | Any | None = None,
) -> list[MetricSample]:
    """Current per-GPU samples: read from NVML for an NVML inventory (a GPU NVML cannot read
    now, e.g. one lost, is left out with a warning logged the first time only; the others
    are sampled), synthesised from ``allocations`` (node/GPU indices of
    ``inventory.cluster()``) for a fake one, and none for a cluster's nodes (Slurm's,
    Ray's), whose GPUs this host cannot read."""
    if inventory.source == "fake":
        current = synthetic(inventory, allocations)
        return [s for n in current.nodes for g in n.gpus for s in _samples(g, n.hostname)]
    if inventory.source != "nvml":
        return []
    lib = load_nvml(nvml)
    samples: list[MetricSample] = []
    unreadable = _UNREADABLE.setdefault(inventory, set())
    try:
        for node in inventory.nodes:
            for gpu in node.gpus:
                said = (node.hostname, gpu.index, gpu.uuid)
                try:
                    read = read_gpu(lib, gpu.index, gpu.uuid)
                except Exception as exc:  # this GPU only: the others' series go on
                    _say_unreadable(unreadable, said, exc)
                    continue
                if said in unreadable:
                    unreadable.discard(said)
                    log.info("metrics: GPU %d of %s is read again", gpu.index, node.hostname)
                samples += _samples(read, node.hostname)
    finally:
        with contextlib.suppress(Exception):  # shutting down is best effort
            lib.nvmlShutdown()
    return samples
