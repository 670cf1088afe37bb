"""The NVML health check on a GPU NVML cannot use (a fake NVML module): a GPU whose handle
NVML no longer gives (it left the driver, or NVML answers Unknown for it) and one that
answers ``RESET_REQUIRED`` are faults; both were reported healthy, their errors read as
checks the GPU does not support. And a closed check refuses to check, instead of starting
NVML again, never to be shut down."""

from __future__ import annotations

import pytest
from test_devices import fake_nvml
from test_health import _gpus, _NvmlError, _with_health

from danlu.devices import discover
from danlu.devices.errors import DeviceError
from danlu.devices.health import GpuFault, NvmlHealthCheck

RESET_REQUIRED, UNKNOWN, INVALID_ARGUMENT = 16, 999, 2


@pytest.mark.parametrize("code", [UNKNOWN, INVALID_ARGUMENT])
def test_a_gpu_nvml_gives_no_handle_for_is_a_fault(code: int) -> None:
    gpus = _gpus(3)
    nvml = _with_health(fake_nvml(gpus), gpus, [])
    check = NvmlHealthCheck(discover(nvml, hostname="box"), nvml)
    assert check.check() == []
    handle = nvml.nvmlDeviceGetHandleByIndex

    def unreachable(index: int) -> object:
        if index == 1:
            raise _NvmlError(code)
        return handle(index)

    nvml.nvmlDeviceGetHandleByIndex = unreachable
    gpus[2]["ecc"] = 1
    try:
        assert check.check() == [
            GpuFault(
                ("box", 1), f"NVML cannot reach the GPU (NVML error {code}): reset it or reboot"
            ),
            GpuFault(("box", 2), "1 uncorrectable ECC errors since the driver loaded"),
        ]
    finally:
        check.close()


@pytest.mark.parametrize("field", ["handle", "rows", "retired", "ecc"])
def test_a_gpu_that_answers_reset_required_is_a_fault(field: str) -> None:
    gpus = _gpus(2)
    nvml = _with_health(fake_nvml(gpus), gpus, [])
    check = NvmlHealthCheck(discover(nvml, hostname="box"), nvml)
    assert check.check() == []
    name = {
        "handle": "nvmlDeviceGetHandleByIndex",
        "rows": "nvmlDeviceGetRemappedRows",
        "retired": "nvmlDeviceGetRetiredPagesPendingStatus",
        "ecc": "nvmlDeviceGetTotalEccErrors",
    }[field]
    read = getattr(nvml, name)

    def needs_reset(first: object, *rest: object) -> object:
        if first in (0, gpus[0]):
            raise _NvmlError(RESET_REQUIRED)
        return read(first, *rest)

    setattr(nvml, name, needs_reset)
    try:
        assert check.check() == [
            GpuFault(
                ("box", 0), "GPU needs a reset (NVML answers RESET_REQUIRED): reset it or reboot"
            )
        ]
    finally:
        check.close()


def test_a_closed_check_refuses_to_check_instead_of_starting_nvml_again() -> None:
    gpus = _gpus(1)
    nvml = _with_health(fake_nvml(gpus), gpus, [])
    check = NvmlHealthCheck(discover(nvml, hostname="box"), nvml)
    assert check.check() == []
    check.close()
    calls = list(nvml.calls)
    with pytest.raises(DeviceError, match="closed"):
        check.check()
    assert nvml.calls == calls  # NVML was not started again
    assert check._lib is None
