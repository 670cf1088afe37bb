"""A DONE sweep whose early-stopping rule stopped some trials is judged, for the jobs that
depend on it, as a sweep that succeeded: stopping the losing trials is the sweep working
(``--after SWEEP`` was refused as "ended FAILED" whenever the median rule had stopped one).
A trial a user cancelled, or one that failed, still makes it FAILED."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import user_and_nodes

from danlu.core.cluster import Node, gpu_type
from danlu.core.state import JobState
from danlu.sched.sweep import STOPPED_EARLY
from danlu.server.db import Database, Job
from danlu.server.services import dependencies, sweeps

NOW = 1_000_000.0
NODE = Node("a", 2, gpu_type("H100"))
SPEC: dict[str, Any] = {
    "name": "lr",
    "trial": {"command": ["python", "train.py"], "resources": {"gpus": 1}},
    "parameters": {"lr": {"values": [0.1, 0.01]}},
    "metric": {"name": "loss"},
    "method": "grid",
    "parallel": 2,
    "early_stopping": {"rule": "median", "min_steps": 20, "min_trials": 1},
}


@pytest.mark.parametrize(
    ("second", "reason", "judged"),
    [
        ("CANCELLED", f"{STOPPED_EARLY}best 1.5 by step 20 is worse than the median", "SUCCEEDED"),
        ("CANCELLED", "cancelled by alice", "FAILED"),
        ("CANCELLED", None, "FAILED"),  # a queued trial cancelled keeps no reason
        ("FAILED", None, "FAILED"),
        ("SUCCEEDED", None, "SUCCEEDED"),
    ],
    ids=["stopped-early", "user-cancel", "no-reason", "failed", "all-succeeded"],
)
def test_a_done_sweep_is_judged_by_how_its_trials_ended(
    db: Database, second: str, reason: str | None, judged: str
) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        sweep = sweeps.create(s, SPEC, alice, now=NOW)
        sweep_id = sweep.id
        trials = sorted(
            (job for job in s.query(Job).where(Job.sweep_id == sweep_id)), key=lambda j: j.seq
        )
        assert len(trials) == 2
        trials[0].state = JobState.SUCCEEDED.value
        trials[0].started_at = NOW + 1
        trials[1].state = second
        trials[1].started_at = NOW + 1
        trials[1].cancel_reason = reason
        sweep.state = "DONE"
    with db.read_session() as s:
        full, found = dependencies.sweep_found(s, sweep_id[:6], None)
    assert full == sweep_id
    assert (found.state.value, found.kind) == (judged, "sweep")
