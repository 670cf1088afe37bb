"""A grid sweep with more ``trials`` than its grid has combinations (``trials: 5`` over a
grid of 2) was accepted and quietly ran 2. A grid runs each combination once; ``trials``
with a grid only cuts it short (docs/sweeps.md: "grid: defaults to every combination"), so
more trials than combinations is refused on submission, naming ``trials`` and the grid's
size. A sweep stored with such a spec still loads as it was taken."""

from __future__ import annotations

from typing import Any

import pytest

from danlu.core.errors import SpecError
from danlu.core.sweep import SweepSpec, parse_sweep


def _grid(trials: int | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": "g",
        "trial": {"command": ["true"], "resources": {"gpus": 1}},
        "method": "grid",
        "parameters": {"lr": {"values": [0.1, 0.01]}},
    }
    if trials is not None:
        spec["trials"] = trials
    return spec


def test_more_trials_than_the_grid_has_combinations_is_refused() -> None:
    with pytest.raises(SpecError) as err:
        parse_sweep(_grid(5))
    assert err.value.field == "trials"
    assert "5" in err.value.message and "2 combinations" in err.value.message
    assert "leave trials out" in err.value.message


@pytest.mark.parametrize(("trials", "total"), [(None, 2), (2, 2), (1, 1)])
def test_trials_up_to_the_grid_still_pass(trials: int | None, total: int) -> None:
    assert parse_sweep(_grid(trials)).total == total


def test_a_stored_spec_with_more_trials_still_loads() -> None:
    """The server reads a stored sweep with ``SweepSpec.model_validate``: not refused."""
    assert SweepSpec.model_validate(_grid(5)).total == 2
