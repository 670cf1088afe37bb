"""``POST /sweeps``: the route checks the body's values
(:func:`~danlu.core.values.check_values`) before :func:`~danlu.core.sweep.parse_sweep`,
which checks them again only after pydantic has read the spec. That first check is not
redundant: pydantic's own errors would come first and say less (a NUL in ``name`` read as
"use 1-63 letters", a set as "Input should be a valid integer", 200,000 values as pydantic's
list size), and the value and depth limits guard pydantic from a body too large or too deep.
These pin the messages the route gives."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import Live, live_server

BASE: dict[str, Any] = {
    "name": "lr",
    "trial": {"command": ["python", "train.py"], "resources": {"gpus": 1}},
    "parameters": {"lr": {"values": [0.1, 0.01]}},
    "metric": {"name": "loss"},
    "method": "grid",
}
DEEP: Any = 1
for _ in range(40):
    DEEP = [DEEP]

BAD = {
    "nul-name": ({"name": "a\0b"}, "name", "must not contain NUL characters"),
    "surrogate-name": (
        {"name": "\ud800"},
        "name",
        "must be valid Unicode (no lone surrogate characters)",
    ),
    "deep": ({"parameters": {"lr": {"values": [DEEP]}}}, None, "nests deeper than 32 levels"),
    "many": (
        {"parameters": {"lr": {"values": list(range(200_000))}}},
        None,
        "the request holds more than 100,000 values",
    ),
    "huge-unknown": ({"bogus": 10**30}, "bogus", "must be between -2**62 and 2**62"),
}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    with live_server(tmp_path_factory.mktemp("sweep-body"), start_loops=False) as server:
        yield server


@pytest.mark.parametrize("case", list(BAD.values()), ids=list(BAD))
def test_the_body_values_are_checked_before_the_sweep_spec(
    live: Live, case: tuple[dict[str, Any], str | None, str]
) -> None:
    change, field, message = case
    with live.client() as c:
        body = json.dumps(BASE | change)  # ASCII: a lone surrogate as its JSON escape
        response = c.post("/sweeps", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["type"] == "SpecError"
    assert message in error["message"]
    if field is not None:
        assert error["field"] == field
