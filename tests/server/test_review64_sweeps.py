"""Sweeps: an ended (FAILED) sweep's unfinished trials can still be cancelled; a
sweep's row lock takes the sweep row only (not its owner's, which a trial's cancel locks
too: the two deadlocked on PostgreSQL); a job array's indices are checked by the API as by
the CLI; a parameter value no trial's environment can hold is refused at submission."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import fake_loop, live_server, user_and_nodes
from interleave import Interleave
from sqlalchemy import event, text
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import ORMExecuteState

from danlu.core.cluster import Node, gpu_type
from danlu.core.errors import SpecError
from danlu.core.job_array import MAX_ARRAY_INDEX
from danlu.core.spec import MAX_EXEC_STRING
from danlu.sched.registry import make_policy
from danlu.server.db import Database, User
from danlu.server.errors import ConflictError
from danlu.server.services import cluster, jobs, projects, sweeps

NOW = 1_000_000.0
NODE = Node("a", 2, gpu_type("H100"))


def _sweep(**extra: Any) -> dict[str, Any]:
    return {
        "name": "lr",
        "trial": {"command": ["python", "train.py"], "resources": {"gpus": 1}},
        "parameters": {"lr": {"values": [0.1, 0.01, 0.001]}},
        "metric": {"name": "loss"},
        "method": "grid",
        "parallel": 2,
        **extra,
    }


def _states(db: Database, sweep_id: str) -> list[tuple[int, str]]:
    with db.read_session() as s:
        return [(r.trial, r.state) for r in sweeps.results(s, sweeps.get(s, sweep_id))]


def test_a_failed_sweep_s_queued_trials_are_cancelled(db: Database) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        body = _sweep(trial={"command": ["x"], "resources": {"gpus": 2}})
        sweep = sweeps.create(s, body, alice, now=NOW)
        first, second = (r.job_id for r in sweeps.results(s, sweep))
        jobs.cancel_job(s, first, alice, now=NOW)
        # the inventory shrinks to one GPU: trial 2 (2 GPUs) can never be submitted
        cluster.replace_inventory(s, [Node("a", 1, gpu_type("H100"))], fake=True, now=NOW)
        sweeps.advance(s, sweep.id, NOW + 1)
        failed = sweeps.get(s, sweep.id)
        reason = failed.reason
        assert failed.state == "FAILED" and jobs.get_job(s, second).state == "PENDING"
        out = sweeps.cancel(s, sweep.id, alice, now=NOW + 2)
        assert (out.state, out.reason) == ("FAILED", reason)  # its end stays as it was
        assert jobs.get_job(s, second).state == "CANCELLED"
        with pytest.raises(ConflictError, match=r"already ended \(FAILED\); nothing to cancel"):
            sweeps.cancel(s, sweep.id, alice, now=NOW + 3)


def test_a_failed_sweep_s_running_trials_are_stopped(db: Database, tmp_path: Path) -> None:
    nodes = (Node("a", 4, gpu_type("H100")),)
    with db.session() as s:
        alice = user_and_nodes(s, nodes, NOW)
        body = _sweep(trial={"command": ["x"], "resources": {"gpus": 2}}, parallel=2)
        sweep = sweeps.create(s, body, alice, now=NOW)
        sweep_id, alice_id = sweep.id, alice.id
        first, second = (r.job_id for r in sweeps.results(s, sweep))
    loop, world = fake_loop(db, nodes, tmp_path, make_policy("fifo"), 10_000)
    try:
        loop.run_once(now=NOW + 1)
        with db.session() as s:
            jobs.cancel_job(s, first, now=NOW + 2)
            projects.update_project(s, "default", quota_gpus=1)  # a 2-GPU trial never fits
        for t in range(3, 8):
            world.clock.advance(1)
            loop.run_once(now=NOW + t)
        assert _states(db, sweep_id) == [(0, "CANCELLED"), (1, "RUNNING")]
        with db.session() as s:
            alice = s.get(User, alice_id)
            assert alice is not None
            out = sweeps.cancel(s, sweep_id, alice, now=NOW + 9)
            assert out.state == "FAILED" and out.reason.startswith("trial 2 could not be")
            trial = jobs.get_job(s, second)
            assert trial.cancel_requested_at == NOW + 9
            assert trial.cancel_reason == "its sweep was cancelled by alice"
            # its stop was asked for: nothing is left to cancel
            with pytest.raises(ConflictError, match="nothing to cancel"):
                sweeps.cancel(s, sweep_id, alice, now=NOW + 10)
        for t in range(10, 14):
            world.clock.advance(1)
            loop.run_once(now=NOW + t)
        assert _states(db, sweep_id) == [(0, "CANCELLED"), (1, "CANCELLED")]
    finally:
        loop.stop()


def test_the_api_cancels_a_failed_sweep_s_trials(tmp_path: Path) -> None:
    with live_server(tmp_path, fake_gpus="2x80GiB", start_loops=False) as live:
        assert live.prepared is not None
        db: Database = live.prepared.app.state.danlu.db
        with live.client() as c:
            body = _sweep(trial={"command": ["x"], "resources": {"gpus": 2}})
            made = c.post("/sweeps", json=body)
            assert made.status_code == 201, made.text
            sweep_id = made.json()["id"]
            with db.session() as s:
                first = sweeps.results(s, sweeps.get(s, sweep_id))[0].job_id
                jobs.cancel_job(s, first, now=NOW)
                cluster.replace_inventory(s, [Node("n", 1, gpu_type("H100"))], fake=True)
                sweeps.advance(s, sweep_id)
            cancelled = c.post(f"/sweeps/{sweep_id}/cancel")
            assert cancelled.status_code == 200, cancelled.text
            assert cancelled.json()["state"] == "FAILED"
            assert {t["state"] for t in cancelled.json()["trials"]} == {"CANCELLED"}
            again = c.post(f"/sweeps/{sweep_id}/cancel")
            assert again.status_code == 409, again.text


def test_the_sweep_lock_takes_the_sweep_row_only(db: Database) -> None:
    """``_locked`` read the sweep joined with its owner (``Sweep.user`` loads joined) under a
    plain ``FOR UPDATE``: PostgreSQL locked the owner's users row too, which a cancel of one
    of the owner's jobs locks after the job's row."""
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        sweep_id, alice_id = sweeps.create(s, _sweep(), alice, now=NOW).id, alice.id
    statements: list[Any] = []
    with db.session() as s:

        @event.listens_for(s, "do_orm_execute")
        def _seen(state: ORMExecuteState) -> None:
            statements.append(state.statement)

        sweeps._locked(s, sweep_id)
        locking = [
            str(stmt.compile(dialect=postgresql.dialect()))
            for stmt in statements
            if getattr(stmt, "_for_update_arg", None) is not None
        ]
        assert len(locking) == 1 and locking[0].endswith("FOR UPDATE OF sweeps"), locking
        if db.dialect == "postgresql":
            with db.engine.connect() as other:
                other.execute(text("SET lock_timeout = '5s'"))
                user = text("SELECT id FROM users WHERE id = :id FOR UPDATE NOWAIT")
                assert other.execute(user, {"id": alice_id}).scalar_one() == alice_id
                row = text("SELECT id FROM sweeps WHERE id = :id FOR UPDATE NOWAIT")
                with pytest.raises(Exception, match="could not obtain lock"):
                    other.execute(row, {"id": sweep_id})
                other.rollback()


def test_a_trial_cancelled_while_its_sweep_is_cancelled(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sweep's cancel has locked the sweep and read its trials when the owner cancels one
    of them (PostgreSQL): the trial's cancel commits, no deadlock; the sweep's cancel then
    waits for it and leaves that trial as it ended."""
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        sweep = sweeps.create(s, _sweep(), alice, now=NOW)
        sweep_id, alice_id = sweep.id, alice.id
        trial = sweeps.results(s, sweep)[1].job_id
    race = Interleave(db)
    race.pause_at(monkeypatch, sweeps._Trials, "unfinished")

    def owner(s: Any) -> User:
        user = s.get(User, alice_id)
        assert user is not None
        return user

    outcome = race.run(
        lambda s: sweeps.cancel(s, sweep_id, owner(s), now=NOW + 1).state,
        lambda s: jobs.cancel_job(s, trial, owner(s), now=NOW + 1).state,
    )
    assert outcome.first_error is None and outcome.first == "CANCELLED"
    assert _states(db, sweep_id) == [(0, "CANCELLED"), (1, "CANCELLED")]
    if db.dialect == "postgresql":  # the trial's cancel went first
        assert outcome.second_error is None and outcome.second == "CANCELLED"
        assert outcome.second_waited is False
    else:  # serialised: the sweep's cancel had already cancelled it
        assert isinstance(outcome.second_error, ConflictError)


