"""A sweep spec's integers kept exact, and its seed's range.

1. An ``int`` distribution's ``low`` and ``high`` went through float: 2**53 + 1 became 2**53,
   so ``low: 9007199254740993, high: 9007199254740992`` (low above high) was accepted, and
   the draws fell outside the range given. The bounds stay integers (a stored spec's
   ``5.0`` still loads, as 5); the float distributions keep floats.
2. ``seed`` was accepted up to 2**63 - 1 locally, while the server refused one beyond 2**62
   saying ``must be between -2**62 and 2**62`` (a negative seed is no seed either): both now
   say the real range, 0..2**62.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from danlu.core.errors import SpecError
from danlu.core.sweep import SWEEP_LIMITS, SweepSpec, parse_sweep
from danlu.core.values import MAX_INT, check_values

BASE: dict[str, Any] = {
    "name": "p",
    "trial": {"command": ["true"], "resources": {"gpus": 1}},
    "trials": 3,
}


def _int_sweep(low: Any, high: Any) -> dict[str, Any]:
    return {**BASE, "parameters": {"n": {"distribution": "int", "low": low, "high": high}}}


def _submit(body: dict[str, Any]) -> SweepSpec:
    """What ``POST /sweeps`` checks, in its order (``danlu.server.routes.sweeps``)."""
    check_values(body, limits=SWEEP_LIMITS)
    return parse_sweep(body)


# 1. int bounds kept exact


@pytest.mark.parametrize(
    ("low", "high", "shown"),
    [
        (2**53 + 1, 2**53, "low (9,007,199,254,740,993) is above high (9,007,199,254,740,992)"),
        (2**62, 2**62 - 1, "low (4,611,686,018,427,387,904) is above high"),
        (-(2**62) + 1, -(2**62), "low (-4,611,686,018,427,387,903) is above high"),
    ],
    ids=["2**53+1>2**53", "2**62>2**62-1", "-2**62+1>-2**62"],
)
def test_a_reversed_int_range_beyond_the_floats_is_refused(low: int, high: int, shown: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_sweep(_int_sweep(low, high))
    assert caught.value.field == "parameters.n"
    assert shown in caught.value.message


@pytest.mark.parametrize(
    ("low", "high"),
    [(2**53 + 1, 2**53 + 1), (2**53 + 1, 2**62), (-(2**62), -(2**53) - 1), (-3, 7)],
    ids=["point-2**53+1", "2**53+1..2**62", "-2**62..-2**53-1", "small"],
)
def test_int_bounds_stay_exact_through_parsing_and_storage(low: int, high: int) -> None:
    spec = _submit(_int_sweep(low, high))
    param = spec.parameters["n"]
    assert (param.low, param.high) == (low, high)
    assert type(param.low) is int and type(param.high) is int
    stored = json.loads(json.dumps(spec.model_dump(mode="json")))  # the sweeps.spec column
    assert stored["parameters"]["n"]["low"] == low and stored["parameters"]["n"]["high"] == high
    again = SweepSpec.model_validate(stored).parameters["n"]
    assert (again.low, again.high) == (low, high)
    assert again.int_bounds() == (low, high)


def test_a_stored_int_distribution_with_float_bounds_still_loads_as_integers() -> None:
    """Specs stored before the fix hold ``low: 2.0``: they load, as the integers 2 and 5."""
    stored = _int_sweep(2.0, 5.0)
    param = SweepSpec.model_validate(stored).parameters["n"]
    assert (param.low, param.high) == (2, 5)
    assert type(param.low) is int and type(param.high) is int
    assert param.int_bounds() == (2, 5)


@pytest.mark.parametrize("kind", ["uniform", "log_uniform"])
def test_float_distributions_keep_float_bounds(kind: str) -> None:
    spec = parse_sweep(
        {**BASE, "parameters": {"x": {"distribution": kind, "low": 1, "high": 2**53 + 1}}}
    )
    param = spec.parameters["x"]
    assert type(param.low) is float and type(param.high) is float
    assert param.float_bounds() == (1.0, float(2**53))
    assert spec.model_dump(mode="json")["parameters"]["x"]["low"] == 1.0


@pytest.mark.parametrize(
    ("parameter", "field", "hint"),
    [
        ({"distribution": "int", "low": 0.5, "high": 2}, "parameters.n", "whole numbers"),
        ({"distribution": "int", "low": 0, "high": 10**400}, "parameters.n", "2**62"),
        ({"distribution": "int", "low": 1e300, "high": 1e300}, "parameters.n", "2**62"),
        ({"distribution": "uniform", "low": 0, "high": 10**400}, "parameters.n.high", "finite"),
    ],
    ids=["int-fraction", "int-huge-int", "int-huge-float", "uniform-huge-int"],
)
def test_bounds_no_number_type_holds_are_refused_naming_the_field(
    parameter: dict[str, Any], field: str, hint: str
) -> None:
    with pytest.raises(SpecError) as caught:
        parse_sweep({**BASE, "parameters": {"n": parameter}})
    assert caught.value.field == field
    assert hint in caught.value.message


def test_grid_values_beyond_the_floats_stay_exact() -> None:
    spec = parse_sweep(
        {**BASE, "method": "grid", "trials": 2, "parameters": {"n": {"values": [2**53 + 1, 2**62]}}}
    )
    assert spec.parameters["n"].values == [2**53 + 1, 2**62]


# 2. the seed's range, the same locally and on the server

SEED_RANGE = "must lie within 0..4,611,686,018,427,387,904"


@pytest.mark.parametrize(
    "seed",
    [2**62 + 1, 5 * 10**18, 2**63 - 1, 2**63, -1, -(2**63)],
    ids=["2**62+1", "5e18", "2**63-1", "2**63", "-1", "-2**63"],
)
def test_a_seed_out_of_range_gets_the_same_message_locally_and_on_the_server(
    seed: int,
) -> None:
    body = {**_int_sweep(0, 1), "seed": seed}
    with pytest.raises(SpecError) as local:
        parse_sweep(body)
    with pytest.raises(SpecError) as server:
        _submit(body)
    assert local.value.field == server.value.field == "seed"
    assert SEED_RANGE in local.value.message
    assert local.value.message == server.value.message


@pytest.mark.parametrize("seed", [0, 1, MAX_INT], ids=["0", "1", "2**62"])
def test_seeds_within_the_range_are_taken_by_both(seed: int) -> None:
    assert _submit({**_int_sweep(0, 1), "seed": seed}).seed == seed
    assert parse_sweep({**_int_sweep(0, 1), "seed": seed}).seed == seed
