"""The NVML health check and energy meter on the host's real GPUs (``gpu``-marked; skipped
without ``nvidia-smi``). Their unit tests (``test_health.py``, ``test_energy_meters.py``) drive
a fake NVML module; these read the driver itself."""

from __future__ import annotations

import shutil
import time

import pytest

from danlu.devices import discover
from danlu.devices.energy import NvmlEnergyMeter, energy_meter
from danlu.devices.health import NvmlHealthCheck, health_check

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="no NVIDIA GPU here"),
]


def test_a_healthy_gpu_passes_the_nvml_health_check() -> None:
    inventory = discover()
    check = health_check(inventory)
    assert isinstance(check, NvmlHealthCheck)
    try:
        assert check.check() == []
        assert check.check() == []  # a second pass reads the same state and no Xid event
    finally:
        check.close()


def test_the_nvml_energy_meter_counts_a_busy_gpus_joules() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    inventory = discover()
    meter = energy_meter(inventory)
    assert isinstance(meter, NvmlEnergyMeter)
    try:
        start = time.time()
        first = meter.read(start, {})
        assert set(first) == set(meter.gpus) and all(v == 0.0 for v in first.values())
        a = torch.randn(8192, 8192, device="cuda:0", dtype=torch.bfloat16)
        while time.time() < start + 3.0:
            for _ in range(20):
                a = torch.tanh(a @ a)
            torch.cuda.synchronize()
        time.sleep(0.2)  # the driver's counter is updated every few tens of milliseconds
        end = time.time()
        later = meter.read(end, {})
        busy = next(key for key, device in meter.gpus.items() if device == 0)
        # three seconds of bf16 products: over 30 W on average, under 1.5 kW
        assert 30 * (end - start) < later[busy] < 1500 * (end - start), later
        assert all(later[key] >= 0.0 for key in later)
        del a
    finally:
        meter.close()
        torch.cuda.empty_cache()  # later tests in this process measure the allocator
