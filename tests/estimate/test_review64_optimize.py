"""The optimisers of ``danlu.estimate.optimize`` (and ``optimize_goodput``, which
shares their memory cap) refuse a bad count or byte limit with a :class:`SpecError` naming
the argument, before any work: never a NumPy error, a silent batch of 1 or an overflow.

Counts and caps must be whole numbers >= 1 (:func:`check_positive_int`); byte amounts
finite numbers (a limit > 0, a margin >= 0); the spare share a fraction in [0, 1)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from danlu.core.errors import SpecError
from danlu.estimate.goodput import GoodputModel, GradientStats, optimize_goodput
from danlu.estimate.optimize import (
    best_batch,
    cost_optimal_gpu_count,
    fastest_batch,
    largest_batch,
    largest_safe_batch,
    memory_capped_batch,
)
from danlu.estimate.throughput import ThroughputModel, ThroughputParams

GiB = 1 << 30
NAN: Any = math.nan  # typed Any: the signatures say int, which is the misuse under test
INF: Any = math.inf
TPUT = ThroughputModel(ThroughputParams(0.02, 0.001, 0.12, 0.004, 0.03, 0.002, 2.5))
GOODPUT = GoodputModel(TPUT, GradientStats(1.0, 4.0), 32)


@dataclass(frozen=True)
class LinearMemory:
    """M(b) = c0 + a * b."""

    c0: int = GiB
    a: int = GiB // 8

    def predict(self, batch_size: int) -> int:
        return self.c0 + self.a * batch_size

    def max_batch(self, limit_bytes: int, margin_bytes: int = 0) -> int | None:
        budget = limit_bytes - margin_bytes
        if self.predict(1) > budget:
            return None
        return int((budget - self.c0) // self.a)


MEMORY = LinearMemory()


def field_of(call: Callable[[], Any]) -> str:
    with pytest.raises(SpecError) as info:
        call()
    return info.value.field


BAD_COUNTS = [NAN, INF, 2.5, 0, -3, True, "8", None]
BAD_LIMITS = [NAN, INF, -INF, 0, -1.0, True, "80GiB"]
BAD_MARGINS = [NAN, INF, -1, True, "1"]


@pytest.mark.parametrize("bad", BAD_COUNTS, ids=repr)
def test_fastest_batch_refuses_a_bad_max_local_bsz(bad: Any) -> None:
    # nan failed inside numpy ("arange: cannot compute length") before the check
    assert field_of(lambda: fastest_batch(TPUT, 1, 1, bad)) == "max_local_bsz"


@pytest.mark.parametrize("bad", BAD_LIMITS, ids=repr)
def test_largest_batch_refuses_a_bad_limit(bad: Any) -> None:
    # nan passed the `<= 0` check and came back as a batch of 1
    assert field_of(lambda: largest_batch(MEMORY, bad)) == "limit_bytes"
    assert field_of(lambda: largest_safe_batch(MEMORY, bad)) == "limit_bytes"
    assert field_of(lambda: memory_capped_batch(8, MEMORY, bad)) == "limit_bytes"


@pytest.mark.parametrize("bad", BAD_MARGINS, ids=repr)
def test_largest_batch_refuses_a_bad_margin(bad: Any) -> None:
    assert field_of(lambda: largest_batch(MEMORY, 80 * GiB, bad)) == "margin_bytes"


@pytest.mark.parametrize("bad", [NAN, INF, -0.1, 1.0, 2, True, "0.05"], ids=repr)
def test_largest_safe_batch_refuses_a_bad_spare_share(bad: Any) -> None:
    # nan failed with "cannot convert float NaN to integer"
    assert field_of(lambda: largest_safe_batch(MEMORY, 80 * GiB, spare=bad)) == "spare"


@pytest.mark.parametrize("bad", BAD_LIMITS, ids=repr)
def test_the_batch_optimisers_refuse_a_bad_limit_with_a_memory_model(bad: Any) -> None:
    kw: dict[str, Any] = {"memory": MEMORY, "limit_bytes": bad}
    assert field_of(lambda: best_batch(float, 64, **kw)) == "limit_bytes"
    assert field_of(lambda: fastest_batch(TPUT, 1, 1, 64, **kw)) == "limit_bytes"
    # optimize_goodput reaches the same memory cap
    assert (
        field_of(
            lambda: optimize_goodput(GOODPUT, 1, 1, max_batch_size=256, max_local_bsz=64, **kw)
        )
        == "limit_bytes"
    )


@pytest.mark.parametrize("bad", BAD_COUNTS, ids=repr)
def test_memory_capped_batch_refuses_a_bad_cap_without_a_memory_model(bad: Any) -> None:
    assert field_of(lambda: memory_capped_batch(bad, None, None)) == "max_local_bsz"


@pytest.mark.parametrize("bad", [NAN, -INF, "soon"], ids=repr)
def test_cost_optimal_gpu_count_refuses_a_deadline_that_is_not_a_number(bad: Any) -> None:
    # nan compared false with every time: each candidate met it
    call = lambda: cost_optimal_gpu_count([1, 2], lambda k: 10.0 / k, float, deadline_s=bad)  # noqa: E731
    assert field_of(call) == "deadline_s"


def test_good_values_are_still_accepted() -> None:
    # whole byte counts as NumPy integers or floats, a cap as a NumPy integer (typed Any:
    # the signatures say int)
    cap = 16
    np_limit: Any = np.int64(5 * GiB)
    float_limit: Any = 5.0 * GiB
    float_margin: Any = 0.0
    np_cap: Any = np.int64(cap)
    assert largest_batch(MEMORY, np_limit) == 32
    assert largest_batch(MEMORY, float_limit, float_margin) == 32
    assert largest_safe_batch(MEMORY, 5 * GiB, spare=0.0) == 32
    assert fastest_batch(TPUT, 1, 1, np_cap) == cap
    assert fastest_batch(TPUT, 1, 1, 64, memory=MEMORY, limit_bytes=3 * GiB) == 16
    assert memory_capped_batch(cap, None, None) == cap
    # an infinite deadline is no deadline (equal costs: the faster choice)
    choice = cost_optimal_gpu_count([1, 2], lambda k: 10.0 / k, float, deadline_s=math.inf)
    assert choice.num_gpus == 2
