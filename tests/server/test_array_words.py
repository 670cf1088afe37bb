"""A job array's reasons speak of an array and its tasks, a sweep's of a sweep and its
trials: an array's DONE reason said ``10 trials ended``, its tasks cancelled with it ``its
sweep was cancelled``, and the job cancelled after an array ``array ID (shard) it depends on
ended ...`` (now ``the array ID (shard) it depends on ended ...``)."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import user_and_nodes

from danlu.core.cluster import Node, gpu_type
from danlu.core.job_array import array_sweep, parse_array
from danlu.core.spec import Dependency
from danlu.core.state import JobState
from danlu.server.db import Database
from danlu.server.errors import ConflictError
from danlu.server.services import dependencies, events, jobs, sweeps

NOW = 1_000_000.0
NODE = Node("a", 4, gpu_type("H100"))


def _task() -> dict[str, Any]:
    return {"name": "shard", "command": ["python", "shard.py"], "resources": {"gpus": 1}}


def _sweep(values: list[float]) -> dict[str, Any]:
    return {
        "name": "lr",
        "trial": _task(),
        "parameters": {"lr": {"values": values}},
        "method": "grid",
        "parallel": 4,
    }


def _end_all(s: Any, sweep_id: str) -> None:
    for job in jobs.list_jobs(s, states=["PENDING"]):
        if job.sweep_id == sweep_id:
            jobs.cancel_job(s, job.id, now=NOW + 1)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (array_sweep(_task(), parse_array("0-2")), "3 tasks ended"),
        (array_sweep(_task(), parse_array("7")), "1 task ended"),
        (_sweep([0.1, 0.01]), "2 trials ended"),
        (_sweep([0.1]), "1 trial ended"),
    ],
)
def test_the_done_reason_counts_tasks_of_an_array_and_trials_of_a_sweep(
    db: Database, body: dict[str, Any], reason: str
) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        sweep_id = sweeps.create(s, body, alice, now=NOW).id
        _end_all(s, sweep_id)
        sweeps.advance(s, sweep_id, NOW + 2)
        done = sweeps.get(s, sweep_id)
        assert (done.state, done.reason) == ("DONE", reason)


@pytest.mark.parametrize(
    ("body", "kind"),
    [(array_sweep(_task(), parse_array("0-1")), "array"), (_sweep([0.1, 0.2]), "sweep")],
)
def test_a_cancel_tells_the_trials_of_their_array_or_sweep(
    db: Database, body: dict[str, Any], kind: str
) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        sweep_id = sweeps.create(s, body, alice, now=NOW).id
        sweeps.cancel(s, sweep_id, alice, now=NOW + 1)
        trials = [job.id for job in jobs.list_jobs(s) if job.sweep_id == sweep_id]
        reasons = {events.list_events(s, trial)[-1].reason for trial in trials}
        assert len(trials) == 2 and reasons == {f"its {kind} was cancelled by alice"}
        with pytest.raises(ConflictError, match=f"^{kind} {sweep_id} already ended"):
            sweeps.cancel(s, sweep_id, alice, now=NOW + 2)


def test_a_dependency_that_can_never_hold_reads_as_a_sentence() -> None:
    found = {
        "a" * 12: dependencies.Found("shard", JobState.CANCELLED, True, "array"),
        "b" * 12: dependencies.Found("prep", JobState.FAILED, True),
    }
    on_array = [Dependency(job="a" * 12, condition="succeeded")]
    assert dependencies.judge(on_array, found).never == (
        f"the array {'a' * 12} (shard) it depends on ended CANCELLED and will never succeed"
    )
    on_job = [Dependency(job="b" * 12, condition="succeeded")]
    assert dependencies.judge(on_job, found).never == (
        f"the job {'b' * 12} (prep) it depends on ended FAILED and will never succeed"
    )
    gone = [Dependency(job="c" * 12, condition="finished")]
    assert dependencies.judge(gone, found).never == (
        f"the job {'c' * 12} it depends on no longer exists"
    )


@pytest.mark.parametrize(
    ("body", "what"),
    [
        (array_sweep(_task(), parse_array("0-9%4")), "this array's first 4 tasks"),
        (_sweep([0.1, 0.2, 0.3, 0.4]), "this sweep's first 4 trials"),
    ],
)
def test_the_unfinished_jobs_limit_counts_an_array_s_tasks_or_a_sweep_s_trials(
    db: Database, body: dict[str, Any], what: str
) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        for n in range(2):
            jobs.submit(s, {**_task(), "name": f"mine-{n}"}, alice, now=NOW)
        with pytest.raises(ConflictError) as refused:
            sweeps.create(s, body, alice, max_unfinished=5, now=NOW)
        assert str(refused.value).startswith(
            f"user alice has 2 unfinished jobs and {what} would make 6, past 5, "
        )
