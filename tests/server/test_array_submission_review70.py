"""Job arrays' dependencies are resolved once, when the array is submitted, as its
submitter may name them (full ids stored); ``DANLU_MAX_JOBS_PER_USER`` refuses an array whose
first tasks would pass the limit; and a batch of tasks reads the inventory once, not once a
task (1,000 tasks on 1,000 nodes outlived the client's 30 s timeout)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from helpers import live_server, user_and_nodes
from sqlalchemy import event

from danlu.core.cluster import Node, gpu_type
from danlu.core.errors import SpecError
from danlu.core.job_array import array_sweep, parse_array
from danlu.server.db import Database, Job
from danlu.server.errors import ConflictError
from danlu.server.services import jobs, sweeps, users

NOW = 1_000_000.0
NODE = Node("a", 2, gpu_type("H100"))


def _task(**extra: Any) -> dict[str, Any]:
    return {"name": "shard", "command": ["python", "shard.py"], "resources": {"gpus": 1}, **extra}


def _array(text: str, **extra: Any) -> dict[str, Any]:
    """The sweep body ``danlu submit task.yaml --array TEXT`` posts."""
    return array_sweep(_task(**extra), parse_array(text))


def _end_trials(s: Any, sweep_id: str) -> None:
    """Cancel the array's unfinished tasks (PENDING ones end at once)."""
    for job in jobs.list_jobs(s, states=["PENDING"]):
        if job.sweep_id == sweep_id:
            jobs.cancel_job(s, job.id, now=NOW + 1)


def _ids(monkeypatch: pytest.MonkeyPatch, *ids: str) -> None:
    """The next job (and sweep) ids, in order."""
    given = iter(ids)
    monkeypatch.setattr(jobs, "new_job_id", lambda: next(given))


@pytest.mark.parametrize("named", ["full", "prefix"])
def test_an_admin_s_array_for_a_user_after_the_admin_s_job_runs_every_task(
    db: Database, named: str
) -> None:
    """An admin's array for alice ``--after`` the admin's own job: the first ``%N`` tasks
    were submitted (the admin may name the job), the next pass resolved the dependency again
    as alice and failed the array ("belongs to another user"; for a prefix, "no job")."""
    with db.session() as s:
        user_and_nodes(s, (NODE,), NOW)
        root = users.create_user(s, "root", "admin", now=NOW)
        prep = jobs.submit(s, _task(name="prep"), root, now=NOW).id
        body = _array("0-5%2", user="alice", depends_on=[prep if named == "full" else prep[:6]])
        sweep = sweeps.create(s, body, root, now=NOW)
        sweep_id = sweep.id
        assert sweep.submitted == 2
        for _round in range(2):
            _end_trials(s, sweep_id)
            _stopped, more = sweeps.advance(s, sweep_id, NOW + 2)
            assert sweeps.get(s, sweep_id).state == "RUNNING", sweeps.get(s, sweep_id).reason
            assert len(more) == 2
            for job_id in more:
                task = jobs.get_job(s, job_id)
                assert task.user.name == "alice" and task.waiting_on == prep
                assert task.spec["depends_on"] == [{"job": prep, "condition": "succeeded"}]


