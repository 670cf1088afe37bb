"""A GPU that leaves the driver while danlu runs (a fake NVML module): NVML's indices of
the GPUs after it shift down by one, so reading the inventory's indices read each of them
as the GPU before it. The health check, the energy meter and the metrics now find each GPU
by the UUID it was discovered with; they used to cordon the GPU before a faulty one
(while the faulty one read as healthy), charge one GPU's energy to another, and label one
GPU's gauges with another's index."""

from __future__ import annotations

from typing import Any

import pytest
from test_devices import _gpu, fake_nvml
from test_health import _NvmlError, _with_health

from danlu.devices import discover, sample_metrics
from danlu.devices.energy import NvmlEnergyMeter
from danlu.devices.health import GpuFault, NvmlHealthCheck

GiB = 1024**3
H100 = "NVIDIA H100 80GB HBM3"
INVALID_ARGUMENT, NOT_FOUND = 2, 6


def _by_uuid(nvml: Any, gpus: list[dict[str, Any]]) -> None:
    """``nvml`` with NVML's lookups of the GPUs in ``gpus`` (the driver's now): by index
    (INVALID_ARGUMENT past the last) and by UUID (NOT_FOUND for a GPU not there)."""
    by_index = nvml.nvmlDeviceGetHandleByIndex

    def handle(index: int) -> Any:
        if index >= len(gpus):
            raise _NvmlError(INVALID_ARGUMENT)
        return by_index(index)

    def by_uuid(uuid: str) -> Any:
        for gpu in gpus:
            if gpu["uuid"] == uuid:
                return gpu
        raise _NvmlError(NOT_FOUND)

    nvml.nvmlDeviceGetHandleByIndex = handle
    nvml.nvmlDeviceGetHandleByUUID = by_uuid


def test_the_health_check_finds_each_gpu_by_its_uuid() -> None:
    gpus = [_gpu(i, H100, 80 * GiB, index=i, rows=(0, 0, 0, 0), retired=0, ecc=0) for i in range(3)]
    nvml = _with_health(fake_nvml(gpus), gpus, [])
    _by_uuid(nvml, gpus)
    check = NvmlHealthCheck(discover(nvml, hostname="box"), nvml)
    try:
        assert check.check() == []
        del gpus[1]  # GPU-1 leaves the driver: GPU-2 is NVML's index 1 now
        gpus[1]["ecc"] = 2
        assert check.check() == [
            GpuFault(
                ("box", 1),
                f"NVML cannot reach the GPU (NVML error {NOT_FOUND}): reset it or reboot",
            ),
            GpuFault(("box", 2), "2 uncorrectable ECC errors since the driver loaded"),
        ]
    finally:
        check.close()


def test_the_energy_meter_reads_each_gpus_own_counter() -> None:
    gpus = [_gpu(i, H100, 80 * GiB, energy=(i + 1) * 1_000_000, power=300_000) for i in range(3)]
    nvml = fake_nvml(gpus)
    nvml.nvmlDeviceGetTotalEnergyConsumption = lambda h: h["energy"]
    _by_uuid(nvml, gpus)
    inventory = discover(nvml, hostname="box")
    meter = NvmlEnergyMeter(inventory, nvml)
    keys = [("box", i) for i in range(3)]
    try:
        assert meter.read(0.0, {}) == dict.fromkeys(keys, 0.0)
        for gpu in gpus:
            gpu["energy"] += 100_000  # 100 J each
        assert meter.read(10.0, {}) == dict.fromkeys(keys, pytest.approx(100.0))
        del gpus[1]  # GPU-1 leaves the driver: GPU-2 is NVML's index 1 now
        gpus[0]["energy"] += 100_000
        gpus[1]["energy"] += 500_000
        reading = meter.read(20.0, {})
        assert [reading[k] for k in keys] == [
            pytest.approx(200.0),
            pytest.approx(100.0),  # its counter cannot be read: its total holds
            pytest.approx(600.0),
        ]
    finally:
        meter.close()


def test_the_metrics_read_each_gpu_by_its_uuid(caplog: pytest.LogCaptureFixture) -> None:
    gpus = [_gpu(i, H100, 80 * GiB, util=10 * (i + 1)) for i in range(3)]
    nvml = fake_nvml(gpus)
    _by_uuid(nvml, gpus)
    inventory = discover(nvml, hostname="box")
    del gpus[1]  # GPU-1 leaves the driver: GPU-2 is NVML's index 1 now
    samples = sample_metrics(inventory, nvml=nvml)
    utilization = {
        (s.labels["gpu"], s.labels["UUID"]): s.value
        for s in samples
        if s.name == "DCGM_FI_DEV_GPU_UTIL"
    }
    assert utilization == {("0", "GPU-0"): 10.0, ("2", "GPU-2"): 30.0}
    assert "GPU 1 of box cannot be read" in caplog.text


def test_an_xid_event_closes_the_gpu_it_came_from() -> None:
    """The event's GPU was named by NVML's index now: after GPU-1 left, GPU-2's Xid 48
    closed the GPU discovered at index 1 (the one that left), and GPU-2 stayed open."""
    gpus = [_gpu(i, H100, 80 * GiB, index=i, rows=(0, 0, 0, 0), retired=0, ecc=0) for i in range(3)]
    events: list[tuple[int, int]] = []
    nvml = _with_health(fake_nvml(gpus), gpus, events)
    _by_uuid(nvml, gpus)
    nvml.nvmlDeviceGetIndex = gpus.index  # NVML's index of a GPU: its place in the driver now
    check = NvmlHealthCheck(discover(nvml, hostname="box"), nvml)
    try:
        assert check.check() == []
        del gpus[1]
        events.append((1, 48))  # from the GPU at the driver's place 1 now: GPU-2
        faults = [f for f in check.check() if f.reason.startswith("Xid")]
        assert faults == [GpuFault(("box", 2), "Xid 48 (double-bit ECC error)")]
    finally:
        check.close()
