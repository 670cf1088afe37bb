"""The NVML health check given a reading that fails once or reads NVML's "no value" (a fake
NVML module): a GPU closed by the check stays closed until an admin opens it, so neither a
handle NVML fails to give once (a timeout, a busy driver) nor an all-ones counter (NVML's
unsigned "not available") may close a GPU; a GPU that stays unreachable still does."""

from __future__ import annotations

from typing import Any

import pytest
from test_devices import fake_nvml
from test_health import _gpus, _NvmlError, _with_health

from danlu.devices import discover
from danlu.devices.health import GpuFault, NvmlHealthCheck
from danlu.devices.nvml import nvml_count

TIMEOUT, UNKNOWN = 10, 999
ALL_ONES_32, ALL_ONES_64 = 2**32 - 1, 2**64 - 1


def _failing(nvml: Any, index: int, times: int, code: int) -> list[int]:
    """Make NVML's handle of GPU ``index`` fail ``times`` times with ``code``; the calls
    made for it are counted in the list returned."""
    handle = nvml.nvmlDeviceGetHandleByIndex
    calls: list[int] = []

    def flaky(i: int) -> object:
        if i == index:
            calls.append(i)
            if len(calls) <= times:
                raise _NvmlError(code)
        return handle(i)

    nvml.nvmlDeviceGetHandleByIndex = flaky
    return calls


@pytest.mark.parametrize("code", [TIMEOUT, UNKNOWN])
def test_a_handle_nvml_fails_to_give_once_is_no_fault(code: int) -> None:
    gpus = _gpus(3)
    nvml = _with_health(fake_nvml(gpus), gpus, [])
    check = NvmlHealthCheck(discover(nvml, hostname="box"), nvml)
    try:
        assert check.check() == []
        calls = _failing(nvml, 1, 1, code)
        assert check.check() == []
        assert len(calls) == 2  # asked again at once
    finally:
        check.close()


def test_a_handle_nvml_never_gives_is_still_a_fault() -> None:
    gpus = _gpus(2)
    nvml = _with_health(fake_nvml(gpus), gpus, [])
    check = NvmlHealthCheck(discover(nvml, hostname="box"), nvml)
    try:
        assert check.check() == []
        _failing(nvml, 0, 10**6, UNKNOWN)
        assert check.check() == [
            GpuFault(
                ("box", 0), f"NVML cannot reach the GPU (NVML error {UNKNOWN}): reset it or reboot"
            )
        ]
    finally:
        check.close()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("ecc", ALL_ONES_64),
        ("ecc", ALL_ONES_32),
        ("rows", (0, 0, 0, ALL_ONES_32)),
        ("rows", (0, ALL_ONES_32, ALL_ONES_32, 0)),
    ],
)
def test_nvmls_all_ones_no_value_is_no_fault(field: str, value: object) -> None:
    gpus = _gpus(2)
    gpus[0][field] = value
    gpus[1]["ecc"] = 2  # a real count is still found
    nvml = _with_health(fake_nvml(gpus), gpus, [])
    check = NvmlHealthCheck(discover(nvml, hostname="box"), nvml)
    try:
        assert check.check() == [
            GpuFault(("box", 1), "2 uncorrectable ECC errors since the driver loaded")
        ]
    finally:
        check.close()


@pytest.mark.parametrize("value", [ALL_ONES_32, ALL_ONES_64, float(ALL_ONES_64)])
def test_nvml_count_reads_all_ones_as_no_value(value: object) -> None:
    assert nvml_count(value) is None
    assert nvml_count(ALL_ONES_32 - 1) == ALL_ONES_32 - 1
