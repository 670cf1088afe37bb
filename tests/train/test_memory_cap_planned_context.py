"""The memory cap leaves out the CUDA context the control plane planned the job with
(``DANLU_GPU_CONTEXT_BYTES``), not the built-in GPU table's figure for the type the device's
name reads as: the two differ where the node's GPU type is the operator's (a Slurm node of L40S
GPUs, a Gres type danlu does not know, listed as ``DANLU_SLURM_GPU_TYPE=L4``: 300 MiB planned,
768 MiB from the device's name ``NVIDIA L40S``). ``torch.cuda`` and NVML replaced as in
``test_memory_cap.py``."""

from __future__ import annotations

import logging
import sys
from types import SimpleNamespace

import pytest
import torch
from test_memory_cap import CUDA0, H100_CONTEXT, H100_TOTAL, FakeCuda

from danlu.core.cluster import gpu_type
from danlu.estimate.memory.gpus import gpu_for_memory
from danlu.train.memory_cap import MemoryCap, apply_memory_limit, context_allowance

MiB = 1024**2
GiB = 1024**3
L4 = gpu_type("L4")
PLANNED = gpu_for_memory(L4.name, L4.memory).context_bytes
"""What the control plane's estimate allows for a node listed as an L4 (300 MiB)."""


def _on_an_l40s(monkeypatch: pytest.MonkeyPatch, context: int) -> FakeCuda:
    """``torch.cuda`` on a GPU named ``NVIDIA L40S``, NVML listing no pid, whose context
    grows by ``context`` over this process's CUDA initialisation."""
    monkeypatch.setitem(sys.modules, "pynvml", None)
    cuda = FakeCuda(neighbours=0, context=context)
    cuda.install(monkeypatch)
    monkeypatch.setattr(
        torch.cuda,
        "get_device_properties",
        lambda device=None: SimpleNamespace(name="NVIDIA L40S", total_memory=H100_TOTAL),
    )
    return cuda


def build_cap(limit: int, context: int) -> MemoryCap:
    """The cap :func:`apply_memory_limit` sets on ``cuda:0`` with ``context`` planned."""
    cap = apply_memory_limit(limit, CUDA0, context)
    assert cap is not None
    return cap


def test_an_auto_charge_on_an_operators_gpu_type_leaves_the_allocator_its_peak(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``gpu_memory: auto`` charged the reserved peak plus the 300 MiB planned: the allocator
    gets that peak (the table's 768 MiB for the device's name left it 468 MiB short)."""
    table, _ = context_allowance("NVIDIA L40S", H100_TOTAL)
    assert (PLANNED, table) == (300 * MiB, 768 * MiB)
    cuda = _on_an_l40s(monkeypatch, context=250 * MiB)
    peak = 5 * GiB
    with caplog.at_level(logging.INFO, logger="danlu.train"):
        cap = build_cap(peak + PLANNED, PLANNED)
    assert cap.outside_bytes == PLANNED and cap.allocator_bytes == peak
    assert cuda.fractions == [pytest.approx(peak / H100_TOTAL, rel=1e-12)]
    line = caplog.records[-1].getMessage()
    assert "300.0MiB allowed for this node's GPU type" in line, line
    assert "DANLU_GPU_CONTEXT_BYTES" in line and "NVIDIA L40S" in line, line


def test_more_measured_than_planned_is_still_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    _on_an_l40s(monkeypatch, context=400 * MiB)
    cap = build_cap(8 * GiB, PLANNED)
    assert cap.outside_bytes == 400 * MiB


def test_a_planned_allowance_above_the_tables_is_left_out_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On an H100 a plane that planned 900 MiB (more than the table's 750.8 MiB) has all of
    it left out: the job caps itself as tight as it was packed."""
    monkeypatch.setitem(sys.modules, "pynvml", None)
    FakeCuda(neighbours=0, context=500 * MiB).install(monkeypatch)
    cap = build_cap(8 * GiB, 900 * MiB)
    assert cap.outside_bytes == 900 * MiB > H100_CONTEXT
    assert cap.allocator_bytes == 8 * GiB - 900 * MiB
