"""The retention (``DANLU_RETENTION_DAYS``) says in the log what each pass purged: the jobs,
the cutoff, the metric rows deleted; a pass that purged nothing says nothing. It deleted files
and rows without a word."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from helpers import user_and_nodes

from danlu.config import load_settings
from danlu.core.cluster import Cluster, Node, gpu_type
from danlu.executors import FakeExecutor, FakeWorld
from danlu.sched.registry import make_policy
from danlu.server.db import Database
from danlu.server.reconcile import Reconciler
from danlu.server.services import jobs, metrics, users

NOW = 1_000_000.0
DAY = 86_400.0
NODE = Node("a", 2, gpu_type("H100"))


def _submit(db: Database, name: str) -> str:
    body = {"name": name, "command": ["python", "train.py"], "resources": {"gpus": 1}}
    with db.session() as s:
        return jobs.submit(s, body, users.get_user(s, "alice"), now=NOW).id


def _said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "danlu.server.purge" and r.levelno == logging.INFO and "purged" in r.message
    ]


def test_a_purge_pass_says_what_it_removed_and_by_which_cutoff(
    sqlite_db: Database, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = sqlite_db
    with db.session() as s:
        user_and_nodes(s, (NODE,), NOW)
    world = FakeWorld()
    done, queued = _submit(db, "done"), _submit(db, "queued")
    world.script(done, duration=10)
    with db.session() as s:
        jobs.cancel_job(s, queued, now=NOW + 1)
    settings = load_settings(home=tmp_path, retention_days=1.0)
    loop = Reconciler(
        db, FakeExecutor(Cluster((NODE,)), world), settings, policy=make_policy("fifo")
    )
    caplog.set_level(logging.INFO, logger="danlu.server.purge")
    try:
        assert loop.run_once(now=NOW).launched == [done]
        with db.session() as s:
            rows = [{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.5}]
            metrics.ingest(s, jobs.get_job(s, done), rows, now=NOW)
        world.clock.advance(20)
        loop.run_once(now=NOW + 20)
        loop.run_once(now=NOW + 0.5 * DAY)  # nothing old enough: nothing said
        assert _said(caplog) == []

        t = NOW + 20 + 1.5 * DAY
        assert sorted(loop.run_once(now=t).purged) == sorted([done, queued])
        (line,) = _said(caplog)
        assert "purged 2 job(s) that finished before 1970-01-13T01:47:00+00:00" in line
        assert "DANLU_RETENTION_DAYS=1" in line
        assert done in line and queued in line
        assert "deleted 2 metric record(s), 0 metric request key(s)" in line

        caplog.clear()
        loop.run_once(now=t + 700)  # the next pass: nothing left to purge, nothing said
        assert _said(caplog) == []
    finally:
        loop.stop()
