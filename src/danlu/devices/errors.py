"""Errors of GPU discovery, in the :class:`~danlu.core.errors.DanluError` tree."""

from __future__ import annotations

from danlu.core.errors import DanluError


class DeviceError(DanluError):
    """GPU discovery or sampling failed."""


class DeviceUnavailableError(DeviceError):
    """No NVML here (no driver, no GPU, or nvidia-ml-py missing); the message says what to do."""
