"""GPU discovery with an injected fake NVML module, fake inventories and DCGM-named metrics."""

from __future__ import annotations

import shutil
import types
from typing import Any

import pytest

from danlu.core.cluster import Allocation, Cluster, GpuShare, Node, gpu_type
from danlu.core.errors import ConfigError, DanluError
from danlu.devices import (
    METRICS,
    DeviceUnavailableError,
    discover,
    fake_inventory,
    inventory_from_cluster,
    sample_metrics,
    type_from_name,
)

GiB, MiB = 1024**3, 1024**2


class _Err(Exception):
    pass


class _Lost(Exception):
    """pynvml's NVMLError for ``NVML_ERROR_GPU_IS_LOST`` (15)."""

    def __init__(self) -> None:
        super().__init__("GPU is lost")
        self.value = 15


def _lose(nvml: Any, uuid: str) -> None:
    """Make NVML answer GPU_IS_LOST for the memory of the GPU ``uuid`` (it fell off the bus)."""
    read = nvml.nvmlDeviceGetMemoryInfo

    def memory(h: dict[str, Any]) -> Any:
        if h["uuid"] == uuid:
            raise _Lost
        return read(h)

    nvml.nvmlDeviceGetMemoryInfo = memory


def fake_nvml(gpus: list[dict[str, Any]], fail_init: bool = False) -> Any:
    """A module object with the pynvml functions danlu calls."""
    m = types.SimpleNamespace()
    m.NVML_TEMPERATURE_GPU = 0
    m.calls = []

    def init() -> None:
        m.calls.append("init")
        if fail_init:
            raise _Err("NVML Shared Library Not Found")

    m.nvmlInit = init
    m.nvmlShutdown = lambda: m.calls.append("shutdown")
    m.nvmlDeviceGetCount = lambda: len(gpus)
    m.nvmlDeviceGetHandleByIndex = lambda i: gpus[i]
    m.nvmlDeviceGetName = lambda h: h["name"]
    m.nvmlDeviceGetUUID = lambda h: h["uuid"]
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(
        total=h["total"], used=h["used"], free=h["total"] - h["used"]
    )
    m.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=h["util"], memory=0)
    m.nvmlDeviceGetTemperature = lambda h, sensor: h["temp"]

    def power(h: dict[str, Any]) -> int:
        if h.get("power") is None:
            raise _Err("Not Supported")
        return int(h["power"])

    m.nvmlDeviceGetPowerUsage = power
    return m


def _gpu(i: int, name: str | bytes, total: int, **kw: Any) -> dict[str, Any]:
    base = {"name": name, "uuid": f"GPU-{i}", "total": total, "used": 0, "util": 0, "temp": 40}
    return base | kw


def test_discover_parses_nvml_and_groups_by_type() -> None:
    nvml = fake_nvml(
        [
            _gpu(0, "NVIDIA H100 80GB HBM3", 81559 * MiB, used=1024 * MiB, util=50, power=300_000),
            _gpu(1, b"NVIDIA A100-SXM4-40GB", 40960 * MiB),
            _gpu(2, "NVIDIA H100 80GB HBM3", 81559 * MiB),
        ]
    )
    inv = discover(nvml, hostname="box")
    assert inv.source == "nvml" and nvml.calls == ["init", "shutdown"]
    assert [n.name for n in inv.nodes] == ["box-0", "box-1"]
    h100 = inv.nodes[0].gpus[0]
    assert (h100.index, h100.uuid, h100.gpu_type.name) == (0, "GPU-0", "H100")
    assert (h100.memory_used, h100.memory_free) == (1024 * MiB, 80535 * MiB)
    assert (h100.utilization, h100.temperature, h100.power) == (50.0, 40.0, 300.0)
    assert inv.nodes[1].gpus[0].name == "NVIDIA A100-SXM4-40GB"
    assert inv.nodes[1].gpus[0].power is None  # unsupported field -> None, not an error
    cluster = inv.cluster()
    assert [(n.gpus, n.gpu_type.name, n.gpu_type.memory) for n in cluster.nodes] == [
        (2, "H100", 81559 * MiB),
        (1, "A100-40GB", 40960 * MiB),
    ]
    assert inv.device_map() == {(0, 0): "0", (0, 1): "2", (1, 0): "1"}


def test_no_nvml_is_a_clear_error() -> None:
    with pytest.raises(DeviceUnavailableError, match="--fake-gpus") as err:
        discover(fake_nvml([], fail_init=True))
    assert isinstance(err.value, DanluError)
    with pytest.raises(DeviceUnavailableError, match="no GPU"):
        discover(fake_nvml([]))


