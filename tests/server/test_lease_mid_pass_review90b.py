"""A reconcile pass that outlives its ``scheduler`` lease.

The lease was renewed only as a pass began: a pass that ran past the lease's TTL (a slow
poll, a hung executor call) while another control plane took the lease over still recorded
its round's plan and launched what it started, two planes scheduling one database at once.
The plan's transaction now renews the lease (the same row lock a taker waits on) and records
nothing, launching nothing, when another plane holds it.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from helpers import fake_loop, user_and_nodes

from danlu.core.cluster import Node, gpu_type
from danlu.sched.registry import make_policy
from danlu.server import upkeep
from danlu.server.db import Database, Lease
from danlu.server.plane_lease import LEASE
from danlu.server.services import jobs, locks, users

NOW = 1_000_000.0
NODE = Node("a", 1, gpu_type("H100"))


def _submit(db: Database, t: float) -> str:
    with db.session() as s:
        alice = users.get_user(s, "alice")
        body = {"name": "one", "command": ["python", "train.py"], "resources": {"gpus": 1}}
        return jobs.submit(s, body, alice, now=t).id


def test_a_pass_whose_lease_was_taken_mid_pass_records_no_plan(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with db.session() as s:
        user_and_nodes(s, (NODE,), NOW)
    loop, world = fake_loop(db, (NODE,), tmp_path / "home", make_policy("fifo"), 10_000)
    assert loop.run_once(now=NOW).leader
    job_id = _submit(db, NOW + 1)
    later = NOW + 2
    real = upkeep.advance_sweeps

    def taken_meanwhile(*args: object, **kwargs: object) -> None:
        # the pass ran past its lease's TTL: another plane took the lease over
        with db.session() as s:
            taken = locks.claim(s, Lease, [LEASE], "other", 60.0, later + loop.ttl + 1, "far:7:1")
        assert taken == [LEASE]
        real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(upkeep, "advance_sweeps", taken_meanwhile)
    with caplog.at_level(logging.ERROR, logger="danlu.server.reconcile"):
        report = loop.run_once(now=later)
    assert report.started == [] and report.launched == []
    assert world.runs == {}
    assert "lost the scheduler lease" in caplog.text and "pid 7 on far" in caplog.text
    with db.read_session() as s:
        assert jobs.get_job(s, job_id).state == "PENDING"
        lease = s.get(Lease, LEASE)
        assert lease is not None and lease.lock_token == "other"
    monkeypatch.undo()
    assert not loop.run_once(now=later + 1).leader  # the other plane holds it
    loop.stop()
