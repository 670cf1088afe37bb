"""GPU discovery and metrics: NVML (``nvidia-ml-py``, imported lazily) and fake GPUs for
machines without any. Imports only :mod:`danlu.core` of danlu."""

from danlu.devices.errors import DeviceError, DeviceUnavailableError, NvmlMissingError
from danlu.devices.inventory import (
    GpuInfo,
    Inventory,
    NodeInventory,
    fake_inventory,
    inventory_from_cluster,
)
from danlu.devices.metrics import METRICS, MetricSample, sample_metrics
from danlu.devices.nvml import discover, type_from_name

__all__ = [
    "METRICS",
    "DeviceError",
    "DeviceUnavailableError",
    "GpuInfo",
    "Inventory",
    "MetricSample",
    "NodeInventory",
    "NvmlMissingError",
    "discover",
    "fake_inventory",
    "inventory_from_cluster",
    "sample_metrics",
    "type_from_name",
]