def test_a_gpu_nvml_cannot_read_is_left_out_and_the_others_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One lost GPU of four at start-up: the three NVML reads make the inventory (it used to
    fail discovery as a whole, and the server fell back to a fake GPU)."""
    nvml = fake_nvml([_gpu(i, "NVIDIA H100 80GB HBM3", 81559 * MiB) for i in range(4)])
    _lose(nvml, "GPU-2")
    inv = discover(nvml, hostname="box")
    assert inv.source == "nvml" and nvml.calls == ["init", "shutdown"]
    assert [(g.index, g.uuid) for g in inv.gpus] == [(0, "GPU-0"), (1, "GPU-1"), (3, "GPU-3")]
    assert inv.device_map() == {(0, 0): "0", (0, 1): "1", (0, 2): "3"}
    assert "GPU 2 cannot be read (GPU is lost)" in caplog.text
    # none readable: as good as no GPU, with what NVML said
    everything = fake_nvml([_gpu(0, "NVIDIA H100 80GB HBM3", 81559 * MiB)])
    _lose(everything, "GPU-0")
    with pytest.raises(DeviceUnavailableError, match=r"none of NVML's 1 GPUs.*GPU is lost"):
        discover(everything, hostname="box")


@pytest.mark.parametrize(
    ("name", "memory", "expected"),
    [
        ("NVIDIA H200", 140 * GiB, "H200"),
        ("NVIDIA A100-SXM4-80GB", 80 * GiB, "A100-80GB"),
        ("NVIDIA A100-SXM4-40GB", 40 * GiB, "A100-40GB"),
        ("Tesla V100-SXM2-16GB", 16 * GiB, "V100-16GB"),
        ("Tesla T4", 15 * GiB, "T4"),
        ("NVIDIA A10G", 23 * GiB, "A10"),
        ("NVIDIA GeForce RTX 4090", 24 * GiB, "RTX4090"),
        ("NVIDIA L40S", 45 * GiB, "NVIDIA L40S"),
    ],
)
def test_type_from_name(name: str, memory: int, expected: str) -> None:
    assert type_from_name(name, memory).name == expected
    assert type_from_name(name, memory).memory == memory


def test_fake_inventory_forms() -> None:
    inv = fake_inventory("4x80GiB", hostname="h")
    assert inv.source == "fake" and len(inv.gpus) == 4
    assert inv.cluster().nodes[0].gpus == 4
    assert inv.cluster().nodes[0].gpu_type.memory == 80 * GiB
    mixed = fake_inventory("2xH100, 4x40GiB:A100-40GB", hostname="h")
    assert [(n.name, len(n.gpus), n.gpus[0].gpu_type.name) for n in mixed.nodes] == [
        ("h-0", 2, "H100"),
        ("h-1", 4, "A100-40GB"),
    ]
    assert [g.index for g in mixed.gpus] == list(range(6))
    assert len({g.uuid for g in mixed.gpus}) == 6
    assert "fake" in mixed.describe()


@pytest.mark.parametrize("bad", ["", "4", "0x80GiB", "4x", "4xfoo", "4x80GiB:Nope", "x80GiB"])
def test_fake_inventory_errors_name_the_flag(bad: str) -> None:
    with pytest.raises(ConfigError, match="--fake-gpus") as err:
        fake_inventory(bad)
    assert "e.g. --fake-gpus 4x80GiB" in str(err.value)
    assert str(err.value).count("H100-NVL") <= 1  # the types are listed once


def test_fake_gpus_read_a_type_alias_as_the_type_and_refuse_sizes_without_a_unit() -> None:
    # "4090" is an alias of RTX4090: it used to give GPUs of 4,090 bytes
    inv = fake_inventory("2x4090", hostname="h")
    assert [(g.gpu_type.name, g.memory_total) for g in inv.gpus] == [("RTX4090", 24 * GiB)] * 2
    with pytest.raises(ConfigError, match=r"'2x80': 80 bytes\? give the size a unit"):
        fake_inventory("2x80")
    with pytest.raises(ConfigError, match=r"a GPU of 100.0MiB is too small"):
        fake_inventory("2x100MiB")
    with pytest.raises(ConfigError, match="names a type twice"):
        fake_inventory("2x4090:H100")


def test_fake_metrics_follow_allocations() -> None:
    inv = fake_inventory("2x80GiB", hostname="h")
    allocations = [
        Allocation((GpuShare(0, 0, 500, 20 * GiB),)),
        Allocation((GpuShare(0, 0, 500, 30 * GiB),)),
    ]
    samples = sample_metrics(inv, allocations)
    assert {s.name for s in samples} == set(METRICS)
    by = {(s.name, s.labels["gpu"]): s for s in samples}
    assert by["DCGM_FI_DEV_FB_USED", "0"].value == 50 * 1024
    assert by["DCGM_FI_DEV_FB_FREE", "0"].value == 30 * 1024
    assert by["DCGM_FI_DEV_GPU_UTIL", "0"].value == 100
    assert by["DCGM_FI_DEV_GPU_UTIL", "1"].value == 0
    assert by["DCGM_FI_DEV_GPU_TEMP", "0"].value > by["DCGM_FI_DEV_GPU_TEMP", "1"].value
    assert by["DCGM_FI_DEV_POWER_USAGE", "0"].value > by["DCGM_FI_DEV_POWER_USAGE", "1"].value
    assert dict(by["DCGM_FI_DEV_FB_USED", "1"].labels) == {
        "gpu": "1",
        "UUID": "GPU-fake-0001",
        "device": "nvidia1",
        "modelName": "Fake generic",
        "Hostname": "h",
    }


def test_nvml_metrics_are_read_fresh() -> None:
    gpus = [_gpu(0, "NVIDIA H100 80GB HBM3", 80 * GiB, power=100_000)]
    nvml = fake_nvml(gpus)
    inv = discover(nvml, hostname="h")
    gpus[0].update(used=8 * GiB, util=77, temp=70)
    by = {s.name: s.value for s in sample_metrics(inv, nvml=nvml)}
    assert by == {
        "DCGM_FI_DEV_GPU_UTIL": 77,
        "DCGM_FI_DEV_FB_USED": 8 * 1024,
        "DCGM_FI_DEV_FB_FREE": 72 * 1024,
        "DCGM_FI_DEV_GPU_TEMP": 70,
        "DCGM_FI_DEV_POWER_USAGE": 100.0,
    }


def test_one_gpu_nvml_cannot_read_leaves_the_others_metrics(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gpus = [_gpu(i, "NVIDIA H100 80GB HBM3", 80 * GiB, util=50) for i in range(4)]
    nvml = fake_nvml(gpus)
    inv = discover(nvml, hostname="h")
    _lose(nvml, "GPU-2")  # it falls off the bus after start-up
    samples = sample_metrics(inv, nvml=nvml)
    assert sorted({s.labels["gpu"] for s in samples}) == ["0", "1", "3"]
    assert len(samples) == 3 * 4  # no power reading: four gauges a GPU
    assert "GPU 2 of h cannot be read (GPU is lost)" in caplog.text
    assert nvml.calls[-1] == "shutdown"


@pytest.mark.parametrize("source", ["slurm", "ray"])
def test_a_clusters_gpus_get_no_made_up_metrics(source: str) -> None:
    """This host cannot read a Slurm or Ray cluster's GPUs: no gauges, rather than the fake
    GPUs' synthetic temperature and power under made-up UUIDs."""
    inv = inventory_from_cluster(Cluster((Node("gpu-node-01", 2, gpu_type("H100")),)), source)
    assert sample_metrics(inv, [Allocation((GpuShare(0, 0, 1000, GiB),))]) == []


