"""GPU health: the faults that take a GPU out of service, read from NVML.

The control plane's health loop (:mod:`danlu.server.health`) asks a :class:`HealthCheck`
every few seconds which GPUs are faulty, and closes each one to new work with the fault as
the reason (a per-GPU cordon: the node's other GPUs take work as before). The faults read,
each only where the GPU and its driver report it (a check they do not support is skipped):

- the GPU is lost: NVML answers ``GPU_IS_LOST`` for it (it fell off the bus, Xid 79);
- the GPU needs a reset: NVML answers ``RESET_REQUIRED`` for it;
- NVML cannot reach the GPU at all (no handle for its index, e.g. it left the driver, at two
  tries in a row: one failed call is no fault);
- row remapping failed, or a remapping waits for a GPU reset (Ampere and later);
- retired pages wait for a GPU reset (before Ampere);
- uncorrectable ECC errors since the driver loaded (NVML's volatile count);
- a critical Xid event (NVML's ``XidCriticalError`` events, read without waiting), except
  the Xids an application's own fault raises (:data:`APPLICATION_XIDS`), which say nothing
  of the GPU.

A GPU's state faults are found again at every check while they last; an Xid event is
reported once, by the check that reads it. GPUs are named ``(node, position)`` as
allocations name them (:data:`~danlu.devices.inventory.GpuKey`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Final, Protocol

from danlu.devices.errors import DeviceError
from danlu.devices.inventory import GpuKey, Inventory
from danlu.devices.nvml import device_handle, handle_uuid, load_nvml, nvml_count

log = logging.getLogger(__name__)

APPLICATION_XIDS: Final = frozenset({13, 31, 43, 45, 68, 109})
"""Xids raised by an application's own faults (an illegal instruction or address, a kernel
stopped, cleanup after them, a video decoder exception, a context switch timeout): the
GPU itself is fine."""

XID_MEANINGS: Final = {
    48: "double-bit ECC error",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapping failed",
    74: "NVLink error",
    79: "GPU fell off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP firmware timeout",
    120: "GSP firmware error",
}
"""What the common critical Xids mean (NVIDIA's Xid catalog has them all)."""

_GPU_IS_LOST: Final = 15
"""``NVML_ERROR_GPU_IS_LOST``."""
_RESET_REQUIRED: Final = 16
"""``NVML_ERROR_RESET_REQUIRED``: the GPU cannot be used until it is reset."""
_XID_CRITICAL: Final = 8
"""``nvmlEventTypeXidCriticalError``."""
_EVENTS_PER_CHECK: Final = 1000
"""Events read at most by one check (the rest wait for the next)."""


@dataclass(frozen=True, slots=True)
class GpuFault:
    """A fault found on GPU ``gpu``: ``reason`` says what and what to do about it."""

    gpu: GpuKey
    reason: str


class HealthCheck(Protocol):
    """Finds the faulty GPUs of an inventory."""

    def check(self) -> list[GpuFault]:
        """The faults found now (a GPU may have several)."""
        ...

    def close(self) -> None:
        """Release what the check holds (NVML); checking after it is an error."""
        ...


class _Unusable(DeviceError):
    """NVML answered that the GPU cannot be used at all (``GPU_IS_LOST``,
    ``RESET_REQUIRED``): the message is the fault's reason (raised and caught within this
    module)."""


_LOST_REASON: Final = "GPU is lost (fell off the bus): reset or reboot"
_RESET_REASON: Final = "GPU needs a reset (NVML answers RESET_REQUIRED): reset it or reboot"


def _error_value(exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def _raise_unusable(exc: BaseException) -> None:
    """Raise :class:`_Unusable` where NVML's error ``exc`` says the GPU cannot be used."""
    value = _error_value(exc)
    if value == _GPU_IS_LOST:
        raise _Unusable(_LOST_REASON) from None
    if value == _RESET_REQUIRED:
        raise _Unusable(_RESET_REASON) from None


def _rows(value: object) -> tuple[int, int, int] | None:
    """NVML's remapped rows ``(corrected, uncorrectable, pending, failed)`` as
    ``(uncorrectable, pending, failed)``, or None where the answer is not four counts."""
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes)) or len(value) != 4:
        return None
    counts = [nvml_count(v) for v in value]
    if any(c is None for c in counts):
        return None
    _, uncorrectable, pending, failed = (c or 0 for c in counts)
    return uncorrectable, pending, failed


