"""Errors of GPU discovery, in the :class:`~danlu.core.errors.DanluError` tree."""

from __future__ import annotations

from danlu.core.errors import DanluError


class DeviceError(DanluError):
    """GPU discovery or sampling failed."""


class DeviceUnavailableError(DeviceError):
    """No NVML here (no driver, no GPU, or nvidia-ml-py missing); the message says what to do."""


class NvmlMissingError(DeviceUnavailableError):
    """This host has no NVML at all: no ``pynvml`` to import, or no NVML library
    (``libnvidia-ml.so.1``: no NVIDIA driver) for it to load; not NVML that is there and
    failed (a version mismatch, the driver not loaded), which is a plain
    :class:`DeviceUnavailableError`."""
