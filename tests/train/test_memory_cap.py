"""The GPU memory cap keeps the whole process within ``DANLU_GPU_MEMORY_LIMIT``: the caching
allocator gets the charge less what the process holds outside it (the CUDA context), measured
by NVML and never below the context the control plane's estimate allows for the GPU type. The
arithmetic with numbers; the wiring with ``torch.cuda``'s functions and NVML replaced (no GPU
needed: ``test_cuda_memory_cap.py`` checks a real one)."""

from __future__ import annotations

import logging
import os
import sys
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from danlu.estimate.memory.gpus import GPUS
from danlu.train.memory_cap import (
    ContextOutOfMemoryError,
    apply_memory_limit,
    context_allowance,
    memory_cap,
)

MiB = 1024**2
GiB = 1024**3
H100_NAME = "NVIDIA H100 80GB HBM3"
H100_TOTAL = 85_031_714_816
"""``total_memory`` of an H100 80GB HBM3."""
H100_CONTEXT = GPUS["h100"].context_bytes
"""The context the control plane's estimate allows for an H100 (750.8 MiB)."""
CUDA0 = torch.device("cuda", 0)


def test_the_allocator_gets_the_charge_less_what_the_process_holds_outside_it() -> None:
    cap = memory_cap(8 * GiB, H100_TOTAL, H100_CONTEXT)
    assert cap.allocator_bytes == 8 * GiB - H100_CONTEXT
    assert cap.fraction == pytest.approx((8 * GiB - H100_CONTEXT) / H100_TOTAL, rel=1e-12)
    # what the allocator may reserve (fraction x the device, as torch computes it) plus the
    # context stays within the charge
    assert int(cap.fraction * H100_TOTAL) + H100_CONTEXT <= 8 * GiB


def test_an_auto_charge_leaves_the_allocator_the_reserved_peak_it_was_estimated_for() -> None:
    """``gpu_memory: auto`` charges the estimate's reserved peak plus the GPU table's context
    (``auto_gpu_memory``): the allocator gets that peak, not the peak plus the context."""
    reserved_peak = 5 * GiB + 123 * MiB
    allowance, gpu = context_allowance(H100_NAME, H100_TOTAL)
    assert (allowance, gpu) == (H100_CONTEXT, "h100")
    cap = memory_cap(reserved_peak + H100_CONTEXT, H100_TOTAL, allowance)
    assert cap.allocator_bytes == reserved_peak


def test_the_allowance_follows_the_gpu_type_and_is_conservative_for_an_unknown_one() -> None:
    assert context_allowance("NVIDIA A100-SXM4-40GB", 40 * GiB)[0] == 430 * MiB
    assert context_allowance("Some Future GPU", 200 * GiB)[0] == 768 * MiB


def test_a_charge_beyond_the_device_caps_at_the_whole_device() -> None:
    cap = memory_cap(100 * GiB, H100_TOTAL, H100_CONTEXT)
    assert cap.fraction == 1.0 and cap.allocator_bytes == H100_TOTAL


@pytest.mark.parametrize("charge", [512 * MiB, H100_CONTEXT])
def test_a_charge_no_larger_than_the_context_is_refused_naming_gpu_memory(charge: int) -> None:
    with pytest.raises(ContextOutOfMemoryError) as caught:
        memory_cap(charge, H100_TOTAL, H100_CONTEXT, "the CUDA context")
    message = str(caught.value)
    assert "resources.gpu_memory" in message and "DANLU_GPU_MEMORY_LIMIT" in message
    assert "750.8MiB" in message and "(the CUDA context)" in message
    assert "whole GPUs" in message


class FakeCuda:
    """``torch.cuda`` on one H100 whose NVML device-wide count is ``neighbours`` before this
    process initialises CUDA and grows by ``context`` then; :attr:`fractions` records the
    caps set."""

    def __init__(self, neighbours: int, context: int, reserved: int = 0) -> None:
        self.initialised = False
        self.neighbours = neighbours
        self.context = context
        self.reserved = reserved
        self.fractions: list[float] = []

    def install(self, monkeypatch: pytest.MonkeyPatch, *, initialised: bool = False) -> None:
        self.initialised = initialised
        cuda = torch.cuda
        monkeypatch.setattr(cuda, "is_available", lambda: True)
        monkeypatch.setattr(cuda, "is_initialized", lambda: self.initialised)
        monkeypatch.setattr(cuda, "current_device", lambda: 0)
        monkeypatch.setattr(cuda, "device_memory_used", self.device_used)
        monkeypatch.setattr(cuda, "mem_get_info", self.mem_get_info)
        monkeypatch.setattr(cuda, "memory_reserved", lambda device=None: self.reserved)
        monkeypatch.setattr(
            cuda,
            "get_device_properties",
            lambda device=None: SimpleNamespace(
                name=H100_NAME, total_memory=H100_TOTAL, uuid="5f1b-h100"
            ),
        )
        monkeypatch.setattr(
            cuda,
            "set_per_process_memory_fraction",
            lambda fraction, device=None: self.fractions.append(fraction),
        )

    def device_used(self, device: Any = None) -> int:
        own = self.context + self.reserved if self.initialised else 0
        return self.neighbours + own

    def mem_get_info(self, device: Any = None) -> tuple[int, int]:
        self.initialised = True
        return H100_TOTAL - self.device_used(), H100_TOTAL


