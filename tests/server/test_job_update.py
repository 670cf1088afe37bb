"""``PATCH /jobs/{id}``: an unfinished job's priority changes and the next round ranks it
anew (``danlu update JOB --priority N``); a queued job is held, passed by until released
(``danlu hold JOB``, ``danlu release JOB``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import fake_loop, live_server, spec, user_and_nodes, wait_state

from danlu.core.cluster import Node, gpu_type
from danlu.core.errors import SpecError
from danlu.executors import FakeWorld
from danlu.sched.registry import make_policy
from danlu.server.db import Database, User
from danlu.server.errors import ConflictError, PermissionDenied
from danlu.server.reconcile import Reconciler
from danlu.server.services import jobs, users

NOW = 1_000_000.0
NODE = Node("a", 1, gpu_type("H100"))


def _three_jobs(db: Database) -> tuple[User, list[str]]:
    """alice and her jobs ``first``, ``second``, ``third`` of one GPU each, queued."""
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        body = {"command": ["python", "train.py"], "resources": {"gpus": 1}}
        ids = [
            jobs.submit(s, {"name": name, **body}, alice, now=NOW + i).id
            for i, name in enumerate(("first", "second", "third"))
        ]
    return alice, ids


def _loop(db: Database, tmp_path: Path, policy: str) -> tuple[Reconciler, FakeWorld]:
    return fake_loop(db, (NODE,), tmp_path, make_policy(policy), 10_000)


def test_a_new_priority_reorders_the_queue_and_preempts(db: Database, tmp_path: Path) -> None:
    alice, (first, second, third) = _three_jobs(db)
    with db.session() as s:
        jobs.set_priority(s, third, 5, alice)  # jumps the queue
    loop, world = _loop(db, tmp_path, "priority")
    try:
        assert loop.run_once(now=NOW + 10).launched == [third]
        assert loop.run_once(now=NOW + 11).preempted == []
        with db.session() as s:  # the running job drops below the waiting ones
            assert jobs.set_priority(s, third, -5, alice).priority == -5
        assert loop.run_once(now=NOW + 12).preempted == [third]
        for t in range(13, 16):
            world.clock.advance(1)
            loop.run_once(now=NOW + t)
        with db.read_session() as s:
            states = {j: jobs.get_job(s, j).state for j in (first, second, third)}
        assert states == {first: "RUNNING", second: "PENDING", third: "PENDING"}
    finally:
        loop.stop()


def test_who_may_change_a_priority_and_to_what(db: Database) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        bob = users.create_user(s, "bob", now=NOW)
        admin = users.create_user(s, "root", role="admin", now=NOW)
        job = jobs.submit(s, {"name": "j", "command": ["true"]}, alice, now=NOW).id
    with db.session() as s:
        with pytest.raises(PermissionDenied):
            jobs.set_priority(s, job, 3, bob)
        assert jobs.set_priority(s, job, 3, admin).priority == 3
        for bad in (1_000_001, -1_000_001, True):
            with pytest.raises(SpecError, match="priority"):
                jobs.set_priority(s, job, bad, alice)  # type: ignore[arg-type]
        jobs.cancel_job(s, job, alice, now=NOW + 1)
    with db.session() as s, pytest.raises(ConflictError, match="already finished"):
        jobs.set_priority(s, job, 1, alice)


def test_the_api_and_the_cli_change_a_priority(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from danlu.cli.main import app

    with live_server(tmp_path, fake_gpus="1x80GiB") as live, live.client() as c:
        busy = c.post("/jobs", json=spec("busy", "import time; time.sleep(30)")).json()
        wait_state(c, busy["id"], "RUNNING")
        job = c.post("/jobs", json=spec("queued", "pass")).json()
        r = c.patch(f"/jobs/{job['id']}", json={"priority": -7})  # still behind the busy one
        assert r.status_code == 200 and r.json()["priority"] == -7
        assert c.patch(f"/jobs/{job['id']}", json={}).json()["priority"] == -7  # nothing asked
        for bad in ({"priority": 10**7}, {"priority": "high"}, {"name": "x"}):
            assert c.patch(f"/jobs/{job['id']}", json=bad).status_code == 422, bad
        assert c.patch("/jobs/nope", json={"priority": 1}).status_code == 404
        flags = ["--url", live.url, "--token", live.token]
        result = CliRunner().invoke(app, ["update", job["id"], "--priority", "-3", *flags])
        assert result.exit_code == 0 and "priority -3" in result.stdout, result.stderr
        assert c.get(f"/jobs/{job['id']}").json()["state"] == "PENDING"
        assert c.get(f"/jobs/{job['id']}").json()["priority"] == -3
        result = CliRunner().invoke(app, ["update", job["id"], *flags])
        assert result.exit_code == 2 and "give --priority" in result.stderr
        c.post(f"/jobs/{busy['id']}/cancel")
        wait_state(c, job["id"], "SUCCEEDED")
        r = c.patch(f"/jobs/{job['id']}", json={"priority": 1})
        assert r.status_code == 409 and "already finished" in r.json()["error"]["message"]


def test_a_held_job_is_passed_by_until_released(db: Database, tmp_path: Path) -> None:
    alice, (first, second, third) = _three_jobs(db)
    with db.session() as s:
        held = jobs.hold(s, first, True, alice, now=NOW + 3)
        assert held.held_at == NOW + 3
        assert jobs.hold(s, first, True, alice, now=NOW + 4).held_at == NOW + 3  # once
    loop, world = _loop(db, tmp_path, "fifo")
    try:
        assert loop.run_once(now=NOW + 10).launched == [second]  # the held one passed by
        loop.run_once(now=NOW + 11)
        with db.read_session() as s:
            why = jobs.why(s, jobs.get_job(s, first), now=NOW + 11)
            assert why == "held by alice: not scheduled until released (danlu release)"
            assert "held" not in jobs.why(s, jobs.get_job(s, third), now=NOW + 11)
        with db.session() as s:
            jobs.hold(s, first, False, alice)
            jobs.cancel_job(s, second, alice, now=NOW + 12)
        for t in range(12, 15):
            world.clock.advance(1)
            loop.run_once(now=NOW + t)
        with db.read_session() as s:
            assert jobs.get_job(s, first).state == "RUNNING"  # first in line again
            assert jobs.get_job(s, first).held_at is None
            assert jobs.get_job(s, third).state == "PENDING"
        with db.session() as s:
            jobs.hold(s, third, True, alice)
            jobs.cancel_job(s, third, alice, now=NOW + 20)
        with db.session() as s, pytest.raises(ConflictError, match="is CANCELLED: release"):
            jobs.hold(s, third, False, alice)  # a finished job is scheduled no more
        with db.session() as s, pytest.raises(ConflictError, match="a finished job cannot"):
            jobs.hold(s, third, True, alice)
    finally:
        loop.stop()


def test_holding_a_finished_job_is_a_conflict_even_if_it_was_held(db: Database) -> None:
    """A job held before it ended still has ``held_at``: holding it again is not "nothing
    to change" but the 409 of any finished job, and so is releasing it (it is scheduled no
    more, held or not: a release of a finished job was a 200 that changed nothing else)."""
    alice, (first, _, _) = _three_jobs(db)
    with db.session() as s:
        jobs.hold(s, first, True, alice, now=NOW + 1)
        jobs.cancel_job(s, first, alice, now=NOW + 2)
    with db.session() as s, pytest.raises(ConflictError, match="a finished job cannot"):
        jobs.hold(s, first, True, alice, now=NOW + 3)
    with db.session() as s, pytest.raises(ConflictError, match="rerun it"):
        jobs.hold(s, first, False, alice)


def test_a_running_job_held_is_preempted_by_checkpoint_and_resumes_when_released(
    db: Database, tmp_path: Path
) -> None:
    alice, (first, second, third) = _three_jobs(db)
    loop, world = _loop(db, tmp_path, "fifo")
    try:
        assert loop.run_once(now=NOW + 10).launched == [first]
        with db.session() as s:
            assert jobs.hold(s, first, True, alice, now=NOW + 11).state == "RUNNING"
            jobs.hold(s, first, False, alice)  # released before the round: it runs on
        assert loop.run_once(now=NOW + 12).preempted == []
        with db.session() as s:
            jobs.hold(s, first, True, alice, now=NOW + 13)
            why = jobs.why(s, jobs.get_job(s, first), now=NOW + 13)
            assert why.endswith(
                "; held: preempted by checkpoint next round, it waits until released"
            )
        assert loop.run_once(now=NOW + 14).preempted == [first]  # by checkpoint
        for t in range(15, 18):
            world.clock.advance(1)
            loop.run_once(now=NOW + t)
        with db.read_session() as s:
            paused = jobs.get_job(s, first)
            assert (paused.state, paused.preemptions, paused.restarts) == ("PENDING", 1, 0)
            assert jobs.why(s, paused, now=NOW + 18).endswith(
                ": not scheduled until released (danlu release)"
            )
            assert jobs.get_job(s, second).state == "RUNNING"  # it took the GPU meanwhile
        with db.session() as s:
            jobs.hold(s, first, False, alice)
            jobs.cancel_job(s, second, alice, now=NOW + 18)
        for t in range(18, 22):
            world.clock.advance(1)
            loop.run_once(now=NOW + t)
        with db.read_session() as s:
            assert jobs.get_job(s, first).state == "RUNNING"  # resumed, first in line
        with db.session() as s:
            jobs.cancel_job(s, first, alice, now=NOW + 22)
            jobs.cancel_job(s, third, alice, now=NOW + 22)
            body = {"command": ["python", "train.py"], "resources": {"gpus": 1}}
            pinned = jobs.submit(s, {"name": "pinned", "preemptible": False, **body}, alice).id
        for t in range(22, 26):
            world.clock.advance(1)
            loop.run_once(now=NOW + t)
        with db.session() as s, pytest.raises(ConflictError, match="not preemptible"):
            assert jobs.get_job(s, pinned).state == "RUNNING"
            jobs.hold(s, pinned, True, alice)
    finally:
        loop.stop()


def test_the_cli_holds_and_releases(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from danlu.cli.main import app

    with live_server(tmp_path, fake_gpus="1x80GiB", start_loops=False) as live, live.client() as c:
        job = c.post("/jobs", json=spec("later", "pass")).json()
        flags = ["--url", live.url, "--token", live.token]
        result = CliRunner().invoke(app, ["hold", job["id"], *flags])
        assert result.exit_code == 0 and f"held job {job['id']}: PENDING" in result.stdout
        assert c.get(f"/jobs/{job['id']}").json()["held_at"] is not None
        why = c.get(f"/jobs/{job['id']}/why").json()["reason"]
        assert why.startswith("held by admin: not scheduled until released")
        result = CliRunner().invoke(app, ["release", job["id"], "--json", *flags])
        assert result.exit_code == 0 and json.loads(result.stdout)["held_at"] is None
        for bad in ({"held": "yes"}, {"held": 1}, {"priority": True}, {"priority": "5"}):
            assert c.patch(f"/jobs/{job['id']}", json=bad).status_code == 422, bad
