"""Discovery and metrics given odd NVML answers (a fake NVML module): a GPU whose memory total
is 0, negative or absurd is left out as unreadable (it was served to the scheduler as a GPU
type of that much memory); memory used is kept within the total; a reading that is NaN,
negative or out of range is no reading (None, so no gauge) rather than a made-up number;
a name that is not UTF-8 no longer makes its GPU unreadable; a name that reads empty gives a
named GPU type, not ``GpuType(name='')``."""

from __future__ import annotations

import math
from typing import Any

import pytest
from test_devices import _gpu, fake_nvml

from danlu.devices import discover, sample_metrics, type_from_name
from danlu.devices.nvml import MAX_GPU_MEMORY, nvml_number, nvml_watts

GiB = 1024**3
MiB = 1024**2
H100 = "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize("total", [0, -5, "N/A", None, float("nan"), MAX_GPU_MEMORY + 1])
def test_a_gpu_with_a_memory_total_nvml_cannot_mean_is_left_out(
    total: Any, caplog: pytest.LogCaptureFixture
) -> None:
    nvml = fake_nvml([_gpu(0, H100, 80 * GiB), _gpu(1, H100, total)])
    nvml.nvmlDeviceGetMemoryInfo = lambda h: type(
        "Memory", (), {"total": h["total"], "used": h["used"]}
    )()
    inventory = discover(nvml, hostname="box")
    assert [g.uuid for g in inventory.gpus] == ["GPU-0"]
    assert [(n.name, n.gpus, n.gpu_type.memory) for n in inventory.cluster().nodes] == [
        ("box", 1, 80 * GiB)
    ]
    assert "GPU 1 cannot be read (NVML reports" in caplog.text
    assert "bytes of memory)" in caplog.text


def test_memory_used_is_kept_within_the_total(caplog: pytest.LogCaptureFixture) -> None:
    gpus = [_gpu(0, H100, 80 * GiB), _gpu(1, H100, 80 * GiB)]
    nvml = fake_nvml(gpus)
    inventory = discover(nvml, hostname="box")
    gpus[0]["used"] = 10**20
    gpus[1]["used"] = -GiB  # no reading at all: this GPU's gauges are left out this time
    nvml.nvmlDeviceGetMemoryInfo = lambda h: type(
        "Memory", (), {"total": h["total"], "used": h["used"]}
    )()
    samples = sample_metrics(inventory, nvml=nvml)
    by = {s.name: s.value for s in samples if s.labels["gpu"] == "0"}
    assert by["DCGM_FI_DEV_FB_USED"] == 80 * GiB / MiB
    assert by["DCGM_FI_DEV_FB_FREE"] == 0
    assert {s.labels["gpu"] for s in samples} == {"0"}
    assert "GPU 1 of box cannot be read (NVML reports -1073741824 bytes of memory used)" in (
        caplog.text
    )


def test_readings_nvml_cannot_mean_give_no_gauge() -> None:
    gpus = [_gpu(0, H100, 80 * GiB, util=float("nan"), temp=-40, power=-5_000)]
    nvml = fake_nvml(gpus)
    nvml.nvmlDeviceGetPowerUsage = lambda h: h["power"]
    gpu = discover(nvml, hostname="box").gpus[0]
    assert (gpu.utilization, gpu.temperature, gpu.power) == (None, None, None)
    gpus[0].update(util=250, temp="N/A", power=float("inf"))
    names = {s.name for s in sample_metrics(discover(nvml, hostname="box"), nvml=nvml)}
    assert names == {"DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE"}
    gpus[0].update(util=100, temp=55, power=250_000)
    gpu = discover(nvml, hostname="box").gpus[0]
    assert (gpu.utilization, gpu.temperature, gpu.power) == (100.0, 55.0, 250.0)


def test_a_name_that_is_not_utf8_keeps_its_gpu() -> None:
    nvml = fake_nvml([_gpu(0, b"NVIDIA H100 \xff80GB", 80 * GiB)])
    inventory = discover(nvml, hostname="box")
    assert [g.name for g in inventory.gpus] == ["NVIDIA H100 \ufffd80GB"]
    assert inventory.gpus[0].gpu_type.name == "H100"


@pytest.mark.parametrize("blank", ["", b"", "   ", "\x00\x00", b"\x00 "])
def test_a_gpu_whose_name_reads_empty_is_served_under_a_fallback_name(
    blank: str | bytes, caplog: pytest.LogCaptureFixture
) -> None:
    """It is readable and usable, so it is kept (as a name that is not UTF-8 is), but named
    ``unknown-<GiB>GiB`` (its size, as discovery groups GPUs), with a warning: its type was
    ``GpuType(name='')``, a type nobody can name, shared by unnamed GPUs of any size."""
    nvml = fake_nvml(
        [_gpu(0, H100, 80 * GiB), _gpu(1, blank, 80 * GiB), _gpu(2, blank, 24 * GiB + MiB)]
    )
    inventory = discover(nvml, hostname="box")
    assert [(g.name, g.gpu_type.name) for g in inventory.gpus] == [
        (H100, "H100"),
        ("unknown-80GiB", "unknown-80GiB"),
        ("unknown-24GiB", "unknown-24GiB"),
    ]
    assert [(n.name, n.gpus, n.gpu_type.name) for n in inventory.cluster().nodes] == [
        ("box-0", 1, "H100"),
        ("box-1", 1, "unknown-80GiB"),
        ("box-2", 1, "unknown-24GiB"),
    ]
    assert "GPU 1's NVML name reads empty: it is served as GPU type unknown-80GiB" in caplog.text
    models = {s.labels["modelName"] for s in sample_metrics(inventory, nvml=nvml)}
    assert models == {H100, "unknown-80GiB", "unknown-24GiB"}
    assert type_from_name("", 80 * GiB).name == "unknown-80GiB"


@pytest.mark.parametrize(
    ("value", "expected"),
    [(300_000, 300_000.0), (0, 0.0), ("12", 12.0), (2.5, 2.5)]
    + [(v, None) for v in (None, "N/A", -1, float("nan"), math.inf, True, object(), 10**400)],
)
def test_nvml_number(value: object, expected: float | None) -> None:
    assert nvml_number(value) == expected


def test_readings_of_nvml_unsigned_invalid_value_give_no_gauge() -> None:
    """``0xFFFFFFFF`` (NVML's unsigned "invalid") read as 4.3 MW and 4.3e9 degrees C."""
    invalid = 2**32 - 1
    gpus = [_gpu(0, H100, 80 * GiB, util=50, temp=invalid, power=invalid)]
    nvml = fake_nvml(gpus)
    nvml.nvmlDeviceGetPowerUsage = lambda h: h["power"]
    gpu = discover(nvml, hostname="box").gpus[0]
    assert (gpu.utilization, gpu.temperature, gpu.power) == (50.0, None, None)
    gpus[0].update(temp=95, power=700_000)  # a hot GPU at an H100's board power
    gpu = discover(nvml, hostname="box").gpus[0]
    assert (gpu.temperature, gpu.power) == (95.0, 700.0)


@pytest.mark.parametrize(
    ("milliwatts", "watts"),
    [(700_000, 700.0), (5_000_000, 5000.0), (5_000_001, None), (2**32 - 1, None), (-1, None)],
)
def test_nvml_watts(milliwatts: object, watts: float | None) -> None:
    assert nvml_watts(milliwatts) == watts
