"""The NVML energy meter given a counter reading of NVML's all-ones "not available"
(``2**64 - 1`` mJ) or another huge glitch (a fake NVML module): the GPU's total never falls,
and the energy of the intervals around the glitch is still charged where the counter says
what it was."""

from __future__ import annotations

import pytest
from test_energy_odd_values import _meter


def test_an_all_ones_counter_reading_counts_as_a_failed_one() -> None:
    """The all-ones reading was taken as a glitch to go on from, and the next true reading,
    far below it, as a driver reload: the counter's whole value (3 kJ) was charged instead
    of its 2 kJ rise."""
    meter, gpu, key = _meter(1_000_000, 300_000)
    try:
        assert meter.read(0.0, {}) == {key: 0.0}
        gpu["energy"] = 2**64 - 1
        assert meter.read(10.0, {})[key] == 0.0
        gpu["energy"] = 3_000_000  # 2 kJ more than at the first reading
        assert meter.read(20.0, {})[key] == pytest.approx(2000.0)
        gpu["energy"] = 3_500_000
        assert meter.read(30.0, {})[key] == pytest.approx(2500.0)
    finally:
        meter.close()


@pytest.mark.parametrize("glitch", [2**64 - 1, 2**62 + 12_345, 2**60 + 1])
def test_a_huge_glitch_reading_never_makes_the_total_fall(glitch: int) -> None:
    """The total was worked out as the counter less its first value, which at 2**62 mJ
    rounds to whole joules and more: 1234.567 J read back as 1234 J (a total that fell)."""
    meter, gpu, key = _meter(1_000_000, 300_000)
    try:
        meter.read(0.0, {})
        gpu["energy"] = 1_000_000 + 1_234_567
        before = meter.read(10.0, {})[key]
        assert before == pytest.approx(1234.567)
        gpu["energy"] = glitch
        assert meter.read(11.0, {})[key] >= before
        gpu["energy"] = glitch + 1_000  # 1 J on from the glitch's value
        assert meter.read(12.0, {})[key] >= before
    finally:
        meter.close()
