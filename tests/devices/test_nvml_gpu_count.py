"""A GPU count NVML cannot mean (negative, fractional, not a number, or more than any host
has) stops discovery with an error naming the count: a negative count was read as no GPUs
at all, and a huge one had discovery read and warn about every index up to it."""

from __future__ import annotations

from typing import Any

import pytest
from test_devices import _gpu, fake_nvml

from danlu.devices import DeviceUnavailableError, discover
from danlu.devices.nvml import MAX_GPUS_PER_NODE

GiB = 1024**3


@pytest.mark.parametrize(
    "count", [-1, 2.5, "N/A", None, float("nan"), MAX_GPUS_PER_NODE + 1, 2**32 - 1]
)
def test_a_count_no_host_has_is_an_error_naming_it(count: Any) -> None:
    nvml = fake_nvml([_gpu(0, "NVIDIA H100 80GB HBM3", 80 * GiB)])
    read: list[int] = []
    handle = nvml.nvmlDeviceGetHandleByIndex
    nvml.nvmlDeviceGetHandleByIndex = lambda i: read.append(i) or handle(i)
    nvml.nvmlDeviceGetCount = lambda: count
    with pytest.raises(DeviceUnavailableError, match=f"NVML counts {count!r} GPUs"):
        discover(nvml, hostname="box")
    assert read == []  # no index was read
    assert nvml.calls == ["init", "shutdown"]  # and NVML was shut down


@pytest.mark.parametrize("count", [1, 1.0])
def test_a_count_a_host_may_have_is_read(count: Any) -> None:
    nvml = fake_nvml([_gpu(0, "NVIDIA H100 80GB HBM3", 80 * GiB)])
    nvml.nvmlDeviceGetCount = lambda: count
    assert len(discover(nvml, hostname="box").gpus) == int(count)
