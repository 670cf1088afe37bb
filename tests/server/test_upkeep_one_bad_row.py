"""One job or sweep the queue's rules fail on with an error that is not the store's (a bug, a
stored row this code cannot read) is reported and passed over: it ended every reconcile pass
before the plan, so that no job of the cluster started again. A store's error still ends the
pass."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import fake_loop, user_and_nodes
from sqlalchemy.exc import OperationalError

from danlu.core.cluster import Node, gpu_type
from danlu.sched.registry import make_policy
from danlu.server.db import Database
from danlu.server.services import jobs, sweeps

NOW = 1_000_000.0
NODE = Node("a", 1, gpu_type("H100"))


def _one_job(db: Database) -> str:
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        body = {"name": "one", "command": ["python", "train.py"], "resources": {"gpus": 1}}
        return jobs.submit(s, body, alice, now=NOW).id


def test_a_sweep_the_rules_fail_on_leaves_the_others_scheduled(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = _one_job(db)

    def advance(*args: object, **kwargs: object) -> tuple[list[str], list[str]]:
        raise KeyError("search_space")

    monkeypatch.setattr(sweeps, "running_ids", lambda session: ["sw-bad"])
    monkeypatch.setattr(sweeps, "advance", advance)
    loop, _ = fake_loop(db, (NODE,), tmp_path / "home", make_policy("fifo"), 10_000)
    try:
        report = loop.run_once(now=NOW)  # the old code raised the KeyError here
        assert report.launched == [job_id]
        assert report.errors == ["sweep sw-bad: KeyError: 'search_space'"]
    finally:
        loop.stop()


def test_a_store_error_of_a_rule_still_ends_the_pass(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _one_job(db)

    def advance(*args: object, **kwargs: object) -> tuple[list[str], list[str]]:
        raise OperationalError("UPDATE", {}, Exception("database is locked"))

    monkeypatch.setattr(sweeps, "running_ids", lambda session: ["sw-1"])
    monkeypatch.setattr(sweeps, "advance", advance)
    loop, _ = fake_loop(db, (NODE,), tmp_path / "home", make_policy("fifo"), 10_000)
    try:
        with pytest.raises(OperationalError):
            loop.run_once(now=NOW)
    finally:
        loop.stop()