def fake_nvml(processes: list[tuple[int, int | None]]) -> SimpleNamespace:
    """An ``nvidia-ml-py`` whose one GPU runs ``processes`` (pid, bytes)."""
    running = [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in processes]
    return SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetHandleByUUID=lambda uuid: uuid,
        nvmlDeviceGetComputeRunningProcesses=lambda handle: running,
    )


def test_the_cap_leaves_out_the_allowance_when_less_is_measured_around_init(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """NVML lists no pid (a container's pid namespace): the device-wide count before and
    after this process's CUDA initialisation (a neighbour's 20 GiB not counted) gives 500
    MiB, less than the 750.8 MiB the context grows to once kernels load: the allowance is
    left out."""
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml([(1, 20 * GiB)]))
    cuda = FakeCuda(neighbours=20 * GiB, context=500 * MiB)
    cuda.install(monkeypatch)
    with caplog.at_level(logging.INFO, logger="danlu.train"):
        cap = apply_memory_limit(8 * GiB, CUDA0)
    assert cuda.fractions == [pytest.approx((8 * GiB - H100_CONTEXT) / H100_TOTAL, rel=1e-12)]
    assert cap is not None and cap.outside_bytes == H100_CONTEXT
    line = caplog.records[-1].getMessage()
    assert "DANLU_GPU_MEMORY_LIMIT 8.0GiB less 750.8MiB" in line, line
    assert "500.0MiB measured by NVML's device-wide count" in line, line
    assert "GPU type h100" in line and f"leaves the allocator {7.27:.2f}GiB" in line, line


def test_a_process_holding_more_than_the_allowance_has_all_of_it_left_out(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """CUDA initialised before ``init`` (the script moved tensors to the GPU): NVML's count
    for this pid (1 GiB, 64 MiB of it the allocator's) gives 960 MiB outside the allocator,
    more than the allowance; a neighbour's 20 GiB is not counted."""
    me = os.getpid()
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml([(me + 1, 20 * GiB), (me, GiB)]))
    cuda = FakeCuda(neighbours=0, context=0, reserved=64 * MiB)
    cuda.install(monkeypatch, initialised=True)
    with caplog.at_level(logging.INFO, logger="danlu.train"):
        cap = apply_memory_limit(8 * GiB, CUDA0)
    assert cuda.fractions == [pytest.approx((8 * GiB - 960 * MiB) / H100_TOTAL, rel=1e-12)]
    assert cap is not None and cap.outside_bytes == 960 * MiB
    assert cap.allocator_bytes == 8 * GiB - 960 * MiB
    assert "960.0MiB measured by NVML's count for this process" in caplog.text


def test_without_nvml_the_allowance_is_left_out_and_the_log_says_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # nvidia-ml-py not installed
    cuda = FakeCuda(neighbours=0, context=500 * MiB)
    cuda.install(monkeypatch)

    def no_nvml(device: Any = None) -> int:
        raise ModuleNotFoundError("nvidia-ml-py does not seem to be installed")

    monkeypatch.setattr(torch.cuda, "device_memory_used", no_nvml)
    with caplog.at_level(logging.INFO, logger="danlu.train"):
        cap = apply_memory_limit(2 * GiB, CUDA0)
    assert cuda.fractions == [pytest.approx((2 * GiB - H100_CONTEXT) / H100_TOTAL, rel=1e-12)]
    assert cap is not None and cap.allocator_bytes == 2 * GiB - H100_CONTEXT
    assert "not measured: NVML (nvidia-ml-py) gave no count" in caplog.text


def test_a_limit_the_context_fills_is_refused_before_any_cap_is_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    cuda = FakeCuda(neighbours=0, context=600 * MiB)
    cuda.install(monkeypatch)
    with pytest.raises(ContextOutOfMemoryError, match=r"resources\.gpu_memory, is 700\.0MiB"):
        apply_memory_limit(700 * MiB, CUDA0)
    assert cuda.fractions == []


def test_no_limit_or_no_gpu_sets_no_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    cuda = FakeCuda(neighbours=0, context=600 * MiB)
    cuda.install(monkeypatch)
    assert apply_memory_limit(None, CUDA0) is None
    assert apply_memory_limit(8 * GiB, torch.device("cpu")) is None
    assert cuda.fractions == [] and not cuda.initialised
