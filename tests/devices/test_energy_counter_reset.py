"""The NVML energy meter when the driver reloads between two readings (a fake NVML module):
the GPU's counter starts again from 0, and what it reads then is the energy used since the
reload, charged to the interval; the interval counted nothing before, as for a glitch."""

from __future__ import annotations

import pytest
from test_energy_odd_values import _meter


def test_a_counter_started_again_by_a_driver_reload_counts_what_it_reads() -> None:
    meter, gpu, key = _meter(5_000_000, 300_000)
    try:
        assert meter.read(0.0, {}) == {key: 0.0}
        gpu["energy"] = 6_000_000  # 100 W for 10 s
        assert meter.read(10.0, {})[key] == pytest.approx(1000.0)
        gpu["energy"] = 2_000_000  # the driver reloaded: 2 kJ since, within 10 s at 200 W
        assert meter.read(20.0, {})[key] == pytest.approx(3000.0)
        gpu["energy"] = 5_000_000  # and on from there: 300 W for 10 s
        assert meter.read(30.0, {})[key] == pytest.approx(6000.0)
    finally:
        meter.close()


def test_a_fall_to_more_than_the_interval_could_hold_is_still_a_glitch() -> None:
    """A counter reading lower, yet above what any GPU uses since a reload within the
    interval (5 kW for 10 s: 50 kJ), is no restart from 0: the interval counts nothing."""
    meter, gpu, key = _meter(500_000_000, 300_000)
    try:
        assert meter.read(0.0, {}) == {key: 0.0}
        gpu["energy"] = 501_000_000
        assert meter.read(10.0, {})[key] == pytest.approx(1000.0)
        gpu["energy"] = 400_000_000  # 400 kJ: no reload within 10 s gives that
        assert meter.read(20.0, {})[key] == pytest.approx(1000.0)
        gpu["energy"] = 401_000_000  # and on from there
        assert meter.read(30.0, {})[key] == pytest.approx(2000.0)
    finally:
        meter.close()
