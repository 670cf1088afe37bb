"""GPU energy meters: NVML's energy counters (with a fake NVML module), power integrated
where a GPU has no counter, and the fake GPUs' synthetic draw."""

from __future__ import annotations

from typing import Any

import pytest
from test_devices import _gpu, fake_nvml

from danlu.core.cluster import Cluster, Node, gpu_type
from danlu.devices import discover, fake_inventory, inventory_from_cluster
from danlu.devices.energy import NvmlEnergyMeter, SyntheticEnergyMeter, energy_meter
from danlu.devices.metrics import IDLE_POWER, MAX_POWER, synthetic_power

GiB = 1024**3


def _with_energy(nvml: Any) -> Any:
    """``nvml`` with ``nvmlDeviceGetTotalEnergyConsumption`` (mJ) where a GPU has
    ``energy``, "Not Supported" where it has not."""

    def energy(h: dict[str, Any]) -> int:
        if h.get("energy") is None:
            raise RuntimeError("Not Supported")
        return int(h["energy"])

    nvml.nvmlDeviceGetTotalEnergyConsumption = energy
    return nvml


def test_synthetic_power_rises_with_the_compute_held() -> None:
    assert synthetic_power(0) == IDLE_POWER
    assert synthetic_power(1000) == MAX_POWER
    assert synthetic_power(500) == pytest.approx((IDLE_POWER + MAX_POWER) / 2)
    assert synthetic_power(5000) == MAX_POWER and synthetic_power(-3) == IDLE_POWER


def test_the_synthetic_meter_integrates_each_gpus_draw() -> None:
    meter = SyntheticEnergyMeter(fake_inventory("2x80GiB,1x40GiB"))
    names = sorted({node for node, _ in meter.gpus})
    first = meter.read(100.0, {})
    assert set(first) == set(meter.gpus) and all(v == 0.0 for v in first.values())
    busy = {(names[0], 0): 1000, (names[0], 1): 250}
    second = meter.read(110.0, busy)
    assert second[(names[0], 0)] == pytest.approx(10 * MAX_POWER)
    assert second[(names[0], 1)] == pytest.approx(10 * synthetic_power(250))
    assert second[(names[1], 0)] == pytest.approx(10 * IDLE_POWER)
    # a reading at an earlier time adds nothing; totals never fall
    assert meter.read(105.0, busy) == second
    assert meter.read(111.0, {})[(names[0], 0)] == pytest.approx(10 * MAX_POWER + IDLE_POWER)


def test_nvml_counters_count_from_the_first_reading() -> None:
    gpus = [
        _gpu(0, "NVIDIA H100 80GB HBM3", 80 * GiB, energy=5_000_000, power=300_000),
        _gpu(1, "NVIDIA H100 80GB HBM3", 80 * GiB, energy=9_000_000, power=300_000),
    ]
    nvml = _with_energy(fake_nvml(gpus))
    inventory = discover(nvml, hostname="box")
    meter = NvmlEnergyMeter(inventory, nvml)
    node = inventory.nodes[0].name
    assert meter.read(0.0, {}) == {(node, 0): 0.0, (node, 1): 0.0}
    gpus[0]["energy"] += 250_000  # mJ
    gpus[1]["energy"] += 1_000
    assert meter.read(10.0, {}) == {(node, 0): 250.0, (node, 1): 1.0}
    gpus[0]["energy"] = 40_000  # the driver reloaded: its counter starts again from 0
    assert meter.read(20.0, {})[(node, 0)] == 290.0  # and the 40 J since count
    gpus[0]["energy"] += 10_000
    assert meter.read(30.0, {})[(node, 0)] == 300.0
    gpus[1]["energy"] = None  # a failed reading: no change this time
    assert meter.read(40.0, {})[(node, 1)] == 1.0
    meter.close()
    assert nvml.calls.count("shutdown") == 2  # discover's and the meter's
    assert nvml.calls.count("init") == 2  # the meter initialises NVML once


def test_gpus_without_a_counter_are_metered_by_their_power_draw() -> None:
    gpus = [_gpu(0, "Tesla P100-PCIE-16GB", 16 * GiB, power=200_000)]
    nvml = _with_energy(fake_nvml(gpus))
    inventory = discover(nvml, hostname="old")
    meter = NvmlEnergyMeter(inventory, nvml)
    key = (inventory.nodes[0].name, 0)
    assert meter.read(50.0, {}) == {key: 0.0}
    assert meter.read(60.0, {}) == {key: pytest.approx(2000.0)}  # 200 W for 10 s
    gpus[0]["power"] = None  # no power reading either: counted as nothing
    assert meter.read(70.0, {}) == {key: pytest.approx(2000.0)}


def test_a_counter_that_works_only_after_the_first_reading_continues_the_total() -> None:
    """A GPU whose counter failed at the first reading is metered by its power draw; once the
    counter answers, the total goes on from there (it fell back to 0: energy un-charged)."""
    gpus = [_gpu(0, "NVIDIA H100 80GB HBM3", 80 * GiB, energy=None, power=300_000)]
    nvml = _with_energy(fake_nvml(gpus))
    inventory = discover(nvml, hostname="box")
    meter = NvmlEnergyMeter(inventory, nvml)
    key = (inventory.nodes[0].name, 0)
    assert meter.read(0.0, {}) == {key: 0.0}
    assert meter.read(10.0, {}) == {key: pytest.approx(3000.0)}  # 300 W for 10 s
    gpus[0]["energy"] = 5_000_000_000  # mJ since the driver loaded: answers at last
    assert meter.read(20.0, {}) == {key: pytest.approx(6000.0)}  # that interval by power
    gpus[0]["energy"] += 1_000_000  # 1000 J more, by the counter from now on
    assert meter.read(30.0, {}) == {key: pytest.approx(7000.0)}
    gpus[0]["energy"] = None  # fails once more: no change
    assert meter.read(40.0, {}) == {key: pytest.approx(7000.0)}
    gpus[0]["energy"] = 5_001_500_000
    assert meter.read(50.0, {}) == {key: pytest.approx(7500.0)}


def test_which_meter_an_inventory_gets() -> None:
    assert isinstance(energy_meter(fake_inventory("1x80GiB")), SyntheticEnergyMeter)
    nvml = _with_energy(fake_nvml([_gpu(0, "NVIDIA A100-SXM4-80GB", 80 * GiB, energy=1)]))
    assert isinstance(energy_meter(discover(nvml), nvml), NvmlEnergyMeter)
    cluster = Cluster((Node("n1", 8, gpu_type("H100")),))
    for source in ("slurm", "ray"):  # a cluster's GPUs: this host cannot read them
        assert energy_meter(inventory_from_cluster(cluster, source)) is None
