"""A sweep's curves (what its median rule and trial ranking read) leave out the records that
a trial's in-process rollback went back over, as the trial's metric list does: the first
try's records of the steps the replay redid (``rollback`` generation 1 from step 20 on)."""

from __future__ import annotations

from helpers import user_and_nodes

from danlu.core.cluster import Node, gpu_type
from danlu.server.db import Database
from danlu.server.services import jobs, metrics, sweeps

NOW = 1_000_000.0
NODE = Node("a", 2, gpu_type("H100"))


def test_a_trials_curve_leaves_out_the_records_its_rollback_went_back_over(
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
    with db.session() as s:
        job = jobs.get_job(s, trial)
        job.attempt = 1
        s.flush()
        # the first try's loss at step 30 was an anomaly (0.01); the run rolled back to its
        # checkpoint of step 10 and redid steps 20 and 30
        first = [{"step": 10, "loss": 0.9}, {"step": 20, "loss": 0.7}, {"step": 30, "loss": 0.01}]
        metrics.ingest(s, job, first, now=NOW)
        replay = [{"step": 20, "loss": 0.6, "rollback": 1}, {"step": 30, "loss": 0.5}]
        metrics.ingest(s, job, replay, now=NOW)
    with db.read_session() as s:
        sweep = sweeps.get(s, sweep_id, alice)
        trials = sweeps._Trials(s, sweep, sweeps.spec_of(sweep))
        value = trials.value(trial)
        shown = [(m.step, m.data["loss"]) for m in metrics.list_metrics(s, trial)]
    assert shown == [(10, 0.9), (20, 0.6), (30, 0.5)]
    assert value == 0.5
