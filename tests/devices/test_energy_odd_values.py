"""The NVML energy meter given odd readings (a fake NVML module): a counter or power reading
that is NaN, infinite or negative counts as a failed reading, instead of poisoning the GPU's
total for good (NaN or infinity from then on, never charged again) or making it fall."""

from __future__ import annotations

import math
from typing import Any

import pytest
from test_devices import _gpu, fake_nvml

from danlu.devices import discover
from danlu.devices.energy import NvmlEnergyMeter

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


@pytest.mark.parametrize("odd", [float("nan"), math.inf, -5_000])
def test_an_odd_power_reading_counts_as_none(odd: float) -> None:
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
