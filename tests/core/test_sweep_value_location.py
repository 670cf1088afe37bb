"""A NaN or an infinity in a sweep parameter's ``values`` list is reported at the item
(``parameters.lr.values.1``) by the local ``parse_sweep``, as the server's check of the
body reports it, not at the parameter."""

from __future__ import annotations

import math
from typing import Any

import pytest

from danlu.core.errors import SpecError
from danlu.core.sweep import SWEEP_LIMITS, parse_sweep
from danlu.core.values import check_values

BASE: dict[str, Any] = {
    "name": "p",
    "trial": {"command": ["true"], "resources": {"gpus": 1}},
    "metric": {"name": "loss"},
    "trials": 3,
}


@pytest.mark.parametrize("method", ["random", "grid", "tpe"])
@pytest.mark.parametrize(
    ("values", "index"),
    [
        ([0.1, math.nan], 1),
        ([math.inf], 0),
        (["adam", 2, -math.inf], 2),
        ([True, 0.5, math.nan, math.inf], 2),
    ],
)
def test_a_non_finite_value_is_named_by_its_index(
    method: str, values: list[Any], index: int
) -> None:
    body = {**BASE, "method": method, "parameters": {"lr": {"values": values}}}
    with pytest.raises(SpecError) as err:
        parse_sweep(body)
    assert err.value.field == f"parameters.lr.values.{index}"
    assert err.value.message.startswith("must be a finite number (got ")
    # where the server's check of the body puts it too
    with pytest.raises(SpecError) as server:
        check_values(body, limits=SWEEP_LIMITS)
    assert server.value.field == err.value.field


def test_finite_values_and_text_reading_as_nan_still_parse() -> None:
    spec = parse_sweep({**BASE, "parameters": {"opt": {"values": ["nan", "inf", 1, 0.5, True]}}})
    assert spec.parameters["opt"].values == ["nan", "inf", 1, 0.5, True]


def test_a_non_finite_bound_is_still_named_at_the_bound() -> None:
    with pytest.raises(SpecError) as err:
        parse_sweep(
            {**BASE, "parameters": {"lr": {"distribution": "uniform", "low": 0, "high": math.inf}}}
        )
    assert err.value.field == "parameters.lr.high"
