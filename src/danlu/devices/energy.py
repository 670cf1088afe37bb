"""GPU energy meters: the energy each GPU of an inventory has used, as a running total.

A meter is read every few seconds by the control plane, which charges each interval's energy
to the jobs holding the GPU (:mod:`danlu.server.energy`). Two kinds:

- :class:`NvmlEnergyMeter` reads NVML's total-energy counter (millijoules since the driver
  loaded; Volta and later). A GPU whose driver does not report it is metered by integrating
  its power draw over the time between readings instead (and goes on from that total should
  its counter answer later).
- :class:`SyntheticEnergyMeter` meters fake GPUs: each draws the fake inventory's synthetic
  power (:func:`~danlu.devices.metrics.synthetic_power`) over the time between readings.

GPUs are named ``(node, gpu)``: the inventory node's name and the GPU's position on it (as
allocations name them). Readings are joules, counted from the meter's first reading (0 there).
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Mapping
from types import ModuleType
from typing import Any, Protocol

from danlu.devices.errors import DeviceError
from danlu.devices.inventory import GpuKey, Inventory
from danlu.devices.metrics import synthetic_power
from danlu.devices.nvml import (
    MAX_PLAUSIBLE_WATTS,
    device_handle,
    load_nvml,
    nvml_count,
    nvml_watts,
)

log = logging.getLogger(__name__)


class EnergyMeter(Protocol):
    """Reads the energy each GPU has used since the meter's first reading."""

    def read(self, t: float, busy: Mapping[GpuKey, int]) -> dict[GpuKey, float]:
        """Joules used by each GPU from the first reading up to ``t``: seconds on the
        caller's clock, not before the last reading's. A meter that integrates power counts
        the time between readings on it, so the caller reads on a steady clock that no
        wall-clock step moves (the control plane's energy loop:
        :func:`~danlu.server.loops.steady_clock`, not POSIX time). ``busy``: the milli-GPU
        the jobs hold on each GPU now (a synthetic meter's load; a real one ignores it)."""
        ...

    def close(self) -> None:
        """Release what the meter holds (NVML); reading after it is an error."""
        ...


def _check_time(t: float) -> None:
    """Refuse a reading time that is not a finite number: NaN would stop every later interval
    from counting (NaN compares false), infinity would end the meter's clock."""
    if not math.isfinite(t):
        raise ValueError(f"an energy reading's time t must be finite POSIX seconds, got {t!r}")


class _Integrator:
    """Running totals of power integrated over time, per GPU (the rectangle rule: the power
    read at a reading counts for the whole interval before it)."""

    def __init__(self) -> None:
        self.totals: dict[GpuKey, float] = {}
        self._last: float | None = None

    @property
    def last(self) -> float | None:
        """The latest reading's time (None before the first)."""
        return self._last

    def add(self, t: float, watts: Mapping[GpuKey, float]) -> dict[GpuKey, float]:
        _check_time(t)
        elapsed = 0.0 if self._last is None else max(0.0, t - self._last)
        self._last = t if self._last is None else max(self._last, t)
        for key, power in watts.items():
            self.totals[key] = self.totals.get(key, 0.0) + power * elapsed
        return dict(self.totals)


class SyntheticEnergyMeter:
    """The fake GPUs of ``inventory``, drawing :func:`synthetic_power` for the load they
    carry at each reading."""

    def __init__(self, inventory: Inventory) -> None:
        self.gpus: tuple[GpuKey, ...] = tuple(
            (node.name, position) for node in inventory.nodes for position in range(len(node.gpus))
        )
        self._integrator = _Integrator()

    def read(self, t: float, busy: Mapping[GpuKey, int]) -> dict[GpuKey, float]:
        watts = {key: synthetic_power(busy.get(key, 0)) for key in self.gpus}
        return self._integrator.add(t, watts)

    def close(self) -> None:
        """Nothing to release."""


