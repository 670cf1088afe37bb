"""A trial whose objective goes NaN (stored as null) or infinite is judged by the median rule
at the step it really reached, and the sweep's results show that step. A record
that does not carry the metric at all is no report of it."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from helpers import fake_loop, user_and_nodes

from danlu.core.cluster import Node, gpu_type
from danlu.core.sweep import parse_sweep
from danlu.sched.registry import make_policy
from danlu.server.db import Database
from danlu.server.services import jobs, metrics, sweeps

NOW = 1_000_000.0
NODE = Node("a", 4, gpu_type("H100"))


def _sweep() -> dict[str, Any]:
    return {
        "name": "div",
        "trial": {"command": ["python", "train.py"], "resources": {"gpus": 1}},
        "parameters": {"mode": {"values": ["good", "fair", "diverge"]}},
        "metric": {"name": "loss"},
        "method": "grid",
        "parallel": 3,
        "early_stopping": {"rule": "median", "min_steps": 5, "min_trials": 2},
    }


def _ingest(db: Database, job_id: str, records: list[dict[str, Any]]) -> None:
    with db.session() as s:
        metrics.ingest(s, jobs.get_job(s, job_id), records, now=NOW)


def _good() -> list[dict[str, Any]]:
    return [{"step": step, "loss": 2.0 - 0.006 * step} for step in range(301)]


def _run(
    db: Database, tmp_path: Path, diverged: list[dict[str, Any]]
) -> tuple[list[str], str, list[sweeps.TrialResult]]:
    """Run the sweep's three trials (two good, the last reporting ``diverged``), then one
    pass of its early stopping: (trials stopped, the last trial's job id, the results)."""
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        sweep = sweeps.create(s, _sweep(), alice, now=NOW)
        sweep_id = sweep.id
        good, fair, last = (r.job_id for r in sweeps.results(s, sweep))
    loop, _world = fake_loop(db, (NODE,), tmp_path, make_policy("fifo"), 1000)
    try:
        assert len(loop.run_once(now=NOW + 1).launched) == 3
        _ingest(db, good, _good())
        _ingest(db, fair, _good())
        _ingest(db, last, diverged)
        with db.session() as s:
            stopped, _ = sweeps.advance(s, sweep_id, NOW + 20)
        with db.read_session() as s:
            results = sweeps.results(s, sweeps.get(s, sweep_id))
        return stopped, last, results
    finally:
        loop.stop()


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(math.nan, id="nan"),
        pytest.param(math.inf, id="inf"),
        pytest.param(None, id="null"),
    ],
)
def test_a_diverged_trial_is_stopped_at_its_real_step(
    db: Database, tmp_path: Path, bad: float | None
) -> None:
    diverged = [{"step": s, "loss": 1.5 if s <= 10 else bad} for s in range(201)]
    stopped, last, results = _run(db, tmp_path, diverged)
    assert stopped == [last]
    with db.read_session() as s:
        assert jobs.get_job(s, last).cancel_reason == (
            "stopped early: best 1.5 by step 200 is worse than the median 0.8 of 2 other "
            "trials by that step"
        )
    assert [(r.best, r.step) for r in results][2] == (1.5, 200)


def test_records_without_the_metric_are_no_report_of_it(db: Database, tmp_path: Path) -> None:
    """Records carrying only other fields (``progress``, ``lr``) do not advance the trial's
    step: it is judged at step 10, where it is ahead, and shown at step 10."""
    diverged = [{"step": s, "loss": 1.5} for s in range(11)]
    diverged += [{"step": s, "progress": 0.5, "lr": 0.1} for s in range(11, 201)]
    stopped, _last, results = _run(db, tmp_path, diverged)
    assert stopped == []
    assert [(r.best, r.step) for r in results][2] == (1.5, 10)


def test_a_trial_with_only_not_a_number_reports_is_stopped_and_has_no_best(
    db: Database, tmp_path: Path
) -> None:
    diverged = [{"step": s, "loss": math.nan} for s in range(21)]
    stopped, last, results = _run(db, tmp_path, diverged)
    assert stopped == [last]
    with db.read_session() as s:
        assert jobs.get_job(s, last).cancel_reason == (
            "stopped early: no finite value by step 20 (NaN or infinite: diverged), worse than "
            "the median 1.88 of 2 other trials by that step"
        )
    assert [(r.best, r.step) for r in results][2] == (None, 20)
    top = sweeps.best(parse_sweep(_sweep()), results)  # ranked last, not best
    assert top is not None and top.trial == 0
