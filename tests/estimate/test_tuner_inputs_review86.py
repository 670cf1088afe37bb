"""SelfTuner review 86: what was a bare Python error, or read as something else.

- A placement that is no placement: ``(nan,)`` and ``(2.5,)`` were keys a choice was made
  for (``2.5`` GPUs picked a batch of 42), ``(0,)`` and ``()`` divided by zero, ``[2]`` was
  unhashable, ``("2",)`` a TypeError: a SpecError naming ``placement`` in ``measure``,
  ``choose`` and ``sync_time``.
- Statistics that are no pair (None, ``(1.0,)``, 5: TypeError, IndexError): a SpecError
  naming ``stats``. A pair holding what is no number is still ignored, as before.
- A damaged ``load_state_dict`` input (not a mapping, an entry that is no pair, a
  micro-batch or GPU count that is no whole number from 1, a timing or statistic that is no
  number): a DataError naming the entry (``compute[0]``), and nothing is loaded. It was a
  bare KeyError, TypeError, ValueError, IndexError or OverflowError, or was read as something
  else (``2.5`` GPUs as 2, a micro-batch of 0 or -3); the compute times were set before the
  sync times raised.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import pytest

from danlu.core.errors import DataError, SpecError
from danlu.estimate.adapt import BatchLimits, SelfTuner

LIMITS = BatchLimits(32, 1024, 1, 64)
BAD_PLACEMENTS = [(math.nan,), (2.5,), ("2",), (0,), (-1,), (), (True,), [2], 2, None, (2**70,)]


def _measured() -> SelfTuner:
    tuner = SelfTuner(LIMITS)
    tuner.measure((2,), 16, 0.2, 0.05, (1.0, 4.0))
    tuner.measure((2,), 32, 0.3, 0.05, (1.0, 4.0))
    tuner.measure((1, 1), 16, 0.25, 0.1, (1.0, 4.0))
    return tuner


@pytest.mark.parametrize("placement", BAD_PLACEMENTS, ids=repr)
def test_a_placement_that_is_no_placement_is_named(placement: Any) -> None:
    tuner = _measured()
    before = tuner.state_dict()
    for call in (
        lambda: tuner.measure(placement, 16, 0.2, 0.05, (1.0, 4.0)),
        lambda: tuner.choose(placement),
        lambda: tuner.sync_time(placement),
    ):
        with pytest.raises(SpecError) as caught:
            call()
        assert caught.value.field == "placement"
    assert tuner.state_dict() == before  # nothing was recorded


def test_placements_of_whole_numbers_are_read_as_before() -> None:
    tuner = _measured()
    assert tuner.choose((2,)) is not None
    assert tuner.choose((np.int64(2),)) == tuner.choose((2,))  # a NumPy count is a count
    assert tuner.sync_time((1, 1)) == 0.1 and tuner.sync_time((4,)) is None


@pytest.mark.parametrize("stats", [None, (1.0,), (1.0, 2.0, 3.0), 5, "ab", {0: 1.0, 1: 2.0}])
def test_statistics_that_are_no_pair_are_named(stats: Any) -> None:
    tuner = SelfTuner(LIMITS)
    with pytest.raises(SpecError) as caught:
        tuner.measure((2,), 16, 0.2, 0.05, stats)
    assert caught.value.field == "stats"
    assert tuner.state_dict() == {"compute": [], "sync": [], "stats": None}


@pytest.mark.parametrize("stats", [[1.0, 4.0], np.array([1.0, 4.0])])
def test_a_pair_as_a_list_or_array_is_a_pair(stats: Any) -> None:
    tuner = SelfTuner(LIMITS)
    tuner.measure((2,), 16, 0.2, 0.05, stats)
    assert tuner.state_dict()["stats"] == [1.0, 4.0]


def test_limits_that_are_no_batch_limits_are_named() -> None:
    with pytest.raises(SpecError) as caught:
        SelfTuner(None)  # type: ignore[arg-type]
    assert caught.value.field == "limits"


DAMAGED: list[tuple[Any, str]] = [
    (None, "the tuner state must be a mapping"),
    ([], "the tuner state must be a mapping"),
    ({"compute": None}, "the tuner state's compute must be a list of pairs"),
    ({"compute": 5}, "the tuner state's compute must be a list of pairs"),
    ({"compute": [[16]]}, "the tuner state's compute[0] must be a pair"),
    ({"compute": [[16, 0.1], "x"]}, "the tuner state's compute[1] must be a pair"),
    ({"compute": [["x", 0.1]]}, "compute[0]: the micro-batch must be a whole number"),
    ({"compute": [[0, 0.1]]}, "compute[0]: the micro-batch must be a whole number"),
    ({"compute": [[-3, 0.1]]}, "compute[0]: the micro-batch must be a whole number"),
    ({"compute": [[16.7, 0.1]]}, "compute[0]: the micro-batch must be a whole number"),
    ({"compute": [[True, 0.1]]}, "compute[0]: the micro-batch must be a whole number"),
    ({"compute": [[10**400, 0.1]]}, "compute[0]: the micro-batch must be a whole number"),
    ({"compute": [[16, None]]}, "compute[0]: the seconds must be a number"),
    ({"compute": [[16, "0.1"]]}, "compute[0]: the seconds must be a number"),
    ({"sync": [[2, 0.1]]}, "sync[0]: the placement must be a non-empty list"),
    ({"sync": [[[], 0.1]]}, "sync[0]: the placement must be a non-empty list"),
    ({"sync": [[[2.5], 0.1]]}, "sync[0]: the placement must be a non-empty list"),
    ({"sync": [[["x"], 0.1]]}, "sync[0]: the placement must be a non-empty list"),
    ({"sync": [[[math.nan], 0.1]]}, "sync[0]: the placement must be a non-empty list"),
    ({"sync": [[[2], "fast"]]}, "sync[0]: the seconds must be a number"),
    ({"stats": [1.0]}, "the tuner state's stats must be null or a pair of numbers"),
    ({"stats": "ab"}, "the tuner state's stats must be null or a pair of numbers"),
    ({"stats": 5}, "the tuner state's stats must be null or a pair of numbers"),
    ({"stats": [None, None]}, "the tuner state's stats must be null or a pair of numbers"),
]


@pytest.mark.parametrize(("state", "named"), DAMAGED, ids=[repr(s)[:40] for s, _ in DAMAGED])
def test_a_damaged_state_is_a_data_error_naming_the_entry_and_loads_nothing(
    state: Any, named: str
) -> None:
    tuner = _measured()
    before = copy.deepcopy(tuner.state_dict())
    choice = tuner.choose((2,))
    # the compute times differ from the live ones: a half load would show
    damaged = {"compute": [[8, 9.0]], **state} if isinstance(state, dict) else state
    with pytest.raises(DataError) as caught:
        tuner.load_state_dict(damaged)
    assert named in str(caught.value)
    assert isinstance(caught.value, ValueError)  # what a checkpoint's refusal catches
    assert tuner.state_dict() == before and tuner.choose((2,)) == choice


def test_a_state_as_state_dict_writes_it_loads_as_before() -> None:
    tuner = _measured()
    restored = SelfTuner(LIMITS)
    restored.load_state_dict(tuner.state_dict())
    assert restored.state_dict() == tuner.state_dict()
    assert restored.choose((2,)) == tuner.choose((2,)) and restored.choose((1, 1)) is not None


@pytest.mark.parametrize(
    "state",
    [
        {"compute": [[16, math.nan], [32, 0.2]], "sync": [[[2], -1.0]], "stats": [1.0, 2.0]},
        {"compute": [[16, 10**400], [32, 0.2]], "sync": [], "stats": [10**400, 2.0]},
        {},
        {"stats": []},
    ],
)
def test_timings_and_statistics_measure_would_ignore_are_still_left_out(
    state: dict[str, Any],
) -> None:
    tuner = SelfTuner(LIMITS)
    tuner.load_state_dict(state)
    loaded = tuner.state_dict()
    assert [atomic for atomic, _ in loaded["compute"]] == [32] * bool(state.get("compute"))
    assert loaded["sync"] == []
    assert loaded["stats"] == ([1.0, 2.0] if state.get("stats") == [1.0, 2.0] else None)