def test_the_api_checks_an_array_as_the_cli_does(tmp_path: Path) -> None:
    array = {
        "name": "shard",
        "trial": {"command": ["python", "shard.py"]},
        "parameters": {"index": {"values": [0, 1]}},
        "method": "grid",
        "array": True,
    }
    refused = {
        "parameters.index.values": [
            {"parameters": {"index": {"values": [-3, 1]}}},
            {"parameters": {"index": {"values": [MAX_ARRAY_INDEX + 1]}}},
            {"parameters": {"index": {"values": [5, 5]}}},
        ],
        "metric": [{"metric": {"name": "loss"}}],
    }
    with (
        live_server(tmp_path, fake_gpus="2x80GiB", start_loops=False) as live,
        live.client() as c,
    ):
        for field, bodies in refused.items():
            for extra in bodies:
                answer = c.post("/sweeps", json={**array, **extra})
                assert answer.status_code == 422, (extra, answer.text)
                assert answer.json()["error"]["field"] == field, answer.text
        made = c.post("/sweeps", json={**array, "parameters": {"index": {"values": [0]}}})
        assert made.status_code == 201, made.text
        assert made.json()["metric"] is None


def test_a_value_no_trial_can_hold_is_refused_at_submission(db: Database) -> None:
    prefix, suffix = len('DANLU_HPARAMS={"tok": "'), len('"}')
    fits = MAX_EXEC_STRING - 1 - prefix - suffix
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        too_long = {"tok": {"values": ["short", "x" * 140_000]}}
        with pytest.raises(SpecError, match="DANLU_HPARAMS with the longest values") as caught:
            sweeps.create(s, _sweep(parallel=1, parameters=too_long), alice, now=NOW)
        assert caught.value.field == "parameters.tok.values"
        # the longest value that fits: its trial is submitted (the same limits)
        longest = {"tok": {"values": ["x" * fits, "short"]}}
        sweep = sweeps.create(s, _sweep(parallel=1, parameters=longest), alice, now=NOW)
        assert sweep.submitted == 1 and sweep.state == "RUNNING"
