"""A stored sweep's later trials are read as the sweep was taken: a check added for new
specs since (here: a ``checkpoint_dir`` ``file://`` URL of a relative path, refused at
submission now) does not fail a sweep accepted before it, and still refuses a new one."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import user_and_nodes
from sqlalchemy import update

from danlu.core.cluster import Node, gpu_type
from danlu.core.errors import SpecError
from danlu.server.db import Database
from danlu.server.db.models import Sweep
from danlu.server.services import jobs, sweeps

NOW = 1_000_000.0
NODE = Node("a", 2, gpu_type("H100"))
REFUSED_NOW = "file://ckpt"
"""A ``checkpoint_dir`` an older version took, that a new spec's check refuses."""


def _sweep() -> dict[str, Any]:
    return {
        "name": "lr",
        "trial": {"command": ["python", "train.py"], "resources": {"gpus": 1}},
        "parameters": {"lr": {"values": [0.1, 0.01, 0.001]}},
        "metric": {"name": "loss"},
        "method": "grid",
        "parallel": 1,
    }


def test_a_stored_sweep_a_new_check_refuses_still_submits_its_later_trials(
    db: Database,
) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        sweep = sweeps.create(s, _sweep(), alice, now=NOW)
        sweep_id, first = sweep.id, [r.job_id for r in sweeps.results(s, sweep)]
        stored = dict(sweep.spec)
        # as an older version stored it, before the check
        trial = {**stored["trial"], "checkpoint_dir": REFUSED_NOW}
        s.execute(update(Sweep).where(Sweep.id == sweep_id).values(spec={**stored, "trial": trial}))
    assert len(first) == 1
    with db.session() as s:
        jobs.cancel_job(s, first[0], now=NOW + 1)
    with db.session() as s:
        stopped, submitted = sweeps.advance(s, sweep_id, now=NOW + 2)
    with db.read_session() as s:
        sweep = sweeps.get(s, sweep_id)
        assert (sweep.state, sweep.reason, sweep.submitted) == ("RUNNING", "", 2), sweep.reason
        assert stopped == [] and len(submitted) == 1
        job = jobs.get_job(s, submitted[0])
        assert (job.trial, job.state) == (1, "PENDING")
        assert jobs.job_spec(job).checkpoint_dir == f"{REFUSED_NOW}/lr-1"


def test_a_new_sweep_is_still_checked_as_a_new_spec(db: Database) -> None:
    body = _sweep()
    body["trial"] = {**body["trial"], "checkpoint_dir": REFUSED_NOW}
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        with pytest.raises(SpecError) as refused:
            sweeps.create(s, body, alice, now=NOW)
    assert refused.value.field == "trial.checkpoint_dir", refused.value
