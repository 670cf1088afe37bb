"""``GET /sweeps/{id}`` marks the trials its early-stopping rule cancelled
(``stopped_early``), so that ``danlu wait SWEEP`` judges a DONE sweep as ``--after SWEEP``
does; a trial a user cancelled, or one cancelled while queued (no reason), is not marked."""

from __future__ import annotations

from typing import Any

from helpers import user_and_nodes

from danlu.core.cluster import Node, gpu_type
from danlu.core.state import JobState
from danlu.sched.sweep import STOPPED_EARLY
from danlu.server.db import Database, Job, Sweep
from danlu.server.routes.sweeps import sweep_out
from danlu.server.services import sweeps

NOW = 1_000_000.0
NODE = Node("a", 4, gpu_type("H100"))
SPEC: dict[str, Any] = {
    "name": "lr",
    "trial": {"command": ["python", "train.py"], "resources": {"gpus": 1}},
    "parameters": {"lr": {"values": [0.1, 0.01, 0.001, 0.0001]}},
    "metric": {"name": "loss"},
    "method": "grid",
    "parallel": 4,
    "early_stopping": {"rule": "median", "min_steps": 20, "min_trials": 1},
}


def test_the_trials_the_rule_stopped_are_marked(db: Database) -> None:
    ended = [
        (JobState.SUCCEEDED, None),
        (JobState.CANCELLED, f"{STOPPED_EARLY}best 1.5 by step 20 is worse than the median"),
        (JobState.CANCELLED, "cancelled by alice"),
        (JobState.CANCELLED, None),
    ]
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        sweep_id = sweeps.create(s, SPEC, alice, now=NOW).id
        trials = sorted(s.query(Job).where(Job.sweep_id == sweep_id), key=lambda j: j.seq)
        for job, (state, reason) in zip(trials, ended, strict=True):
            job.state, job.cancel_reason = state.value, reason
    with db.read_session() as s:
        sweep = s.query(Sweep).where(Sweep.id == sweep_id).one()
        out = sweep_out(sweep, sweeps.results(s, sweep))
    assert [t["stopped_early"] for t in out["trials"]] == [False, True, False, False]
