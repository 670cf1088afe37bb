"""A sweep's stored spec is read back as it was accepted, without the checks added since.

Until 2026-12-01 a sweep could search a range such as ``-1e308..1e308``; a check added then
refuses one whose width is not a finite number. Read back with that check, such a stored
sweep made ``GET /sweeps/{id}`` a 500, and ``GET /sweeps`` too (so the dashboard's sweep
table), for every user who could see it. Now the stored spec is read as it was stored (as a
job's stored spec is, ``parse_spec(stored=True)``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from helpers import Live, live_server
from sqlalchemy import select

from danlu.server.db import Sweep, User
from danlu.server.services.sweeps import spec_of

WIDE = {
    "name": "wide",
    "trial": {"command": ["python", "train.py"], "resources": {"gpus": 1}},
    "parameters": {
        "lr": {"values": None, "distribution": "uniform", "low": -1e308, "high": 1e308},
        "opt": {"values": ["sgd", "adam"], "distribution": None, "low": None, "high": None},
    },
    "metric": {"name": "loss", "goal": "maximize"},
    "method": "random",
    "trials": 4,
    "parallel": 2,
    "seed": 7,
    "early_stopping": {"rule": "median", "min_steps": 10, "min_trials": 2},
}
"""A sweep spec as a danlu of revision 0022 accepted and stored it (its ``model_dump``)."""


def _stored(spec: dict[str, Any]) -> Sweep:
    return Sweep(
        id="feedfeedfeed",
        name=spec["name"],
        user_id=1,
        spec=spec,
        state="DONE",
        submitted=0,
        reason="",
        created_at=1.0,
        finished_at=2.0,
    )


def test_the_spec_is_read_as_it_was_stored() -> None:
    spec = spec_of(_stored(WIDE))
    assert spec.name == "wide" and spec.method == "random"
    assert (spec.parameters["lr"].low, spec.parameters["lr"].high) == (-1e308, 1e308)
    assert spec.parameters["opt"].values == ["sgd", "adam"]
    assert spec.metric is not None and (spec.metric.name, spec.metric.goal) == ("loss", "maximize")
    assert spec.metric.sign == -1.0
    assert spec.early_stopping is not None and spec.early_stopping.min_trials == 2
    assert (spec.trials, spec.parallel, spec.seed, spec.array) == (4, 2, 7, False)
    assert spec.total == 4
    assert spec.trial == WIDE["trial"]


def test_a_spec_valid_now_is_still_validated() -> None:
    """The stored form of a valid spec reads as ``SweepSpec.model_validate`` reads it: the
    lenient reading is for what a later check refuses only."""
    valid = {**WIDE, "parameters": {"lr": {"distribution": "uniform", "low": 0, "high": 1}}}
    spec = spec_of(_stored(valid))
    assert spec.parameters["lr"].float_bounds() == (0.0, 1.0)


@pytest.fixture
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    with live_server(tmp_path_factory.mktemp("stored-sweep"), start_loops=False) as server:
        yield server


def test_a_sweep_stored_before_a_check_is_served(live: Live) -> None:
    assert live.prepared is not None
    db = live.prepared.app.state.danlu.db
    with db.session() as s:
        admin = s.scalars(select(User).where(User.name == "admin")).one()
        sweep = _stored(WIDE)
        sweep.user_id = admin.id
        s.add(sweep)
    with live.client() as client:
        one = client.get("/sweeps/feedfeedfeed")
        assert one.status_code == 200, one.text
        body = one.json()
        assert (body["metric"], body["goal"], body["total"], body["trials"]) == (
            "loss",
            "maximize",
            4,
            [],
        )
        assert body["spec"] == WIDE
        listed = client.get("/sweeps")
        assert listed.status_code == 200, listed.text
        assert [s["id"] for s in listed.json()] == ["feedfeedfeed"]
