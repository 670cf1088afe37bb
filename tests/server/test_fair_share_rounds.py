"""The fair-share policy in the control plane: with ``reclaim`` a project below its share
gets GPUs back from one above its share by checkpoint, and the GPUs do not bounce back."""

from __future__ import annotations

from pathlib import Path

from helpers import fake_loop, user_and_nodes

from danlu.core.cluster import Node, gpu_type
from danlu.sched.registry import make_policy
from danlu.server.db import Database
from danlu.server.services import jobs, projects, users

NOW = 1_000_000.0
NODE = Node("a", 4, gpu_type("H100"))
BODY = {"command": ["python", "train.py"], "resources": {"gpus": 1}}


def test_reclaim_gives_an_under_share_project_its_gpus_by_checkpoint(
    db: Database, tmp_path: Path
) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        for name in ("vision", "speech"):
            projects.create_project(s, name, now=NOW)
        vision = [
            jobs.submit(s, {"name": f"v{i}", "project": "vision", **BODY}, alice, now=NOW).id
            for i in range(4)
        ]
    policy = make_policy("fair-share", reclaim=True, min_run=300.0)
    loop, world = fake_loop(db, (NODE,), tmp_path, policy, 100_000)
    try:
        assert sorted(loop.run_once(now=NOW).launched) == sorted(vision)
        with db.session() as s:
            speech = [
                jobs.submit(
                    s, {"name": f"s{i}", "project": "speech", **BODY}, alice, now=NOW + 1
                ).id
                for i in range(3)
            ]
        assert loop.run_once(now=NOW + 100).preempted == []  # vision's jobs ran < min_run
        preempted: list[str] = []
        launched: list[str] = []
        for t in range(400, 460):
            world.clock.advance(1)
            report = loop.run_once(now=NOW + t)
            preempted += report.preempted
            launched += report.launched
        # speech's share is 2 of the 4 GPUs: two of vision's jobs made room, one a round,
        # each speech job started once its GPU was free; the third speech job waits
        assert len(preempted) == 2 and set(preempted) <= set(vision)
        assert set(launched) & set(speech) == set(speech[:2])
        with db.read_session() as s:
            states = {j: jobs.get_job(s, j).state for j in vision + speech}
        assert sorted(states[j] for j in speech) == ["PENDING", "RUNNING", "RUNNING"]
        assert sorted(states[j] for j in vision) == ["PENDING", "PENDING", "RUNNING", "RUNNING"]
        for t in range(460, 1500, 20):  # later rounds move nothing: both at their share
            world.clock.advance(20)
            report = loop.run_once(now=NOW + t)
            assert report.preempted == [] and report.launched == [], t
    finally:
        loop.stop()


def test_with_users_a_projects_users_take_turns(db: Database, tmp_path: Path) -> None:
    """alice runs 4 jobs on the 4 GPUs; she queues 4 more, then bob 2: when hers end, the
    two users alternate with ``users`` (the job's owner reaches the policy as
    ``JobRequest.user``), where by submission alone all four would be alice's."""
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        bob = users.create_user(s, "bob", now=NOW)
        first = [jobs.submit(s, {"name": f"a{i}", **BODY}, alice, now=NOW).id for i in range(4)]
    loop, world = fake_loop(db, (NODE,), tmp_path, make_policy("fair-share", users=True), 3600)
    try:
        assert sorted(loop.run_once(now=NOW).launched) == sorted(first)
        with db.session() as s:
            owner = {jobs.submit(s, {"name": f"a{i}", **BODY}, alice, now=NOW + 1).id: "alice"
                     for i in range(4, 8)}  # fmt: skip
            bob_row = s.merge(bob)
            owner |= {jobs.submit(s, {"name": f"b{i}", **BODY}, bob_row, now=NOW + 2).id: "bob"
                      for i in range(2)}  # fmt: skip
        world.clock.advance(3600)
        launched: list[str] = []
        for t in range(3600, 3700, 10):
            launched += loop.run_once(now=NOW + t).launched
        # both hold none once alice's first jobs end: alice (older), bob, alice, bob
        assert sorted(owner[j] for j in launched) == ["alice", "alice", "bob", "bob"]
        with db.read_session() as s:
            bobs = [j for j, who in owner.items() if who == "bob"]
            assert all(jobs.get_job(s, j).state == "RUNNING" for j in bobs)
    finally:
        loop.stop()
