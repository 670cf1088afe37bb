"""GPU usage by project and user over a period (``GET /usage``, ``danlu usage``): every
stretch of a job on its GPUs counts for its part inside the period, whether it ended (the
job finished, was preempted or moved) or still runs."""

from __future__ import annotations

from pathlib import Path

from helpers import live_server, spec, user_and_nodes, wait_state

from danlu.core.cluster import Allocation, Node, gpu_type
from danlu.core.state import JobState
from danlu.core.units import GiB
from danlu.sched.view import Plan, Preempt, Resize
from danlu.server.db import Database, JobRun
from danlu.server.services import jobs, projects, usage, users
from danlu.server.services.record import apply_plan
from danlu.server.services.view import build_snapshot

T = 1_000_000.0
NODE = Node("a", 4, gpu_type("H100"))
WHOLE = [{"node": "a", "gpu": g, "milli": 1000, "memory": 80 * GiB} for g in range(4)]


def _by(rows: list[usage.UsageRow]) -> dict[tuple[str, str], tuple[float, float, int]]:
    return {(r.project, r.user): (r.gpu_seconds, r.gpu_memory_byte_seconds, r.jobs) for r in rows}


def test_stretches_count_for_their_part_inside_the_period(db: Database) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), T)
        bob = users.create_user(s, "bob", now=T)
        projects.create_project(s, "ml", now=T)
        body = {"command": ["python", "train.py"]}
        a = jobs.submit(s, {"name": "a", "resources": {"gpus": 2}, **body}, alice, now=T)
        b = jobs.submit(
            s, {"name": "b", "project": "ml", "resources": {"gpus": 1}, **body}, bob, now=T
        )
        jobs.change_state(s, a, JobState.RUNNING, "go", T, allocation=WHOLE[:2])
        share = [{"node": "a", "gpu": 2, "milli": 500, "memory": 40 * GiB}]
        jobs.change_state(s, b, JobState.RUNNING, "go", T + 50, allocation=share)
        a.launched_attempt, b.launched_attempt = a.attempt, b.attempt  # the executor took them
        jobs.change_state(s, a, JobState.SUCCEEDED, "done", T + 3600)
        bob_id = bob.id
    with db.read_session() as s:
        (run,) = s.query(JobRun).all()
        assert (run.started_at, run.ended_at, run.gpu_milli) == (T, T + 3600, 2000)
        whole = _by(usage.usage(s, T, T + 7200, now=T + 7200))
        assert whole == {
            ("default", "alice"): (7200.0, 2 * 80 * GiB * 3600.0, 1),
            ("ml", "bob"): (0.5 * 7150, 40 * GiB * 7150.0, 1),  # still running
        }
        part = _by(usage.usage(s, T + 1800, T + 3600, now=T + 7200))
        assert part[("default", "alice")][0] == 3600.0 and part[("ml", "bob")][0] == 900.0
        assert list(_by(usage.usage(s, T, None, user_id=bob_id, now=T + 100))) == [("ml", "bob")]
        assert usage.usage(s, T + 8000, T + 9000, now=T + 7200) == []  # the future: nothing


def test_a_rounds_preemptions_and_moves_end_stretches_too(db: Database) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), T)
        body = {"command": ["python", "train.py"], "resources": {"gpus": "1..4"}}
        moved = jobs.submit(s, {"name": "moved", **body}, alice, now=T)
        stopped = jobs.submit(s, {"name": "stopped", **body}, alice, now=T)
        jobs.change_state(s, moved, JobState.RUNNING, "go", T, allocation=WHOLE[:1])
        jobs.change_state(s, stopped, JobState.RUNNING, "go", T, allocation=WHOLE[1:2])
        for job in (moved, stopped):  # the executor took their launches
            job.launched_attempt = job.attempt
        ids = moved.id, stopped.id
    with db.session() as s:
        snap = build_snapshot(s, T + 100)
        grown = Allocation.whole_gpus([(0, 0), (0, 2)], memory=80 * GiB)
        plan = Plan(preempts=(Preempt(ids[1], "test"),), resizes=(Resize(ids[0], grown),))
        apply_plan(s, plan, T + 100, snap.withheld, snap)
    with db.session() as s:  # the preempted job holds its GPU until it has checkpointed
        moved_row = jobs.get_job(s, ids[0])
        moved_row.launched_attempt = moved_row.attempt  # its new run launched
        stopped_row = jobs.get_job(s, ids[1])
        assert stopped_row.state == "PREEMPTING"
        jobs.change_state(s, stopped_row, JobState.PENDING, "checkpointed", T + 150)
    with db.read_session() as s:
        runs = sorted((r.job_id, r.ended_at, r.gpu_milli) for r in s.query(JobRun).all())
        assert runs == sorted([(ids[0], T + 100, 1000), (ids[1], T + 150, 1000)])
        (row,) = usage.usage(s, T, T + 200, now=T + 200)
        # the moved job 100 s on 1 GPU then 100 s on 2; the preempted one 150 s on 1
        assert (row.gpu_seconds, row.jobs) == (100 + 200 + 150, 2)


def test_the_api_and_the_cli_report_usage(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from danlu.cli.main import app

    with live_server(tmp_path, fake_gpus="2x80GiB") as live, live.client() as c:
        job = c.post("/jobs", json=spec("short", "import time; time.sleep(0.5)")).json()
        wait_state(c, job["id"], "SUCCEEDED")
        rows = c.get("/usage").json()
        assert [(r["project"], r["user"], r["jobs"]) for r in rows] == [("default", "admin", 1)]
        assert 0.3 / 3600 < rows[0]["gpu_hours"] < 30 / 3600
        assert c.get("/usage", params={"since": 0, "until": 1}).json() == []
        bad = c.get("/usage", params={"since": 10, "until": 5})
        assert bad.status_code == 422 and "since" in bad.text
        c.post("/users", json={"name": "carol"}).raise_for_status()
        token = c.post("/users/carol/tokens", json={"name": "t"}).json()["token"]
        with live.client(token) as carol:
            assert carol.get("/usage").json() == []  # not her jobs
        flags = ["--url", live.url, "--token", live.token]
        result = CliRunner().invoke(app, ["usage", "--days", "1", *flags])
        assert result.exit_code == 0 and "default" in result.stdout and "admin" in result.stdout
        result = CliRunner().invoke(app, ["usage", "--days", "0", *flags])
        assert result.exit_code == 2
