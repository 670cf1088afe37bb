"""Temperatures NVML reports oddly (a fake NVML module): 0 degrees, "Not Supported" and the
unsigned all-ones "not available" are no fault for the health check (it reads no
temperature), and the metrics give a gauge only for a reading (0 is one)."""

from __future__ import annotations

from typing import Any

from test_devices import _gpu, fake_nvml
from test_health import H100, _NvmlError, _with_health

from danlu.devices import discover, sample_metrics
from danlu.devices.health import NvmlHealthCheck

GiB = 1024**3
NOT_SUPPORTED = 3


def test_odd_temperatures_are_no_fault_and_no_false_gauge() -> None:
    temperatures: list[Any] = [0, None, 2**32 - 1, 45]
    gpus = [
        _gpu(i, H100, 80 * GiB, index=i, rows=(0, 0, 0, 0), retired=0, ecc=0, temp=temp)
        for i, temp in enumerate(temperatures)
    ]
    nvml = _with_health(fake_nvml(gpus), gpus, [])

    def temperature(h: dict[str, Any], sensor: int) -> Any:
        if h["temp"] is None:
            raise _NvmlError(NOT_SUPPORTED)
        return h["temp"]

    nvml.nvmlDeviceGetTemperature = temperature
    inventory = discover(nvml, hostname="box")
    check = NvmlHealthCheck(inventory, nvml)
    try:
        assert check.check() == []
    finally:
        check.close()
    gauges = {
        s.labels["gpu"]: s.value
        for s in sample_metrics(inventory, nvml=nvml)
        if s.name == "DCGM_FI_DEV_GPU_TEMP"
    }
    assert gauges == {"0": 0.0, "3": 45.0}
