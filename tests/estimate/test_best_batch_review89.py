"""review89: :func:`best_batch` scores every batch one by one, so a range wider than the
largest batch a spec takes (2**30) is refused before any score (a cap near 2**62 counted for
ever); ranges within it keep their answers."""

from __future__ import annotations

import pytest

from danlu.core.errors import SpecError
from danlu.core.spec import MAX_BATCH
from danlu.estimate.optimize import best_batch


class _Calls:
    """A score that counts its calls and refuses to be called too often."""

    def __init__(self, peak: int, most: int = 1000) -> None:
        self.peak, self.most, self.calls = peak, most, 0

    def __call__(self, b: int) -> float:
        self.calls += 1
        if self.calls > self.most:
            raise RuntimeError("scored too many batches")
        return -abs(b - self.peak)


@pytest.mark.parametrize("cap", [2**62, MAX_BATCH + 1, 2**62 - 1])
def test_a_range_beyond_the_largest_batch_is_refused_before_any_score(cap: int) -> None:
    score = _Calls(3)
    with pytest.raises(SpecError) as caught:
        best_batch(score, cap)
    assert caught.value.field == "max_local_bsz"
    assert "fastest_batch" in str(caught.value)
    assert score.calls == 0


def test_a_narrow_range_high_up_is_still_searched() -> None:
    score = _Calls(2**62 - 3)
    assert best_batch(score, 2**62, min_local_bsz=2**62 - 9) == 2**62 - 3
    assert score.calls == 10


def test_small_ranges_keep_their_answers() -> None:
    assert best_batch(lambda b: -((b - 20) ** 2), 64) == 20
    assert best_batch(lambda b: 1.0, 64, min_local_bsz=5) == 5  # ties: the smaller
    assert best_batch(lambda b: float(b), 1000) == 1000
