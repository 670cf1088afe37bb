"""A sweep's summary (``GET /sweeps/{id}``: each trial's best value and last step) reads a
trial's records a batch at a time and keeps only those two, instead of every trial's whole
curve in memory at once; it says what the curves the median rule reads say. On SQLite and
PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import user_and_nodes

from danlu.core.cluster import Node, gpu_type
from danlu.server.db import Database, User
from danlu.server.services import jobs, metrics, sweeps

NOW = 1_000_000.0
NODE = Node("a", 4, gpu_type("H100"))


def _sweep(db: Database, goal: str) -> tuple[User, str, list[str]]:
    body = {
        "name": "lr",
        "trial": {"command": ["python", "train.py"], "resources": {"gpus": 1}},
        "parameters": {"lr": {"values": [0.1, 0.01, 0.001, 0.0001]}},
        "metric": {"name": "acc", "goal": goal},
        "method": "grid",
        "parallel": 4,
    }
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        sweep = sweeps.create(s, body, alice, now=NOW)
        return alice, sweep.id, [r.job_id for r in sweeps.results(s, sweep)]


def _report(db: Database, job_id: str, attempt: int, records: list[dict[str, Any]]) -> None:
    with db.session() as s:
        job = jobs.get_job(s, job_id)
        job.attempt = attempt
        s.flush()
        metrics.ingest(s, job, records, now=NOW)


@pytest.mark.parametrize("goal", ["minimize", "maximize"])
def test_the_summary_says_what_the_curves_say(
    db: Database, goal: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    alice, sweep_id, (plain, restarted, diverged, odd) = _sweep(db, goal)
    _report(db, plain, 1, [{"step": s, "acc": s / 10} for s in range(1, 8)])
    _report(db, restarted, 1, [{"step": s, "acc": s / 10} for s in range(1, 8)])
    _report(db, restarted, 2, [{"step": s, "acc": 0.05} for s in (4, 5)])
    _report(db, diverged, 1, [{"step": 3, "acc": float("nan")}, {"step": 5, "acc": None}])
    _report(
        db,
        odd,  # no report of it: text, a boolean, another metric
        1,
        [{"step": 2, "acc": "high"}, {"step": 3, "acc": True}, {"step": 9, "loss": 1.0}],
    )
    with db.read_session() as s:
        sweep = sweeps.get(s, sweep_id, alice)
        spec = sweeps.spec_of(sweep)
        trials = sweeps._Trials(s, sweep, spec)
        expected = [
            (trials.value(job.id), c.last_step if (c := trials.curves().get(job.id)) else None)
            for job in trials.jobs
        ]
        # batches that end inside a trial's records
        monkeypatch.setattr(sweeps, "SUMMARY_ROWS", 2, raising=False)

        def whole_curves(*_args: Any) -> Any:
            raise AssertionError("the summary read every trial's curve")

        monkeypatch.setattr(sweeps, "_read_curves", whole_curves)
        got = [(r.best, r.step) for r in sweeps.results(s, sweep)]
    assert got == expected
    if goal == "maximize":
        assert got[:2] == [(0.7, 7), (0.3, 5)]  # the restart's records supersede 4 to 7
    else:
        assert got[:2] == [(0.1, 7), (0.05, 5)]
    assert got[2:] == [(None, 5), (None, None)]  # diverged: reports, never a best
