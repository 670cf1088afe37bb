"""Why the control plane stops a job's run, recorded before the run is signalled and read by
the run's own token (``GET /jobs/{id}/stopping``): what danlu.train's log line names on the
SIGTERM (a cancel, a time limit, a preemption, a drain, a move), instead of calling every
stop a preemption."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import fake_loop, live_server, spec, user_and_nodes

from danlu.core.cluster import Node, gpu_type
from danlu.core.state import JobState
from danlu.executors import Handle
from danlu.sched.registry import make_policy
from danlu.server.db import Database
from danlu.server.services import jobs, nodes, users
from danlu.server.services.bulk import EventBatch

NOW = 1_000_000.0
NODE = Node("a", 1, gpu_type("H100"))
BODY = {"command": ["python", "train.py"], "resources": {"gpus": 1}}


def test_each_stop_s_reason_is_there_when_its_run_is_signalled(
    sqlite_db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = sqlite_db
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        low = jobs.submit(s, {"name": "low", **BODY}, alice, now=NOW).id
    loop, world = fake_loop(db, (NODE,), tmp_path, make_policy("priority"), 10_000)
    told: list[tuple[str, str, str | None]] = []  # (how, job, the reason as it is signalled)

    def reason_of(job_id: str) -> str | None:
        with db.read_session() as s:
            return jobs.stop_reason(s, jobs.get_job(s, job_id))

    def watching(how: str) -> Any:
        real = getattr(loop.executor, how)

        def stop(handle: Handle, *args: Any, **kwargs: Any) -> None:
            told.append((how, handle.job_id, reason_of(handle.job_id)))
            real(handle, *args, **kwargs)

        return stop

    monkeypatch.setattr(loop.executor, "preempt", watching("preempt"))
    monkeypatch.setattr(loop.executor, "cancel", watching("cancel"))

    def settle(until: float) -> None:
        """Let the stopped run exit (the fake world's clock) and the loop see it."""
        for t in range(int(until) - 4, int(until)):
            world.clock.advance(1)
            loop.run_once(now=NOW + t)

    try:
        assert loop.run_once(now=NOW + 1).launched == [low]
        assert reason_of(low) is None  # running, nothing stops it
        with db.session() as s:  # a higher-priority job: the low one is preempted
            high = jobs.submit(s, {"name": "high", "priority": 5, **BODY}, alice, now=NOW).id
        loop.run_once(now=NOW + 2)
        settle(10)
        with db.session() as s:
            jobs.cancel_job(s, high, alice, now=NOW + 10)
        loop.run_once(now=NOW + 11)
        settle(20)
        with db.session() as s:  # the low job runs again: its node is drained
            nodes.cordon(s, "a", "firmware", drain=True, now=NOW + 20)
        loop.run_once(now=NOW + 21)
        settle(30)
        with db.session() as s:  # back, and a job with a time limit goes first
            nodes.uncordon(s, "a")
            limited = jobs.submit(
                s, {"name": "limited", "time_limit": 5, "priority": 9, **BODY}, alice, now=NOW
            ).id
        loop.run_once(now=NOW + 30)
        settle(45)
    finally:
        loop.stop()
    assert [(how, job) for how, job, _ in told] == [
        ("preempt", low),
        ("cancel", high),
        ("preempt", low),
        ("preempt", limited),
    ], told
    reasons = [reason for _, _, reason in told]
    assert reasons[:3] == [
        "preempted: outranked by waiting jobs",
        "cancelled by alice",
        "preempted: its node a is being drained",
    ]
    assert reasons[3] is not None and reasons[3].startswith("time limit reached: ran ")


def test_a_run_a_move_leaves_is_stopped_as_moved(sqlite_db: Database) -> None:
    with sqlite_db.session() as s:
        alice = user_and_nodes(s, (Node("a", 2, gpu_type("H100")),), NOW)
        job = jobs.submit(s, {"name": "elastic", **BODY}, alice, now=NOW)
        one = {"node": "a", "gpu": 0, "milli": 1000, "memory": 80 << 30}
        jobs.change_state(s, job, JobState.RUNNING, "started", NOW, allocation=[one])
        job.launched_attempt = job.attempt  # its run launched
        assert jobs.stop_reason(s, job) is None
        two = [one, {**one, "gpu": 1}]  # grown to both GPUs: its run is stopped, relaunched
        jobs.resize(s, job, two, now=NOW + 5, events=EventBatch())  # type: ignore[arg-type]
        said = "moved by the scheduler to other GPUs (a resize or a re-packing)"
        assert jobs.stop_reason(s, job) == said


def test_a_run_s_token_reads_its_own_job_s_stop_only(tmp_path: Path) -> None:
    """The run's token may read why its own job's run stops (docs/api.md), as it may report
    its metrics; no other job's, and nothing else."""
    with live_server(tmp_path, fake_gpus="1x80GiB", start_loops=False) as live:
        assert live.prepared is not None
        with live.client() as admin:
            job = admin.post("/jobs", json=spec("mine", "pass")).json()["id"]
            other = admin.post("/jobs", json=spec("other", "pass")).json()["id"]
        with live.prepared.app.state.danlu.db.session() as s:
            run = users.issue_token(s, users.get_user(s, "admin"), "run", job_id=job)
        with live.client(run) as c:
            mine = c.get(f"/jobs/{job}/stopping")
            assert mine.status_code == 200, mine.text
            assert mine.json() == {"id": job, "reason": None}  # queued: nothing is stopped
            assert c.get(f"/jobs/{job[:6]}/stopping").status_code == 200  # a prefix of it
            refused = c.get(f"/jobs/{other}/stopping")
            assert refused.status_code == 403, refused.text
            assert "read why its run is being stopped" in refused.json()["error"]["message"]
            assert c.get(f"/jobs/{job}").status_code == 403  # nothing else
