"""A sweep's median rule does not stop a trial whose latest record (by step) says its
training is done (``progress`` >= 1, as danlu.train reports it when it knows the total):
its process is about to exit 0 on its own, and a cancel then would end it CANCELLED.
``GET /sweeps/{id}`` marks the trials the rule did stop (``stopped_early``), so that ``danlu
wait SWEEP`` judges a DONE sweep as ``--after SWEEP`` does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from helpers import fake_loop, user_and_nodes

from danlu.core.cluster import Node, gpu_type
from danlu.core.state import JobState
from danlu.sched.registry import make_policy
from danlu.sched.sweep import STOPPED_EARLY
from danlu.server.db import Database, Job, Sweep
from danlu.server.routes.sweeps import sweep_out
from danlu.server.services import jobs, metrics, sweeps

NOW = 1_000_000.0
NODE = Node("a", 4, gpu_type("H100"))


def _sweep() -> dict[str, Any]:
    return {
        "name": "lr",
        "trial": {"command": ["python", "train.py"], "resources": {"gpus": 1}},
        "parameters": {"lr": {"values": [0.1, 0.01, 0.001, 0.0001]}},
        "metric": {"name": "loss"},
        "method": "grid",
        "parallel": 4,
        "early_stopping": {"rule": "median", "min_steps": 10, "min_trials": 2},
    }


def _ingest(db: Database, job_id: str, records: list[dict[str, Any]]) -> None:
    with db.session() as s:
        metrics.ingest(s, jobs.get_job(s, job_id), records, now=NOW)


def test_a_trial_done_by_its_latest_record_is_not_stopped_early(
    db: Database, tmp_path: Path
) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        sweep = sweeps.create(s, _sweep(), alice, now=NOW)
        sweep_id = sweep.id
        good, fair, done, behind = (r.job_id for r in sweeps.results(s, sweep))
    loop, _world = fake_loop(db, (NODE,), tmp_path, make_policy("fifo"), 1000)
    try:
        assert len(loop.run_once(now=NOW + 1).launched) == 4
        _ingest(db, good, [{"step": 10, "loss": 0.3}, {"step": 20, "loss": 0.2}])
        _ingest(db, fair, [{"step": 10, "loss": 0.4}, {"step": 20, "loss": 0.25}])
        # its last step arrives first: "latest" is by step, not by arrival
        _ingest(db, done, [{"step": 20, "loss": 0.45, "progress": 1.0}])
        _ingest(db, done, [{"step": 10, "loss": 0.5, "progress": 0.5}])
        _ingest(db, behind, [{"step": 10, "loss": 0.5, "progress": 0.5}])
        _ingest(db, behind, [{"step": 20, "loss": 0.45, "progress": 0.75}])
        with db.session() as s:
            stopped, _ = sweeps.advance(s, sweep_id, NOW + 20)
        assert stopped == [behind]
        with db.read_session() as s:
            assert jobs.get_job(s, done).cancel_requested_at is None
            assert jobs.get_job(s, done).state == "RUNNING"
            assert (jobs.get_job(s, behind).cancel_reason or "").startswith("stopped early")
    finally:
        loop.stop()


def test_only_the_latest_record_with_progress_counts(db: Database, tmp_path: Path) -> None:
    """``progress`` 1 on an earlier step than the latest record carrying ``progress`` (which
    says 0.5) does not spare the trial: the latest record decides."""
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        sweep = sweeps.create(s, _sweep(), alice, now=NOW)
        sweep_id = sweep.id
        good, fair, again, _ = (r.job_id for r in sweeps.results(s, sweep))
    loop, _world = fake_loop(db, (NODE,), tmp_path, make_policy("fifo"), 1000)
    try:
        loop.run_once(now=NOW + 1)
        _ingest(db, good, [{"step": 10, "loss": 0.3}, {"step": 20, "loss": 0.2}])
        _ingest(db, fair, [{"step": 10, "loss": 0.4}, {"step": 20, "loss": 0.25}])
        _ingest(db, again, [{"step": 10, "loss": 0.5, "progress": 1.0}])
        _ingest(db, again, [{"step": 20, "loss": 0.45, "progress": 0.5}])
        with db.session() as s:
            stopped, _ = sweeps.advance(s, sweep_id, NOW + 20)
        assert stopped == [again]
    finally:
        loop.stop()


def test_the_trials_the_rule_stopped_are_marked(db: Database) -> None:
    """A trial a user cancelled, or one cancelled while queued (no reason), is not."""
    ended = [
        (JobState.SUCCEEDED, None),
        (JobState.CANCELLED, f"{STOPPED_EARLY}best 1.5 by step 20 is worse than the median"),
        (JobState.CANCELLED, "cancelled by alice"),
        (JobState.CANCELLED, None),
    ]
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        sweep_id = sweeps.create(s, _sweep(), alice, now=NOW).id
        trials = sorted(s.query(Job).where(Job.sweep_id == sweep_id), key=lambda j: j.seq)
        for job, (state, reason) in zip(trials, ended, strict=True):
            job.state, job.cancel_reason = state.value, reason
    with db.read_session() as s:
        sweep = s.query(Sweep).where(Sweep.id == sweep_id).one()
        out = sweep_out(sweep, sweeps.results(s, sweep))
    assert [t["stopped_early"] for t in out["trials"]] == [False, True, False, False]
