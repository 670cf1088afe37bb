"""A sweep judges its trials on the records their metric list shows: the records a
later attempt of a trial went back over (it resumed from an earlier checkpoint and reported
those steps again) are superseded, left out of the trial's best value and last step."""

from __future__ import annotations

from helpers import user_and_nodes

from danlu.core.cluster import Node, gpu_type
from danlu.server.db import Database
from danlu.server.services import jobs, metrics, sweeps

NOW = 1_000_000.0
NODE = Node("a", 2, gpu_type("H100"))


def _report(db: Database, job_id: str, attempt: int, steps: dict[int, float]) -> None:
    """Records of ``steps`` (step: loss) as the run of ``attempt`` reports them."""
    with db.session() as s:
        job = jobs.get_job(s, job_id)
        job.attempt = attempt
        s.flush()
        records = [{"step": step, "loss": loss} for step, loss in steps.items()]
        metrics.ingest(s, job, records, now=NOW)


def test_a_trials_best_leaves_out_the_records_a_later_attempt_went_back_over(
    db: Database,
) -> None:
    body = {
        "name": "lr",
        "trial": {"command": ["python", "train.py"], "resources": {"gpus": 1}},
        "parameters": {"lr": {"values": [0.1, 0.01]}},
        "metric": {"name": "loss"},
        "method": "grid",
        "parallel": 2,
    }
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        sweep_id = sweeps.create(s, body, alice, now=NOW).id
    with db.read_session() as s:
        trial = sweeps.results(s, sweeps.get(s, sweep_id, alice))[0].job_id
    # the first run reached step 60 with a loss of 0.05, a restart went back to step 40
    _report(db, trial, 1, {10: 0.9, 20: 0.7, 30: 0.6, 40: 0.2, 50: 0.1, 60: 0.05})
    _report(db, trial, 2, {40: 0.5, 50: 0.45})
    with db.read_session() as s:
        result = sweeps.results(s, sweeps.get(s, sweep_id, alice))[0]
        shown = [(m.step, m.data["loss"]) for m in metrics.list_metrics(s, trial)]
    assert shown == [(10, 0.9), (20, 0.7), (30, 0.6), (40, 0.5), (50, 0.45)]
    assert (result.best, result.step) == (0.45, 50)
