"""Discovery of a GPU in MIG mode (a fake NVML module): it is left out with a warning; it
was served as a whole GPU (all its memory), while a job given its index sees one MIG
instance of it, a fraction of that memory."""

from __future__ import annotations

from typing import Any

import pytest
from test_devices import _gpu, fake_nvml
from test_health import _NvmlError

from danlu.devices import DeviceUnavailableError, discover

GiB = 1024**3
H100 = "NVIDIA H100 80GB HBM3"
NOT_SUPPORTED = 3


def _with_mig(nvml: Any) -> Any:
    """``nvml`` with ``nvmlDeviceGetMigMode``: ``[current, pending]`` from a GPU's ``mig``
    (None: "Not Supported", as on GPUs before Ampere)."""
    nvml.NVML_DEVICE_MIG_ENABLE = 1

    def mode(h: dict[str, Any]) -> list[int]:
        if h.get("mig") is None:
            raise _NvmlError(NOT_SUPPORTED)
        return [h["mig"], h["mig"]]

    nvml.nvmlDeviceGetMigMode = mode
    return nvml


def test_a_gpu_in_mig_mode_is_left_out(caplog: pytest.LogCaptureFixture) -> None:
    gpus = [
        _gpu(0, H100, 80 * GiB, mig=0),
        _gpu(1, H100, 80 * GiB, mig=1),
        _gpu(2, H100, 80 * GiB),  # no MIG on this GPU
    ]
    inventory = discover(_with_mig(fake_nvml(gpus)), hostname="box")
    assert [g.uuid for g in inventory.gpus] == ["GPU-0", "GPU-2"]
    assert inventory.device_map() == {(0, 0): "0", (0, 1): "2"}
    assert "GPU 1 is in MIG mode: it is left out of the inventory" in caplog.text


def test_only_gpus_in_mig_mode_is_an_error_naming_it() -> None:
    nvml = _with_mig(fake_nvml([_gpu(0, H100, 80 * GiB, mig=1)]))
    with pytest.raises(DeviceUnavailableError, match=r"GPU 0: in MIG mode"):
        discover(nvml, hostname="box")
    assert nvml.calls == ["init", "shutdown"]


def test_a_gpu_in_mig_mode_whose_readings_fail_is_told_to_leave_mig_mode(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A GPU in MIG mode that answers NOT_SUPPORTED for its whole-GPU memory was warned of
    as unreadable, to be reset (nvidia-smi -r) or the host rebooted: neither ends MIG mode."""
    gpus = [_gpu(0, H100, 80 * GiB, mig=1), _gpu(1, H100, 80 * GiB, mig=0)]
    nvml = _with_mig(fake_nvml(gpus))
    read_memory = nvml.nvmlDeviceGetMemoryInfo

    def memory(h: dict[str, Any]) -> Any:
        if h["mig"]:
            raise _NvmlError(NOT_SUPPORTED)
        return read_memory(h)

    nvml.nvmlDeviceGetMemoryInfo = memory
    inventory = discover(nvml, hostname="box")
    assert [g.uuid for g in inventory.gpus] == ["GPU-1"]
    assert "GPU 0 is in MIG mode" in caplog.text and "cannot be read" not in caplog.text
    del gpus[1]
    with pytest.raises(DeviceUnavailableError, match=r"GPU 0: in MIG mode"):
        discover(nvml, hostname="box")
