"""A sweep's DONE reason names the trials that failed (an array with a failed task read
``DONE: 6 tasks ended``, as if every task did its work), and ``POST /sweeps`` notes a
searched batch size that the trial spec's ``training.global_batch_size`` overrides in every
trial (``DANLU_GLOBAL_BATCH_SIZE`` replaces the batch a danlu.train script asks for: every
trial trained the spec's batch, whatever its parameter said, without a word)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import live_server, spec, user_and_nodes

from danlu.core.cluster import Node, gpu_type
from danlu.core.job_array import array_sweep, parse_array
from danlu.core.spec import parse_spec
from danlu.core.state import JobState
from danlu.core.sweep import parse_sweep
from danlu.server.db import Database
from danlu.server.services import jobs, sweeps

NOW = 1_000_000.0
NODE = Node("a", 8, gpu_type("H100"))


def _task() -> dict[str, Any]:
    return {"name": "shard", "command": ["python", "shard.py"], "resources": {"gpus": 1}}


def _end(db: Database, body: dict[str, Any], failed: set[int]) -> str:
    """Submit ``body``, fail the trials numbered in ``failed`` and cancel the rest, then
    advance the sweep: its reason."""
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        sweep_id = sweeps.create(s, body, alice, now=NOW).id
        for job in jobs.list_jobs(s):
            if job.sweep_id != sweep_id:
                continue
            if job.trial in failed:
                jobs.change_state(s, job, JobState.FAILED, "exit code 3", now=NOW + 1)
            else:
                jobs.cancel_job(s, job.id, now=NOW + 1)
        sweeps.advance(s, sweep_id, NOW + 2)
        done = sweeps.get(s, sweep_id)
        assert done.state == "DONE"
        return done.reason


@pytest.mark.parametrize(
    ("indices", "failed", "reason"),
    [
        ("0-5", {3}, "6 tasks ended (task 3 FAILED)"),
        ("0-2", {0, 2}, "3 tasks ended (tasks 0 and 2 FAILED)"),
        (
            "0-7",
            {0, 1, 2, 3, 5, 6, 7},
            "8 tasks ended (tasks 0, 1, 2, 3 and 5 FAILED; 2 more FAILED)",
        ),
        ("0-2", set(), "3 tasks ended"),
    ],
)
def test_an_array_s_done_reason_names_its_failed_tasks(
    db: Database, indices: str, failed: set[int], reason: str
) -> None:
    body = array_sweep(_task(), parse_array(indices))
    assert _end(db, body, failed) == reason


def test_a_sweep_s_done_reason_names_its_failed_trials(db: Database) -> None:
    body = {
        "name": "lr",
        "trial": _task(),
        "parameters": {"lr": {"values": [0.1, 0.01]}},
        "method": "grid",
        "parallel": 2,
    }
    assert _end(db, body, {1}) == "2 trials ended (trial 1 FAILED)"


def _batch_sweep(training: dict[str, Any], parameter: str = "batch_size") -> dict[str, Any]:
    trial = spec("t", "pass", resources={"gpus": 1, "gpu_memory": "1GiB"}, training=training)
    return {
        "name": "bs",
        "trial": trial,
        "parameters": {"lr": {"values": [0.1, 0.01]}, parameter: {"values": [16, 128]}},
        "metric": {"name": "loss"},
        "method": "grid",
        "parallel": 2,
    }


BATCH_NOTE = (
    "every trial trains the global batch 64 of trial.training.global_batch_size, whatever "
    "its batch_size says (DANLU_GLOBAL_BATCH_SIZE replaces the batch a danlu.train script "
    "asks for): to search the batch size, leave training.global_batch_size out of the trial "
    "spec and give gpu_memory for the largest batch (danlu estimate MODEL --batch-size N)"
)


def test_a_searched_batch_the_trial_spec_overrides_is_noted(tmp_path: Path) -> None:
    with live_server(tmp_path, fake_gpus="1x80GiB", start_loops=False) as live:
        client = live.client()
        fixed = client.post("/sweeps", json=_batch_sweep({"global_batch_size": 64}))
        assert fixed.status_code == 201, fixed.text
        assert fixed.json()["notes"] == [BATCH_NOTE]
        trial = fixed.json()["trials"][0]["job_id"]
        assert BATCH_NOTE in client.get(f"/jobs/{trial}").json()["pending_reason"]
        free = client.post("/sweeps", json=_batch_sweep({}))  # the script's batch holds
        assert free.status_code == 201, free.text
        assert free.json()["notes"] == []


@pytest.mark.parametrize(
    ("parameter", "noted"),
    [
        ("batch_size", True),
        ("Global-Batch-Size", True),
        ("bs", True),
        ("batch", True),
        ("train_batch_size", True),
        ("batch_norm", False),  # no batch size
        ("eval_batch_size", False),  # not the batch trained
    ],
)
def test_the_note_reads_batch_size_parameters_only(parameter: str, noted: bool) -> None:
    from danlu.core.sweep import fixed_batch_note

    sweep = parse_sweep(_batch_sweep({"global_batch_size": 64}, parameter))
    trial = parse_spec({"name": "bs", **sweep.trial})
    note = fixed_batch_note(sweep, trial)
    assert (note is not None) == noted
    if note is not None:
        assert f"whatever its {parameter} says" in note