class NvmlHealthCheck:
    """The GPUs of an NVML ``inventory``, checked through NVML (initialised at the first
    check, shut down by :meth:`close`). ``nvml``: a module object standing in for
    ``pynvml`` (tests)."""

    def __init__(self, inventory: Inventory, nvml: ModuleType | Any | None = None) -> None:
        self.gpus: dict[GpuKey, int] = inventory.devices()
        self._uuids: dict[GpuKey, str] = inventory.uuids()
        """Each GPU's UUID: the GPU is checked wherever NVML's index of it is now."""
        self._by_device = {device: key for key, device in self.gpus.items()}
        self._by_uuid = {uuid: key for key, uuid in self._uuids.items()}
        self._module = nvml
        self._lib: Any = None
        self._events: Any = None
        """NVML's event set for Xid events (None: none registered)."""
        self._closed = False

    def _start(self) -> None:
        self._lib = load_nvml(self._module)
        self._events = self._event_set(frozenset())

    def _event_set(self, leave_out: Collection[GpuKey]) -> Any:
        """A new NVML event set taking the Xid events of the check's GPUs but those in
        ``leave_out``; None where the driver has no events or no GPU takes them."""
        lib = self._lib
        try:
            events = lib.nvmlEventSetCreate()
        except Exception:  # no events on this driver: the state checks still run
            return None
        registered = False
        for key, device in self.gpus.items():
            if key in leave_out:
                continue
            try:
                handle = device_handle(lib, device, self._uuids.get(key))
                lib.nvmlDeviceRegisterEvents(handle, _XID_CRITICAL, events)
                registered = True
            except Exception:  # a GPU without Xid events (or lost already)
                continue
        if registered:
            return events
        with contextlib.suppress(Exception):
            lib.nvmlEventSetFree(events)
        return None

    def _free_events(self) -> None:
        """Free the event set (best effort); none is held after."""
        if self._events is not None:
            with contextlib.suppress(Exception):
                self._lib.nvmlEventSetFree(self._events)
            self._events = None

    def _read(self, call: Any, *args: Any) -> Any:
        """``call(*args)``; :class:`_Unusable` for a lost GPU or one that needs a reset,
        None where it is not supported (or fails otherwise: a check that cannot be read
        finds nothing)."""
        try:
            return call(*args)
        except Exception as exc:
            _raise_unusable(exc)
            return None

    def _handle(self, key: GpuKey) -> Any:
        """NVML's handle of the GPU ``key`` (:func:`device_handle`), asked for again at once
        when NVML fails to give it: a GPU the check closes stays closed until an admin opens
        it, so one failed call (a timeout, a busy driver) must not close it. Raises the
        second try's error."""
        lib, device, uuid = self._lib, self.gpus[key], self._uuids.get(key)
        try:
            return device_handle(lib, device, uuid)
        except Exception:  # asked again: a GPU that is gone fails both
            return device_handle(lib, device, uuid)

    def _state_faults(self, key: GpuKey) -> list[str]:
        lib = self._lib
        try:
            handle = self._handle(key)
        except Exception as exc:  # a GPU NVML cannot reach is not a healthy one
            _raise_unusable(exc)
            return [f"NVML cannot reach the GPU ({exc}): reset it or reboot"]
        found: list[str] = []
        rows = _rows(self._read(lib.nvmlDeviceGetRemappedRows, handle))
        if rows is not None:
            uncorrectable, pending, failed = rows
            if failed:
                found.append("row remapping failed: the GPU needs service")
            elif pending:
                found.append(
                    f"row remapping pending ({uncorrectable} rows for uncorrectable errors): "
                    "reset the GPU"
                )
        retired = nvml_count(self._read(lib.nvmlDeviceGetRetiredPagesPendingStatus, handle))
        if retired is not None and retired == getattr(lib, "NVML_FEATURE_ENABLED", 1):
            found.append("retired pages pending: reset the GPU")
        errors = nvml_count(
            self._read(
                lib.nvmlDeviceGetTotalEccErrors,
                handle,
                getattr(lib, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1),
                getattr(lib, "NVML_VOLATILE_ECC", 0),
            )
        )
        if errors:
            found.append(f"{errors} uncorrectable ECC errors since the driver loaded")
        return found

    def _xid_faults(self, unusable: Collection[GpuKey]) -> list[GpuFault]:
        """The Xid faults waiting in the event set. Once a GPU of the set is lost, NVML's
        wait answers ``GPU_IS_LOST`` at once, every time, so no other GPU's Xid would be
        read again: the set is then made again without the GPUs this check found
        ``unusable`` (and those NVML no longer registers), once a check."""
        lib = self._lib
        wait = getattr(lib, "nvmlEventSetWait_v2", None) or lib.nvmlEventSetWait
        found: list[GpuFault] = []
        remade = False
        for _ in range(_EVENTS_PER_CHECK):
            try:
                event = wait(self._events, 0)
            except Exception as exc:  # NVML's timeout: no event left (any other: none read)
                if remade or _error_value(exc) != _GPU_IS_LOST:
                    break
                remade = True
                self._free_events()
                self._events = self._event_set(unusable)
                if self._events is None:
                    break
                log.warning(
                    "health: NVML's Xid events answer that a GPU is lost: they are read "
                    "again without the GPUs found unusable (%s)",
                    ", ".join(f"{node} GPU {gpu}" for node, gpu in sorted(unusable)) or "none",
                )
                continue
            if nvml_count(getattr(event, "eventType", None)) != _XID_CRITICAL:
                continue
            xid = nvml_count(getattr(event, "eventData", None))
            if xid is None:  # an event without its Xid: passed over, the others still read
                log.warning("health: an Xid event without a valid Xid (%r) is passed over", event)
                continue
            if xid in APPLICATION_XIDS:
                continue
            # an event without its GPU names none (closes nothing), as one of an odd index
            key = self._event_gpu(getattr(event, "device", None))
            if key is not None:
                meaning = XID_MEANINGS.get(xid, "see NVIDIA's Xid catalog")
                found.append(GpuFault(key, f"Xid {xid} ({meaning})"))
        return found

    def _event_gpu(self, handle: Any) -> GpuKey | None:
        """The GPU an event's ``handle`` names: by its UUID (NVML's indices shift when a GPU
        leaves the driver), by its index where the UUID cannot be read; None for a GPU that
        is none of the check's or cannot be named (nothing to close)."""
        uuid = handle_uuid(self._lib, handle)
        if uuid is not None:
            return self._by_uuid.get(uuid)
        try:
            device = nvml_count(self._lib.nvmlDeviceGetIndex(handle))
        except Exception:
            return None
        return None if device is None else self._by_device.get(device)

    def check(self) -> list[GpuFault]:
        """The faults found now. Raises :class:`DeviceError` once the check is closed (it
        would start NVML again, never to be shut down)."""
        if self._closed:
            raise DeviceError("this health check is closed; make a new one with health_check()")
        if self._lib is None:
            self._start()
        faults: list[GpuFault] = []
        unusable: set[GpuKey] = set()
        for key in self.gpus:
            try:
                faults += [GpuFault(key, reason) for reason in self._state_faults(key)]
            except _Unusable as why:
                faults.append(GpuFault(key, str(why)))
                unusable.add(key)
        if self._events is not None:
            faults += self._xid_faults(unusable)
        return faults

    def close(self) -> None:
        self._closed = True
        if self._lib is not None:
            self._free_events()
            with contextlib.suppress(Exception):  # shutting down is best effort
                self._lib.nvmlShutdown()
            self._lib = None


def health_check(inventory: Inventory, nvml: ModuleType | Any | None = None) -> HealthCheck | None:
    """The health check of ``inventory``'s GPUs: NVML's for GPUs read through NVML; None for
    fake GPUs (they have no faults) and for a cluster's nodes (Slurm's, Ray's), whose GPUs
    this host cannot read."""
    if inventory.source == "nvml":
        return NvmlHealthCheck(inventory, nvml)
    return None
