"""Discovery given a memory total in units other than NVML's bytes (a fake NVML module: a
binding or shim that reports MiB or KiB): such a GPU is left out as unreadable, naming the
reading and the likely cause, as one of an absurdly large total is, instead of being served
to the scheduler as a GPU of a few KiB, on which no job asking for GPU memory fits."""

from __future__ import annotations

from typing import Any

import pytest
from test_devices import _gpu, fake_nvml

from danlu.devices import DeviceUnavailableError, discover

GiB = 1024**3
MIN_GPU_MEMORY = 256 * 1024**2
"""``danlu.devices.nvml.MIN_GPU_MEMORY``."""
H100 = "NVIDIA H100 80GB HBM3"


def _memory_as_given(nvml: Any) -> Any:
    nvml.nvmlDeviceGetMemoryInfo = lambda h: type(
        "Memory", (), {"total": h["total"], "used": h["used"]}
    )()
    return nvml


@pytest.mark.parametrize("total", [81920, 80 * 1024**2, 141 * 1024**2, MIN_GPU_MEMORY - 1])
def test_a_gpu_whose_total_reads_in_other_units_is_left_out(
    total: int, caplog: pytest.LogCaptureFixture
) -> None:
    nvml = _memory_as_given(fake_nvml([_gpu(0, H100, 80 * GiB), _gpu(1, H100, total)]))
    inventory = discover(nvml, hostname="box")
    assert [g.uuid for g in inventory.gpus] == ["GPU-0"]
    assert f"GPU 1 cannot be read (NVML reports {total} bytes of memory" in caplog.text
    assert "MiB" in caplog.text


def test_every_gpu_in_other_units_fails_discovery_naming_the_reading() -> None:
    nvml = _memory_as_given(fake_nvml([_gpu(0, H100, 81920)]))
    with pytest.raises(DeviceUnavailableError, match="NVML reports 81920 bytes of memory"):
        discover(nvml, hostname="box")


def test_the_smallest_believed_total_is_served() -> None:
    from danlu.devices import nvml as nvml_module

    assert nvml_module.MIN_GPU_MEMORY == MIN_GPU_MEMORY
    nvml = _memory_as_given(fake_nvml([_gpu(0, "Tiny GPU", MIN_GPU_MEMORY)]))
    assert [g.memory_total for g in discover(nvml, hostname="box").gpus] == [MIN_GPU_MEMORY]