class NvmlEnergyMeter:
    """The GPUs of an NVML ``inventory``, read through NVML (initialised at the first
    reading, shut down by :meth:`close`). ``nvml``: a module object standing in for
    ``pynvml`` (tests)."""

    def __init__(self, inventory: Inventory, nvml: ModuleType | Any | None = None) -> None:
        self.gpus: dict[GpuKey, int] = inventory.devices()
        self._uuids: dict[GpuKey, str] = inventory.uuids()
        """Each GPU's UUID: the GPU is read wherever NVML's index of it is now."""
        self._module = nvml
        self._lib: Any = None
        self._first: dict[GpuKey, float] = {}
        """Each counted GPU's counter at the first reading (joules)."""
        self._counted: dict[GpuKey, float] = {}
        """Each counted GPU's last reading (joules since the first)."""
        self._counted_at: dict[GpuKey, float] = {}
        """When each counted GPU's counter last answered (the start of the interval its
        next rise covers)."""
        self._integrator = _Integrator()
        """Totals of the GPUs without a counter, from their power draw."""
        self._said: set[tuple[GpuKey, str]] = set()
        """The GPUs whose way of metering has been logged, with that way (``"power"``,
        ``"none"``): said once per meter, not at every reading."""
        self._closed = False

    def _counter(self, key: GpuKey) -> float | None:
        """The device's total-energy counter in joules, or None where it has none (or
        answers with no valid reading: NaN, infinite or negative would poison the total
        for good, and NVML's all-ones "not available" reads as a counter of 18 million
        TJ, whose difference with the next reading loses the joules in rounding, so such
        a reading counts as a failed one: :func:`~danlu.devices.nvml.nvml_count`)."""
        try:
            handle = device_handle(self._lib, self.gpus[key], self._uuids.get(key))
            millijoules = nvml_count(self._lib.nvmlDeviceGetTotalEnergyConsumption(handle))
        except Exception:  # pre-Volta GPUs and some drivers: "Not Supported"
            return None
        return None if millijoules is None else millijoules / 1000.0

    def _power(self, key: GpuKey) -> float:
        """The device's power draw in watts, for a GPU whose counter does not answer (0
        where NVML cannot read it either, or answers with no valid reading: one above
        :data:`MAX_PLAUSIBLE_WATTS` would be charged as megawatts for the whole interval).
        That the GPU is metered by its power, or as using nothing, is logged once."""
        try:
            handle = device_handle(self._lib, self.gpus[key], self._uuids.get(key))
            watts = nvml_watts(self._lib.nvmlDeviceGetPowerUsage(handle))
        except Exception:  # a GPU that reports neither is metered as using nothing
            watts = None
        if watts is None:
            self._say_once(
                key,
                "none",
                logging.WARNING,
                "reports neither an energy counter nor its power draw: its energy is "
                "counted as 0 while it does not (check nvidia-smi -q -d POWER)",
            )
            return 0.0
        self._say_once(
            key,
            "power",
            logging.INFO,
            "reports no energy counter (GPUs before Volta, some drivers): its energy is "
            "its power draw integrated between readings",
        )
        return watts

    def _say_once(self, key: GpuKey, way: str, level: int, text: str) -> None:
        """Log that GPU ``key`` is metered ``way`` (``text``), the first time only."""
        if (key, way) not in self._said:
            self._said.add((key, way))
            log.log(level, "energy: GPU %d of %s %s", self.gpus[key], key[0], text)

    def read(self, t: float, busy: Mapping[GpuKey, int]) -> dict[GpuKey, float]:
        """Each GPU's joules since the first reading: its counter's rise since then, or
        its power integrated where the counter has not answered yet. A GPU whose counter
        answers only after it was metered by power goes on from its integrated total (this
        reading's interval by power too), so that no total ever falls. A counter that rose
        faster than :data:`MAX_PLAUSIBLE_WATTS` since the last reading is a glitch: the
        interval counts nothing and the total goes on from the new counter value. (A
        counter that failed for some readings rises over all the time since it last
        answered, and is held to the ceiling of that time.) A counter that fell is one the
        driver started again from 0 (it reloaded) where it reads no more than that ceiling:
        the interval counts what it reads (the energy used since the reload; it counted
        nothing, though the GPU ran on), and a glitch otherwise.

        Raises :class:`DeviceError` once the meter is closed (it would start NVML again,
        never to be shut down)."""
        if self._closed:
            raise DeviceError("this energy meter is closed; make a new one with energy_meter()")
        _check_time(t)
        last = self._integrator.last
        if self._lib is None:
            self._lib = load_nvml(self._module)
        counted: dict[GpuKey, float] = {}
        watts: dict[GpuKey, float] = {}
        # the GPUs whose counter answers for the first time after they were metered by
        # power, with their counter now (joules)
        switched: dict[GpuKey, float] = {}
        for key in self.gpus:
            joules = self._counter(key)
            if joules is None:
                if key in self._first:  # a counter that failed this once: no change
                    counted[key] = self._counted[key]
                else:
                    watts[key] = self._power(key)
            elif key in self._first or key not in self._integrator.totals:
                before = self._counted.get(key, 0.0)
                first = self._first.setdefault(key, joules)
                rise = joules - first - before
                since = self._counted_at.get(key, last)
                ceiling = MAX_PLAUSIBLE_WATTS * (0.0 if since is None else max(0.0, t - since))
                if rise < 0.0 and joules <= ceiling:  # the driver reloaded: from 0 again
                    self._first[key] = -before
                    rise = joules
                elif rise < 0.0 or rise > ceiling:  # a glitch
                    self._first[key] = joules - before
                    rise = 0.0
                # the total goes on from the last by the rise (not the counter less its
                # first value, which a huge glitch reading leaves rounded below the total)
                counted[key] = self._counted[key] = before + rise
                self._counted_at[key] = t if since is None else max(since, t)
            else:
                switched[key] = joules
                watts[key] = self._power(key)
        totals = self._integrator.add(t, watts)
        for key, joules in switched.items():
            self._first[key] = joules - totals[key]
            counted[key] = self._counted[key] = totals[key]
            self._counted_at[key] = t if last is None else max(last, t)
        return totals | counted

    def close(self) -> None:
        self._closed = True
        if self._lib is not None:
            with contextlib.suppress(Exception):  # shutting down is best effort
                self._lib.nvmlShutdown()
            self._lib = None


def energy_meter(inventory: Inventory, nvml: ModuleType | Any | None = None) -> EnergyMeter | None:
    """The meter for ``inventory``'s GPUs: NVML's for GPUs read through NVML, a synthetic one
    for fake GPUs, None for a cluster's nodes (Slurm's, Ray's), whose GPUs this host cannot
    read."""
    if inventory.source == "nvml":
        return NvmlEnergyMeter(inventory, nvml)
    if inventory.source == "fake":
        return SyntheticEnergyMeter(inventory)
    return None
