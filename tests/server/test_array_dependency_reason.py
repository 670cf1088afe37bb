"""The reason a job waiting on a job array (or a sweep) is given when the array rules its
condition out tells how the array really ended: an array DONE with one task FAILED is
"DONE (task 1 FAILED)", not "FAILED" (its state is DONE; the dependency still judges it
as failed, so ``--after ARRAY`` is cancelled and ``--after ARRAY:failed`` runs)."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import user_and_nodes

from danlu.core.cluster import Node, gpu_type
from danlu.core.errors import SpecError
from danlu.core.job_array import array_sweep, parse_array
from danlu.core.spec import Dependency
from danlu.core.state import JobState
from danlu.server.db import Database, Job, Sweep
from danlu.server.services import dependencies, jobs, sweeps

NOW = 1_000_000.0
NODE = Node("a", 2, gpu_type("H100"))


def _array(text: str) -> dict[str, Any]:
    """The sweep body ``danlu submit task.yaml --array TEXT`` posts."""
    task = {"name": "shard", "command": ["python", "shard.py"], "resources": {"gpus": 1}}
    return array_sweep(task, parse_array(text))


def _ended_array(db: Database, ends: list[str], sweep_state: str = "DONE") -> str:
    """An array of ``len(ends)`` tasks whose task ``n`` ended ``ends[n]``, the array itself
    ``sweep_state``; its id."""
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        sweep = sweeps.create(s, _array(f"0-{len(ends) - 1}"), alice, now=NOW)
        tasks = sorted(s.query(Job).where(Job.sweep_id == sweep.id), key=lambda j: j.trial or 0)
        assert [t.trial for t in tasks] == list(range(len(ends)))
        for task, end in zip(tasks, ends, strict=True):
            task.state = end
            task.started_at = NOW + 1
        sweep.state = sweep_state
        return sweep.id


def _never(db: Database, array_id: str, condition: str) -> str | None:
    """The reason a job ``--after ARRAY:condition`` can never run (None: it can)."""
    with db.read_session() as s:
        deps = [Dependency(job=array_id, condition=condition)]
        found = dependencies.lookup_found(s, [array_id])
        return dependencies.judge(deps, found).never


def test_an_array_done_with_one_task_failed_is_said_to_be_done_with_that_task_failed(
    db: Database,
) -> None:
    array_id = _ended_array(db, ["SUCCEEDED", "FAILED", "SUCCEEDED"])
    never = _never(db, array_id, "succeeded")
    assert never == (
        f"the array {array_id} (shard) it depends on ended DONE (task 1 FAILED) "
        "and will never succeed"
    )
    assert "ended FAILED" not in never
    # the semantics stay: the array counts as failed, so `:failed` and `:finished` hold
    assert _never(db, array_id, "failed") is None
    assert _never(db, array_id, "finished") is None


def test_several_tasks_that_did_not_succeed_are_named_by_state(db: Database) -> None:
    ends = ["FAILED", "SUCCEEDED", "CANCELLED", "FAILED", "SUCCEEDED"]
    array_id = _ended_array(db, ends)
    never = _never(db, array_id, "succeeded")
    assert never is not None
    assert "ended DONE (tasks 0 and 3 FAILED, task 2 CANCELLED) and will never" in never


def test_many_failed_tasks_are_counted_past_the_first_few(db: Database) -> None:
    array_id = _ended_array(db, ["FAILED"] * 9 + ["SUCCEEDED"])
    never = _never(db, array_id, "succeeded")
    assert never is not None
    assert "ended DONE (tasks 0, 1, 2, 3 and 4 FAILED; 4 more did not succeed) and" in never


def test_an_array_whose_tasks_all_succeeded_never_fails_and_says_so(db: Database) -> None:
    array_id = _ended_array(db, ["SUCCEEDED", "SUCCEEDED"])
    never = _never(db, array_id, "failed")
    assert never == (
        f"the array {array_id} (shard) it depends on ended DONE (every task succeeded) "
        "and will never fail"
    )


def test_a_failed_array_says_why_it_failed(db: Database) -> None:
    array_id = _ended_array(db, ["SUCCEEDED", "SUCCEEDED"], sweep_state="FAILED")
    with db.session() as s:
        sweep = s.query(Sweep).where(Sweep.id == array_id).one()
        sweep.reason = "task 2 could no longer be submitted: project gone"
    never = _never(db, array_id, "succeeded")
    assert never is not None
    assert "ended FAILED (task 2 could no longer be submitted: project gone) and" in never


def test_a_job_submitted_after_such_an_array_is_refused_with_the_true_reason(
    db: Database,
) -> None:
    array_id = _ended_array(db, ["SUCCEEDED", "FAILED"])
    with db.session() as s:
        alice = jobs.get_job(s, s.query(Job).where(Job.sweep_id == array_id).first().id).user
        body = {"name": "merge", "command": ["true"], "depends_on": [array_id]}
        with pytest.raises(SpecError) as caught:
            jobs.submit(s, body, alice, now=NOW + 5)
    assert "ended DONE (task 1 FAILED) and will never succeed" in str(caught.value)


def test_a_waiting_job_is_cancelled_with_the_true_reason(db: Database) -> None:
    """The pass that finds the array ended cancels the job waiting on it, saying why."""
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        sweep = sweeps.create(s, _array("0-1"), alice, now=NOW)
        array_id = sweep.id
        waiting = jobs.submit(
            s, {"name": "merge", "command": ["true"], "depends_on": [array_id]}, alice, now=NOW
        ).id
        tasks = sorted(s.query(Job).where(Job.sweep_id == array_id), key=lambda j: j.trial or 0)
        tasks[0].state, tasks[1].state = JobState.SUCCEEDED.value, JobState.FAILED.value
        sweep.state = "DONE"
    with db.session() as s:
        verdicts = dict(dependencies.due(s))
    assert verdicts[waiting].never is not None
    assert "ended DONE (task 1 FAILED) and will never succeed" in verdicts[waiting].never
