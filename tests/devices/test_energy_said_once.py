"""The NVML energy meter says once how it meters a GPU without an energy counter (a fake
NVML module): by its power draw, or, where the GPU reports no power either, as using
nothing. A GPU reporting neither was charged 0 J for good without a word."""

from __future__ import annotations

import logging

import pytest
from test_energy_odd_values import _meter

ENERGY_LOG = "danlu.devices.energy"


def _lines(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == ENERGY_LOG and r.levelno == level]


def test_a_gpu_with_neither_counter_nor_power_is_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    meter, gpu, key = _meter(None, None)
    caplog.set_level(logging.INFO, logger=ENERGY_LOG)
    try:
        for t in (0.0, 10.0, 20.0, 30.0):
            assert meter.read(t, {}) == {key: 0.0}
        warned = _lines(caplog, logging.WARNING)
        assert len(warned) == 1, warned
        assert "GPU 0 of box" in warned[0] and "counted as 0" in warned[0]
        gpu["power"] = 200_000  # its power answers now: metered by it, said once
        assert meter.read(40.0, {})[key] == pytest.approx(2000.0)
        assert meter.read(50.0, {})[key] == pytest.approx(4000.0)
        assert len(_lines(caplog, logging.WARNING)) == 1
        assert len(_lines(caplog, logging.INFO)) == 1
    finally:
        meter.close()


def test_a_gpu_metered_by_its_power_is_said_once(caplog: pytest.LogCaptureFixture) -> None:
    meter, _gpu, _key = _meter(None, 300_000)
    caplog.set_level(logging.INFO, logger=ENERGY_LOG)
    try:
        for t in (0.0, 10.0, 20.0):
            meter.read(t, {})
        said = _lines(caplog, logging.INFO)
        assert len(said) == 1 and "no energy counter" in said[0], said
        assert _lines(caplog, logging.WARNING) == []
    finally:
        meter.close()


def test_a_gpu_with_a_counter_says_nothing(caplog: pytest.LogCaptureFixture) -> None:
    meter, _gpu, _key = _meter(5_000_000, None)
    caplog.set_level(logging.INFO, logger=ENERGY_LOG)
    try:
        for t in (0.0, 10.0):
            meter.read(t, {})
        assert _lines(caplog, logging.INFO) == _lines(caplog, logging.WARNING) == []
    finally:
        meter.close()
