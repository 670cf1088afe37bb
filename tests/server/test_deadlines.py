"""A spec's ``deadline`` and ``time_limit``: a job not finished that many seconds after its
submission, or that has held GPUs that long over its runs, is cancelled by the reconcile loop,
queued or running."""

from __future__ import annotations

from pathlib import Path

from helpers import user_and_nodes

from danlu.config import load_settings
from danlu.core.cluster import Cluster, Node, gpu_type
from danlu.core.spec import parse_spec
from danlu.executors import FakeExecutor, FakeWorld
from danlu.sched.registry import make_policy
from danlu.server.db import Database
from danlu.server.reconcile import Reconciler
from danlu.server.routes.schemas import job_out
from danlu.server.services import events, jobs
from danlu.server.services.admission import build_request

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
        report = loop.run_once(now=NOW + 100)  # the running one's: stopped to checkpoint
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


def test_jobs_that_used_their_time_limit_are_stopped_counting_every_run(
    db: Database, tmp_path: Path
) -> None:
    """``time_limit`` counts the time the job held GPUs, over its runs (``run_time`` of
    the runs ended plus the current one), not the time it waited: reached, the job is
    stopped (with its grace to checkpoint); a queued job whose runs used it all ends without
    starting."""
    nodes = (Node("a", 1, gpu_type("H100")), Node("b", 1, gpu_type("H100")))
    body = {"command": ["python", "train.py"], "resources": {"gpus": 1}}
    with db.session() as s:
        alice = user_and_nodes(s, nodes, NOW)
        fresh = jobs.submit(s, {"name": "fresh", "time_limit": "100s", **body}, alice, now=NOW)
        resumed = jobs.submit(s, {"name": "resumed", "time_limit": "1m", **body}, alice, now=NOW)
        used_up = jobs.submit(s, {"name": "used", "time_limit": 30, **body}, alice, now=NOW)
        patient = jobs.submit(s, {"name": "patient", **body}, alice, now=NOW)
        # earlier runs of these two (ended by preemptions) held GPUs for 50 s and 30 s
        jobs.get_job(s, resumed.id).run_time = 50.0
        jobs.get_job(s, used_up.id).run_time = 30.0
        assert [job_out(j)["time_limit"] for j in (fresh, resumed, patient)] == [100, 60, None]
        ids = (fresh.id, resumed.id, used_up.id, patient.id)
    world = FakeWorld()
    for job_id in ids:
        world.script(job_id, duration=1000)
    executor = FakeExecutor(Cluster(nodes), world)
    loop = Reconciler(db, executor, load_settings(home=tmp_path), policy=make_policy("fifo"))
    try:
        report = loop.run_once(now=NOW + 500)  # queued for 500 s: that does not count
        assert report.timed_out == [used_up.id]  # its runs used all of it: never started
        assert report.launched == [fresh.id, resumed.id]
        with db.read_session() as s:
            assert jobs.get_job(s, used_up.id).state == "CANCELLED"
            assert events.list_events(s, used_up.id)[-1].reason == (
                "time limit reached: ran 30s of 30s"
            )
            fresh_why = jobs.why(s, jobs.get_job(s, fresh.id), now=NOW + 509)
            assert fresh_why.endswith("; 1m31s left of its time limit of 1m40s"), fresh_why
        assert loop.run_once(now=NOW + 509).timed_out == []
        report = loop.run_once(now=NOW + 510)  # 10 s of this run and 50 s before
        assert report.timed_out == [resumed.id]
        assert loop.run_once(now=NOW + 511).timed_out == []  # asked once, not every pass
        for t in range(512, 520):
            loop.run_once(now=NOW + t)
        report = loop.run_once(now=NOW + 600)
        assert report.timed_out == [fresh.id]
        for t in range(601, 610):
            loop.run_once(now=NOW + t)
        with db.read_session() as s:
            states = {job_id: jobs.get_job(s, job_id).state for job_id in ids}
            assert states == {
                fresh.id: "CANCELLED",
                resumed.id: "CANCELLED",
                used_up.id: "CANCELLED",
                patient.id: "RUNNING",
            }
            # the limit's text counts to when it was seen; its run stopped later
            reason = events.list_events(s, resumed.id)[-1].reason
            assert reason.startswith("time limit reached: ran 1m of 1m; the run ended "), reason
            assert reason.endswith("s later (its grace to checkpoint)"), reason
            # its limit, and the time its run took to stop (SIGTERM, then the exit)
            assert 100.0 <= jobs.get_job(s, fresh.id).run_time < 110.0
            assert "time limit" not in jobs.why(s, jobs.get_job(s, patient.id), now=NOW + 610)
    finally:
        loop.stop()


def test_the_time_limit_is_the_schedulers_duration_when_the_user_gave_none() -> None:
    def expected(**fields: object) -> float | None:
        spec = parse_spec({"name": "j", "command": ["true"], **fields})
        request = build_request("j", spec, submit_time=0.0, seq=1, priority=0, gpu_memory=None)
        return request.expected_duration

    assert expected() is None
    assert expected(time_limit="2h") == 7200.0
    assert expected(time_limit="2h", training={"expected_duration": 600}) == 600.0


def test_time_limits_give_a_wide_job_its_reservation_in_the_control_plane(
    db: Database, tmp_path: Path
) -> None:
    """With EASY backfill (``reserve``) the time limits are the expected ends: a job that
    would run past the wide job's reserved start waits, one that ends before it starts."""
    node = Node("a", 4, gpu_type("H100"))
    two = {"command": ["python", "train.py"], "resources": {"gpus": 2}}
    with db.session() as s:
        alice = user_and_nodes(s, (node,), NOW)
        first = jobs.submit(s, {"name": "first", "time_limit": "10m", **two}, alice, now=NOW)
    world = FakeWorld()
    world.script(first.id, duration=10_000)
    executor = FakeExecutor(Cluster((node,)), world)
    policy = make_policy("fifo", backfill=True, reserve=True)
    loop = Reconciler(db, executor, load_settings(home=tmp_path), policy=policy)
    try:
        assert loop.run_once(now=NOW).launched == [first.id]
        with db.session() as s:
            four = {**two, "resources": {"gpus": 4}}
            wide = jobs.submit(s, {"name": "wide", **four}, alice, now=NOW + 1)
            long = jobs.submit(s, {"name": "long", "time_limit": "1h", **two}, alice, now=NOW + 2)
            quick = jobs.submit(s, {"name": "quick", "time_limit": 300, **two}, alice, now=NOW + 3)
        for job_id in (wide.id, long.id, quick.id):
            world.script(job_id, duration=10_000)
        report = loop.run_once(now=NOW + 60)
        assert report.launched == [quick.id]  # ends by NOW + 360, before first's limit
        with db.read_session() as s:
            held = jobs.why(s, jobs.get_job(s, long.id), now=NOW + 60)
            assert held.startswith("backfill holds GPUs for a job of project default"), held
            assert wide.id not in held  # another job's id is not the waiting job's to read
            assert "(reserved to start in 540s)" in held  # first's limit: NOW + 600
    finally:
        loop.stop()
