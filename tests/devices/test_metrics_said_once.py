"""The metrics of a GPU NVML cannot read (a fake NVML module): a lost GPU stays lost until
it is reset, and its warning was logged at every scrape (every few seconds, for good); it
is logged once now, its return is said, and a later loss is warned again."""

from __future__ import annotations

import logging

import pytest
from test_devices import _gpu, _Lost, fake_nvml

from danlu.devices import discover, sample_metrics

GiB = 1024**3
H100 = "NVIDIA H100 80GB HBM3"
METRICS_LOG = "danlu.devices.metrics"


def _said(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == METRICS_LOG and r.levelno == level]


def test_a_lost_gpu_is_warned_of_once_while_it_stays_lost(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gpus = [_gpu(i, H100, 80 * GiB) for i in range(2)]
    nvml = fake_nvml(gpus)
    inventory = discover(nvml, hostname="box")
    read_memory = nvml.nvmlDeviceGetMemoryInfo
    lost: set[str] = set()

    def memory(h: dict[str, object]) -> object:
        if h["uuid"] in lost:
            raise _Lost
        return read_memory(h)

    nvml.nvmlDeviceGetMemoryInfo = memory
    caplog.set_level(logging.INFO, logger=METRICS_LOG)

    def scrape() -> set[str]:
        return {s.labels["UUID"] for s in sample_metrics(inventory, nvml=nvml)}

    lost.add("GPU-1")
    for _ in range(3):
        assert scrape() == {"GPU-0"}  # the other GPU is sampled at every scrape
    warned = _said(caplog, logging.WARNING)
    assert len(warned) == 1 and "GPU 1 of box cannot be read (GPU is lost)" in warned[0]
    lost.clear()  # reset and back
    assert scrape() == {"GPU-0", "GPU-1"}
    assert scrape() == {"GPU-0", "GPU-1"}
    assert _said(caplog, logging.INFO) == ["metrics: GPU 1 of box is read again"]
    lost.add("GPU-1")  # lost again: warned again
    scrape()
    assert len(_said(caplog, logging.WARNING)) == 2
