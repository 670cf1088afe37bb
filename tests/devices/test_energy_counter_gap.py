"""The NVML energy meter when a GPU's counter fails for some readings and then answers (a
fake NVML module): its rise spans all the time since it last answered, and is held to the
ceiling of that time; it was held to one interval's ceiling, so a few failed readings of a
busy GPU made its whole rise a "glitch", never charged."""

from __future__ import annotations

import pytest
from test_energy_odd_values import _meter


def test_a_counter_back_after_failed_readings_counts_its_whole_rise() -> None:
    meter, gpu, key = _meter(5_000_000, 300_000)
    try:
        assert meter.read(0.0, {}) == {key: 0.0}
        gpu["energy"] = 6_000_000  # 100 W for 10 s
        assert meter.read(10.0, {})[key] == pytest.approx(1000.0)
        gpu["energy"] = None  # "Not Supported" for a while: the total holds
        for t in range(20, 110, 10):
            assert meter.read(float(t), {})[key] == pytest.approx(1000.0)
        gpu["energy"] = 6_000_000 + 100 * 700_000  # 700 W for the 100 s since t=10
        assert meter.read(110.0, {})[key] == pytest.approx(71_000.0)
        gpu["energy"] = 6_000_000 + 100 * 700_000 + 2**60  # a glitch is still one
        assert meter.read(120.0, {})[key] == pytest.approx(71_000.0)
    finally:
        meter.close()
