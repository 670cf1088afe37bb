"""A spec's ``deadline``: a job not finished that many seconds after its submission is
cancelled by the reconcile loop, queued or running (the field was stored and then ignored)."""

from __future__ import annotations

from pathlib import Path

from helpers import user_and_nodes

from danlu.config import load_settings
from danlu.core.cluster import Cluster, Node, gpu_type
from danlu.executors import FakeExecutor, FakeWorld
from danlu.sched.registry import make_policy
from danlu.server.db import Database
from danlu.server.reconcile import Reconciler
from danlu.server.routes.schemas import job_out
from danlu.server.services import events, jobs

NOW = 1_000_000.0


def test_jobs_past_their_deadline_are_cancelled_queued_or_running(
    db: Database, tmp_path: Path
) -> None:
    node = Node("a", 1, gpu_type("H100"))
    with db.session() as s:
        alice = user_and_nodes(s, (node,), NOW)
        body = {"command": ["python", "train.py"], "resources": {"gpus": 1}}
        running = jobs.submit(s, {"name": "running", "deadline": 100, **body}, alice, now=NOW)
        queued = jobs.submit(s, {"name": "queued", "deadline": 50, **body}, alice, now=NOW)
        patient = jobs.submit(s, {"name": "patient", **body}, alice, now=NOW)
        ids = (running.id, queued.id, patient.id)
        assert [job_out(j)["deadline_at"] for j in (running, queued, patient)] == [
            NOW + 100,
            NOW + 50,
            None,
        ]
    world = FakeWorld()
    for job_id in ids:
        world.script(job_id, duration=1000)
    executor = FakeExecutor(Cluster((node,)), world)
    loop = Reconciler(db, executor, load_settings(home=tmp_path), policy=make_policy("fifo"))
    try:
        assert loop.run_once(now=NOW + 10).launched == [running.id]
        assert loop.run_once(now=NOW + 49).expired == []
        with db.read_session() as s:
            waiting = jobs.why(s, jobs.get_job(s, queued.id), now=NOW + 49)
            assert waiting.endswith("; cancelled at its deadline in 1s"), waiting
            assert "deadline" not in jobs.why(s, jobs.get_job(s, patient.id), now=NOW + 49)
        report = loop.run_once(now=NOW + 50)  # the queued job's deadline: it ends at once
        assert report.expired == [queued.id] and report.launched == []
        with db.read_session() as s:
            assert jobs.get_job(s, queued.id).state == "CANCELLED"
            reason = events.list_events(s, queued.id)[-1].reason
            assert reason == "deadline passed: not finished 50s after submission"
            assert jobs.get_job(s, running.id).state == "RUNNING"
        report = loop.run_once(now=NOW + 100)  # the running one's: stopped as by a cancel
        assert report.expired == [running.id]
        assert loop.run_once(now=NOW + 101).expired == []  # asked once, not every pass
        for t in range(102, 110):
            loop.run_once(now=NOW + t)
        with db.read_session() as s:
            stopped = jobs.get_job(s, running.id)
            assert stopped.state == "CANCELLED"
            assert (
                "deadline passed: not finished 100s" in events.list_events(s, running.id)[-1].reason
            )
            assert jobs.get_job(s, patient.id).state == "RUNNING"  # it took the GPU
    finally:
        loop.stop()
