"""A job's training metrics read back: the last records (``GET /jobs/{id}/metrics?tail=true``)
and ``danlu metrics`` against a real server, as a table, as JSON and followed."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import live_server, spec, user_and_nodes, wait_state
from typer.testing import CliRunner

from danlu.cli.main import app
from danlu.core.cluster import Node, gpu_type
from danlu.server.db import Database
from danlu.server.services import jobs, metrics

T = 1_000_000.0


def test_the_last_records_come_in_step_order(db: Database) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (Node("a", 1, gpu_type("H100")),), T)
        job = jobs.submit(s, {"name": "m", "command": ["true"]}, alice, now=T)
        metrics.ingest(s, job, [{"step": i, "time": T + i, "loss": 1.0 / i} for i in range(1, 8)])
        job_id = job.id
    with db.read_session() as s:
        last = metrics.list_metrics(s, job_id, limit=3, tail=True)
        assert [m.step for m in last] == [5, 6, 7]
        first = metrics.list_metrics(s, job_id, limit=3)
        assert [m.step for m in first] == [1, 2, 3]
        assert [m.step for m in metrics.list_metrics(s, job_id, after_step=5, tail=True)] == [6, 7]


def test_a_cursor_reads_the_records_stored_after_it_whatever_their_step(db: Database) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (Node("a", 1, gpu_type("H100")),), T)
        job = jobs.submit(s, {"name": "m", "command": ["true"]}, alice, now=T)
        metrics.ingest(s, job, [{"step": 10, "loss": 1.0}])
        job_id = job.id
    with db.read_session() as s:
        cursor = metrics.cursor(s, job_id)
        assert metrics.cursor(s, "nosuchjob") == 0
    with db.session() as s:
        job = jobs.get_job(s, job_id, alice)
        later = [{"step": 10, "val": 2.0}, {"step": 5, "loss": 3.0}, {"step": 11, "loss": 0.9}]
        metrics.ingest(s, job, later)
    with db.read_session() as s:
        rows = metrics.list_metrics(s, job_id, after_id=cursor)
        assert [(m.step, sorted(m.data)) for m in rows] == [
            (10, ["val"]),
            (5, ["loss"]),
            (11, ["loss"]),
        ]
        assert [m.step for m in metrics.list_metrics(s, job_id, after_id=cursor, limit=1)] == [10]
        assert metrics.list_metrics(s, job_id, after_id=metrics.cursor(s, job_id)) == []


REPORTS = [
    {"step": 10, "loss": 2.5, "lr": 0.1, "note": "warm-up"},
    {"step": 20, "loss": 1.25, "lr": 0.1, "accuracy": 0.5},
    {"step": 30, "loss": 0.625, "lr": 0.01, "accuracy": 0.75},
]


def test_danlu_metrics_shows_follows_and_prints_json(tmp_path: Path) -> None:
    with live_server(tmp_path, fake_gpus="1x80GiB") as live, live.client() as c:
        job = c.post("/jobs", json=spec("m", "import time; time.sleep(30)")).json()
        wait_state(c, job["id"], "RUNNING")
        c.post(f"/jobs/{job['id']}/metrics", json={"metrics": REPORTS}).raise_for_status()
        got = c.get(f"/jobs/{job['id']}/metrics", params={"tail": "true", "limit": 1}).json()
        assert [m["step"] for m in got] == [30]
        read = c.get(f"/jobs/{job['id']}/metrics", params={"after_id": 0, "limit": 2})
        assert [m["step"] for m in read.json()] == [10, 20]
        cursor = int(read.headers["X-Danlu-Metrics-Cursor"])
        rest = c.get(f"/jobs/{job['id']}/metrics", params={"after_id": cursor})
        assert [m["step"] for m in rest.json()] == [30]
        flags = ["--url", live.url, "--token", live.token]
        runner = CliRunner()
        shown = runner.invoke(app, ["metrics", job["id"], "--tail", "2", *flags])
        assert shown.exit_code == 0, shown.output
        header = next(line for line in shown.stdout.splitlines() if "step" in line)
        assert [w for w in header.replace("┃", " ").split()] == [
            "step",
            "time",
            "loss",
            "lr",
            "accuracy",
        ]
        assert "0.625" in shown.stdout and "2.5" not in shown.stdout  # the last two only
        picked = runner.invoke(app, ["metrics", job["id"], "--keys", "accuracy", *flags])
        assert "accuracy" in picked.stdout and "loss" not in picked.stdout
        raw = runner.invoke(app, ["metrics", job["id"], "--json", *flags])
        assert [m["step"] for m in json.loads(raw.stdout)] == [10, 20, 30]
        c.post(f"/jobs/{job['id']}/cancel").raise_for_status()
        wait_state(c, job["id"], "CANCELLED")
        followed = runner.invoke(app, ["metrics", job["id"], "-f", "-n", "1", *flags])
        assert followed.exit_code == 0  # the job has ended: it prints what there is and returns
        assert followed.stdout.strip().splitlines()[-1].startswith("step 30  ")
        assert "loss 0.625  lr 0.01  accuracy 0.75" in followed.stdout
        other = c.post("/jobs", json=spec("quiet", "pass")).json()
        quiet = runner.invoke(app, ["metrics", other["id"], *flags])
        assert quiet.exit_code == 0 and "no metrics yet" in quiet.stdout
        missing = runner.invoke(app, ["metrics", "ffffffffffff", *flags])
        assert missing.exit_code == 2