def test_an_array_stores_the_full_ids_of_its_dependencies(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--after PREFIX`` was stored as the prefix and looked up again for every later
    task: once a newer job shared the prefix, the array failed part-way ("ambiguous")."""
    _ids(monkeypatch, "abcd00000001", "5eee00000001", "1111aaaaaaaa", "2222aaaaaaaa")
    _ids_more = iter(["abcd00000002", "3333aaaaaaaa", "4444aaaaaaaa"])
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        prep = jobs.submit(s, _task(name="prep"), alice, now=NOW).id
        sweep = sweeps.create(s, _array("0-3%2", depends_on=["abcd"]), alice, now=NOW)
        sweep_id = sweep.id
        full = {"job": prep, "condition": "succeeded"}
        assert sweep.spec["trial"]["depends_on"] == [full]  # the documented full ids
        monkeypatch.setattr(jobs, "new_job_id", lambda: next(_ids_more))
        other = jobs.submit(s, _task(name="other"), alice, now=NOW).id
        assert other.startswith("abcd")  # the prefix is ambiguous from now on
        _end_trials(s, sweep_id)
        _stopped, more = sweeps.advance(s, sweep_id, NOW + 2)
        assert sweeps.get(s, sweep_id).state == "RUNNING", sweeps.get(s, sweep_id).reason
        assert [jobs.get_job(s, j).spec["depends_on"] for j in more] == [[full], [full]]


def test_a_later_task_whose_dependency_can_never_hold_fails_the_array(db: Database) -> None:
    """The full ids are judged again for each batch (not looked up as anyone): a job the
    array waits for that failed meanwhile ends the array FAILED with the reason, instead of
    queueing task after task that is cancelled at once."""
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        prep = jobs.submit(s, _task(name="prep"), alice, now=NOW).id
        sweep_id = sweeps.create(s, _array("0-3%2", depends_on=[prep]), alice, now=NOW).id
        jobs.cancel_job(s, prep, alice, now=NOW + 1)
        _end_trials(s, sweep_id)
        assert sweeps.advance(s, sweep_id, NOW + 2) == ([], [])
        failed = sweeps.get(s, sweep_id)
        assert failed.state == "FAILED"
        assert failed.reason == (
            f"task 2 could not be submitted: the job {prep} (prep) it depends on ended "
            "CANCELLED and will never succeed: this job could never run (field "
            "trial.depends_on.0.job)"
        )


def test_a_prefix_of_both_a_job_and_an_array_is_ambiguous(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A prefix that matched an array and one of its tasks silently named the task: it is
    ambiguous, as a prefix of two jobs is, for a job and for an array alike."""
    _ids(monkeypatch, "c0de00000000", "aaaa00000000", "c0de11111111", "bbbb00000000")
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        array = sweeps.create(s, _array("0-1"), alice, now=NOW).id
        assert array == "c0de00000000"
        merge = _task(name="merge", depends_on=["c0de"])
        with pytest.raises(SpecError, match="give more characters") as caught:
            jobs.submit(s, merge, alice, now=NOW)
        assert caught.value.field == "depends_on.0.job"
        assert caught.value.message == (
            "id prefix 'c0de' is ambiguous (job c0de11111111 and array c0de00000000); "
            "give more characters"
        )
        with pytest.raises(SpecError, match="give more characters") as caught:
            sweeps.create(s, _array("0-1", depends_on=["c0de"]), alice, now=NOW)
        assert caught.value.field == "trial.depends_on.0.job"
        # more characters name one of them
        assert jobs.submit(s, _task(depends_on=["c0de0"]), alice, now=NOW).waiting_on == array


def test_an_array_past_the_limit_of_unfinished_jobs_is_refused(
    db: Database,
) -> None:
    """``max_unfinished``: an array whose first tasks (``parallel`` of them, or all when
    fewer) would take its owner past the limit is refused as a job would be; the later
    tasks count but are never refused."""
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        root = users.create_user(s, "root", "admin", now=NOW)
        for i in range(2):
            jobs.submit(s, _task(name=f"j{i}"), alice, now=NOW)
        with pytest.raises(ConflictError, match="DANLU_MAX_JOBS_PER_USER") as caught:
            sweeps.create(s, _array("0-999%2"), alice, max_unfinished=3, now=NOW)
        assert "user alice has 2 unfinished jobs" in str(caught.value)
        with pytest.raises(ConflictError, match="DANLU_MAX_JOBS_PER_USER"):  # her owner's
            sweeps.create(s, _array("0-9%2", user="alice"), root, max_unfinished=3, now=NOW)
        sweep = sweeps.create(s, _array("0-9%1"), alice, max_unfinished=3, now=NOW)  # 2 + 1
        assert sweep.submitted == 1
        with pytest.raises(ConflictError, match="user alice has 3 unfinished jobs, the most"):
            sweeps.create(s, _array("0"), alice, max_unfinished=3, now=NOW)
        _end_trials(s, sweep.id)  # the later tasks are not refused
        assert len(sweeps.advance(s, sweep.id, NOW + 2)[1]) == 1
        assert sweeps.create(s, _array("0-9%2"), root, max_unfinished=3, now=NOW).submitted == 2


def test_the_api_refuses_an_array_past_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DANLU_MAX_JOBS_PER_USER", "3")
    with live_server(tmp_path, start_loops=False) as live, live.client() as c:
        for i in range(3):
            assert c.post("/jobs", json=_task(name=f"j{i}")).status_code == 201
        refused = c.post("/sweeps", json=_array("0-999"))
        assert refused.status_code == 409, refused.text[:300]
        assert "has 3 unfinished jobs" in refused.json()["error"]["message"]
        assert c.get("/sweeps").json() == [] and len(c.get("/jobs").json()) == 3


@contextmanager
def _inventory_reads(db: Database) -> Iterator[list[str]]:
    """The statements that read the nodes of the inventory, while the block runs."""
    seen: list[str] = []

    def note(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "FROM nodes" in statement:
            seen.append(statement)

    event.listen(db.engine, "before_cursor_execute", note)
    try:
        yield seen
    finally:
        event.remove(db.engine, "before_cursor_execute", note)


def test_a_batch_of_tasks_reads_the_inventory_once(db: Database) -> None:
    """Each task ran the whole job submission, the inventory's load included (~107 ms at
    1,000 nodes: a 1,000-task array took 36 s); the tasks of a batch share one spec and
    one admission now. A task's own fields are still checked (a name, its environment)."""
    nodes = [Node(f"n{i}", 8, gpu_type("H100")) for i in range(20)]
    with db.session() as s:
        alice_id = user_and_nodes(s, nodes, NOW).id
    with db.session() as s, _inventory_reads(db) as reads:
        owner = users.get_user(s, "alice")
        sweep = sweeps.create(s, _array("0-59%40"), owner, now=NOW)
        sweep_id = sweep.id
        assert sweep.submitted == 40
        assert len(reads) == 1
    with db.session() as s:
        _end_trials(s, sweep_id)
    with db.session() as s, _inventory_reads(db) as reads:
        assert len(sweeps.advance(s, sweep_id, NOW + 2)[1]) == 20
        assert len(reads) == 1
    with db.read_session() as s:
        tasks = sorted(
            (j for j in jobs.list_jobs(s, limit=1000) if j.sweep_id == sweep_id),
            key=lambda j: j.trial or 0,
        )
        assert [j.trial for j in tasks] == list(range(60))
        assert [j.name for j in tasks] == [f"shard-{n}" for n in range(60)]
        assert [jobs.job_spec(j).env["DANLU_ARRAY_INDEX"] for j in tasks] == [
            str(n) for n in range(60)
        ]
        assert all(j.state in ("PENDING", "CANCELLED") and j.user_id == alice_id for j in tasks)
        assert s.query(Job).count() == 60
