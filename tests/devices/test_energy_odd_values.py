"""The NVML energy meter given odd readings (a fake NVML module): a counter or power reading
that is NaN, infinite or negative counts as a failed reading, instead of poisoning the GPU's
total for good (NaN or infinity from then on, never charged again) or making it fall."""

from __future__ import annotations

import math
from typing import Any

import pytest
from test_devices import _gpu, fake_nvml

from danlu.devices import discover
from danlu.devices.energy import NvmlEnergyMeter, SyntheticEnergyMeter
from danlu.devices.errors import DeviceError
from danlu.devices.inventory import fake_inventory

GiB = 1024**3
H100 = "NVIDIA H100 80GB HBM3"


def _meter(energy: Any, power: Any) -> tuple[NvmlEnergyMeter, dict[str, Any], tuple[str, int]]:
    """A meter on one GPU whose NVML answers ``h["energy"]`` mJ and ``h["power"]`` mW as
    they are (a None energy: "Not Supported")."""
    gpu = _gpu(0, H100, 80 * GiB, energy=energy, power=power)
    nvml = fake_nvml([gpu])

    def counter(h: dict[str, Any]) -> Any:
        if h["energy"] is None:
            raise RuntimeError("Not Supported")
        return h["energy"]

    nvml.nvmlDeviceGetTotalEnergyConsumption = counter
    nvml.nvmlDeviceGetPowerUsage = lambda h: h["power"]
    inventory = discover(nvml, hostname="box")
    return NvmlEnergyMeter(inventory, nvml), gpu, (inventory.nodes[0].name, 0)


@pytest.mark.parametrize("odd", [float("nan"), math.inf, -5_000, 2**32 - 1])
def test_an_odd_power_reading_counts_as_none(odd: float) -> None:
    """``2**32 - 1`` mW (NVML's unsigned "invalid") was integrated as 4.3 MW: 43 MJ charged
    for one 10 s interval."""
    meter, gpu, key = _meter(None, 300_000)
    try:
        assert meter.read(0.0, {}) == {key: 0.0}
        assert meter.read(10.0, {})[key] == pytest.approx(3000.0)
        gpu["power"] = odd
        assert meter.read(20.0, {})[key] == pytest.approx(3000.0)
        gpu["power"] = 100_000
        assert meter.read(30.0, {})[key] == pytest.approx(4000.0)
    finally:
        meter.close()


@pytest.mark.parametrize("odd", [float("nan"), math.inf, -1])
def test_an_odd_counter_reading_counts_as_a_failed_one(odd: float) -> None:
    meter, gpu, key = _meter(5_000_000, 300_000)
    try:
        assert meter.read(0.0, {}) == {key: 0.0}
        gpu["energy"] = odd
        assert meter.read(10.0, {})[key] == 0.0
        gpu["energy"] = 6_000_000  # 1000 J more than at the first reading
        assert meter.read(20.0, {})[key] == pytest.approx(1000.0)
        gpu["energy"] = 6_500_000
        assert meter.read(30.0, {})[key] == pytest.approx(1500.0)
    finally:
        meter.close()


@pytest.mark.parametrize("odd", [float("nan"), math.inf])
def test_an_odd_first_counter_reading_does_not_poison_the_total(odd: float) -> None:
    meter, gpu, key = _meter(odd, 300_000)
    try:
        assert meter.read(0.0, {}) == {key: 0.0}
        gpu["energy"] = 5_000_000
        assert meter.read(10.0, {})[key] == pytest.approx(3000.0)  # the interval by power
        gpu["energy"] = 6_000_000
        assert meter.read(20.0, {})[key] == pytest.approx(4000.0)
    finally:
        meter.close()


def test_a_counter_spike_beyond_any_gpus_power_is_charged_nothing() -> None:
    """A counter that leaps by 2**60 mJ in 10 s (far beyond MAX_PLAUSIBLE_WATTS) is a glitch:
    the interval counts nothing, and later rises count from the new value; a spike of one
    reading that falls back again charges nothing either."""
    meter, gpu, key = _meter(5_000_000, 300_000)
    try:
        assert meter.read(0.0, {}) == {key: 0.0}
        gpu["energy"] = 6_000_000
        assert meter.read(10.0, {})[key] == pytest.approx(1000.0)
        gpu["energy"] = 6_000_000 + 2**60  # stays up: a reset to garbage
        assert meter.read(20.0, {})[key] == pytest.approx(1000.0)
        gpu["energy"] = 6_500_000 + 2**60
        assert meter.read(30.0, {})[key] == pytest.approx(1500.0)
        gpu["energy"] = 7_000_000 + 2**61  # one reading's spike, then back down
        assert meter.read(40.0, {})[key] == pytest.approx(1500.0)
        gpu["energy"] = 7_000_000 + 2**60
        assert meter.read(50.0, {})[key] == pytest.approx(1500.0)
        gpu["energy"] = 7_400_000 + 2**60
        assert meter.read(60.0, {})[key] == pytest.approx(1900.0)
    finally:
        meter.close()


def test_a_plausible_fast_rise_is_charged_in_full() -> None:
    """2 kW for 10 s (a big accelerator at its limit) is below the ceiling: all counted."""
    meter, gpu, key = _meter(5_000_000, 300_000)
    try:
        meter.read(0.0, {})
        gpu["energy"] = 25_000_000
        assert meter.read(10.0, {})[key] == pytest.approx(20_000.0)
    finally:
        meter.close()


def test_reading_a_closed_meter_is_an_error_not_a_new_nvml_session() -> None:
    meter, _gpu, _key = _meter(5_000_000, 300_000)
    meter.read(0.0, {})
    meter.close()
    with pytest.raises(DeviceError, match="closed"):
        meter.read(10.0, {})
    assert meter._lib is None  # NVML was not started again


@pytest.mark.parametrize("odd", [float("nan"), math.inf])
def test_a_reading_time_that_is_not_finite_is_refused(odd: float) -> None:
    """NaN as the first time would have stopped every later interval from counting."""
    meter, _gpu, _key = _meter(None, 300_000)
    synthetic = SyntheticEnergyMeter(fake_inventory("1x80GiB"))
    try:
        for each in (meter, synthetic):
            with pytest.raises(ValueError, match="finite"):
                each.read(odd, {})
        assert meter.read(0.0, {}) is not None
        assert list(meter.read(10.0, {}).values()) == [pytest.approx(3000.0)]
    finally:
        meter.close()