@pytest.mark.gpu
@pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="no NVIDIA GPU here")
def test_real_nvml() -> None:
    inv = discover()
    assert inv.gpus and all(g.memory_total > 0 for g in inv.gpus)
    assert {s.name for s in sample_metrics(inv)} >= {"DCGM_FI_DEV_FB_USED"}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("4x40GiB:A100", ("A100-40GB", 40 * GiB)),
        ("4x80GiB:a100", ("A100-80GB", 80 * GiB)),
        ("4x16GiB:V100", ("V100-16GB", 16 * GiB)),
        ("4x32GiB:v100", ("V100-32GB", 32 * GiB)),
        ("4x40GiB:A100-40GB", ("A100-40GB", 40 * GiB)),
        ("2x94GiB:H100-NVL", ("H100-NVL", 94 * GiB)),
    ],
)
def test_a_fake_gpu_s_size_picks_the_variant_of_a_type_named_without_one(
    spec: str, expected: tuple[str, int]
) -> None:
    # "4x40GiB:A100" became an A100-80GB with 40 GiB: the alias was resolved without the size
    node = fake_inventory(spec, hostname="h").cluster().nodes[0]
    assert (node.gpu_type.name, node.gpu_type.memory) == expected


@pytest.mark.parametrize(
    ("spec", "variant"),
    [
        ("4x40GiB:A100-80GB", "A100-40GB"),
        ("4x80GiB:a100-40", "A100-80GB"),
        ("2x16GiB:v100m32", "V100-16GB"),
    ],
)
def test_a_fake_gpu_s_size_that_contradicts_its_named_variant_is_refused(
    spec: str, variant: str
) -> None:
    with pytest.raises(ConfigError, match="--fake-gpus") as err:
        fake_inventory(spec)
    assert f"is of type {variant}" in str(err.value)
    assert f":{variant}" in str(err.value)  # the spelling that works
