"""A run's exit message is the executor's reading of records a job can write (the local
executor's exit record, run as the job's own user): a NUL, which PostgreSQL's text refuses,
or a lone surrogate, which no store can encode, failed the write of the job's exit every
pass, and so every reconcile pass at that job, on every backend: nothing was scheduled any
more. Such characters are written as ``?`` in the reason, a terminal's escapes too."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import user_and_nodes

from danlu.config import load_settings
from danlu.core.cluster import Cluster, Node, gpu_type
from danlu.executors import ExecStatus, FakeExecutor, FakeWorld, Handle, Outcome, RunState
from danlu.sched.registry import make_policy
from danlu.server.db import Database
from danlu.server.reconcile import Reconciler
from danlu.server.run_exits import describe_exit
from danlu.server.services import events, jobs

NOW = 1_000_000.0
NODE = Node("a", 2, gpu_type("H100"))
WRITTEN = "boom\x00\x1b[2J\ud800 done"
"""What the job wrote as its run's error."""


def test_an_exit_message_is_stored_without_control_characters_or_surrogates() -> None:
    status = ExecStatus(RunState.EXITED, outcome=Outcome.FAILED, exit_code=1, message=WRITTEN)
    assert describe_exit(status) == (False, 1, "failed (exit code 1; boom??[2J? done)")


def test_a_run_whose_exit_message_the_store_cannot_hold_is_settled_and_the_loop_goes_on(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = {"command": ["python", "train.py"], "resources": {"gpus": 1}, "max_restarts": 0}
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        bad = jobs.submit(s, {"name": "bad", **body}, alice, now=NOW).id
        after = jobs.submit(s, {"name": "after", **body}, alice, now=NOW + 1).id
    world = FakeWorld()
    executor = FakeExecutor(Cluster((NODE,)), world)
    loop = Reconciler(db, executor, load_settings(home=tmp_path), policy=make_policy("fifo"))
    try:
        assert sorted(loop.run_once(now=NOW + 2).launched) == sorted([bad, after])
        real = executor.poll

        def poll(handle: Handle) -> ExecStatus:
            if handle.job_id == bad:
                return ExecStatus(
                    RunState.EXITED, outcome=Outcome.FAILED, exit_code=1, message=WRITTEN
                )
            return real(handle)

        monkeypatch.setattr(executor, "poll", poll)
        report = loop.run_once(now=NOW + 3)
        assert report.settled == [bad]
        with db.read_session() as s:
            assert jobs.get_job(s, bad).state == "FAILED"
            reason = events.list_events(s, bad)[-1].reason
        assert "boom??[2J? done" in reason
    finally:
        loop.stop()
