"""NVML that cannot start (a fake NVML module whose ``nvmlInit`` fails as pynvml's does):
discovery fails with one line naming the fix for the reason NVML gives. A driver/library
version mismatch (a driver upgraded without a reboot) was told to install the driver."""

from __future__ import annotations

import pytest
from test_devices import fake_nvml

from danlu.devices import DeviceUnavailableError, discover


class _NvmlError(Exception):
    """pynvml's NVMLError: ``value`` is NVML's return code, the text nvmlErrorString's."""

    def __init__(self, value: int | None, text: str) -> None:
        super().__init__(text)
        self.value = value


def _failing_init(error: Exception) -> object:
    nvml = fake_nvml([])

    def init() -> None:
        raise error

    nvml.nvmlInit = init
    return nvml


@pytest.mark.parametrize(
    ("error", "fix"),
    [
        (_NvmlError(18, "RM has detected an NVML/RM version mismatch."), "reboot the host"),
        (_NvmlError(None, "Driver/library version mismatch"), "reboot the host"),
        (_NvmlError(9, "Driver Not Loaded"), "modprobe nvidia"),
        (_NvmlError(4, "Insufficient Permissions"), "/dev/nvidia*"),
    ],
)
def test_nvml_that_cannot_start_names_the_fix_for_its_reason(error: Exception, fix: str) -> None:
    with pytest.raises(DeviceUnavailableError) as failed:
        discover(_failing_init(error), hostname="box")
    message = str(failed.value)
    assert fix in message and str(error) in message
    assert "install the NVIDIA driver" not in message  # not the fix of any of these
    assert "--fake-gpus 4x80GiB" in message and "\n" not in message


@pytest.mark.parametrize(
    "error",
    [_NvmlError(12, "NVML Shared Library Not Found"), _NvmlError(999, "Unknown Error")],
)
def test_a_missing_library_or_an_unknown_reason_is_told_to_install_the_driver(
    error: Exception,
) -> None:
    with pytest.raises(DeviceUnavailableError, match="install the NVIDIA driver") as failed:
        discover(_failing_init(error), hostname="box")
    assert "reboot" not in str(failed.value)
