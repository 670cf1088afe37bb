"""A spec's ``depends_on``: a job waits for other jobs (``succeeded``, ``failed``, ``finished``,
``started``), is passed by until their conditions hold, and is cancelled once one never can;
the ids are checked at submission, and ``danlu submit --after`` adds them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import live_server, spec, user_and_nodes, wait_state

from danlu.config import load_settings
from danlu.core.cluster import Cluster, Node, gpu_type
from danlu.core.errors import SpecError
from danlu.executors import FakeExecutor, FakeWorld, Outcome
from danlu.sched.registry import make_policy
from danlu.server.db import Database
from danlu.server.reconcile import Reconciler
from danlu.server.routes.schemas import job_out
from danlu.server.services import events, jobs, users
from danlu.server.services.view import build_snapshot

NOW = 1_000_000.0
NODE = Node("a", 2, gpu_type("H100"))
BODY: dict[str, Any] = {"command": ["python", "train.py"], "resources": {"gpus": 1}}


def _job(name: str, *after: str | dict[str, str]) -> dict[str, Any]:
    return {"name": name, **BODY, "depends_on": list(after)}


def test_a_pipeline_runs_in_order_and_what_can_never_run_is_cancelled(
    db: Database, tmp_path: Path
) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        prep = jobs.submit(s, _job("prep"), alice, now=NOW).id
        once = _job("train", prep[:6]) | {"max_restarts": 0}  # a prefix of prep's id
        train = jobs.submit(s, once, alice, now=NOW).id
        report = jobs.submit(s, _job("report", {"job": train, "condition": "finished"}), alice)
        cleanup = jobs.submit(s, _job("cleanup", {"job": prep, "condition": "failed"}), alice)
        after_cleanup = jobs.submit(s, _job("after-cleanup", cleanup.id), alice, now=NOW).id
        monitor = jobs.submit(s, _job("monitor", {"job": prep, "condition": "started"}), alice)
        stored = jobs.get_job(s, train)
        assert stored.spec["depends_on"] == [{"job": prep, "condition": "succeeded"}]
        assert job_out(stored)["waiting_on"] == prep
        assert stored.pending_reason == f"waiting for job {prep} (prep) to succeed"
        ids = {"report": report.id, "cleanup": cleanup.id, "monitor": monitor.id}
    world = FakeWorld()
    world.script(prep, duration=10)
    world.script(ids["monitor"], duration=3)
    world.script(train, duration=5, outcome=Outcome.FAILED, exit_code=1)
    executor = FakeExecutor(Cluster((NODE,)), world)
    loop = Reconciler(db, executor, load_settings(home=tmp_path), policy=make_policy("fifo"))
    try:
        # two GPUs free, but only prep may start; monitor waits for it to start
        first = loop.run_once(now=NOW + 1)
        assert first.launched == [prep] and first.ready == [] and first.abandoned == []
        with db.read_session() as s:
            assert [p.id for p in build_snapshot(s, NOW + 1).view.pending] == []
            why = jobs.why(s, jobs.get_job(s, train), now=NOW + 1)
            assert why == f"waiting for job {prep} (prep) to succeed (it is RUNNING): not " + (
                "scheduled until it does"
            )
        second = loop.run_once(now=NOW + 2)
        assert second.ready == [ids["monitor"]] and second.launched == [ids["monitor"]]
        for t in range(3, 14):
            world.clock.advance(1)
            loop.run_once(now=NOW + t)
        with db.read_session() as s:
            assert jobs.get_job(s, prep).state == "SUCCEEDED"
            assert jobs.get_job(s, train).state == "RUNNING"
            for cancelled in (ids["cleanup"], after_cleanup):  # a chain, in one pass
                assert jobs.get_job(s, cancelled).state == "CANCELLED"
            reason = events.list_events(s, ids["cleanup"])[-1].reason
            assert reason == (
                f"the job {prep} (prep) it depends on ended SUCCEEDED and will never fail"
            )
            reason = events.list_events(s, after_cleanup)[-1].reason
            assert reason == (
                f"the job {ids['cleanup']} (cleanup) it depends on ended CANCELLED and will "
                "never succeed"
            )
            assert jobs.get_job(s, ids["report"]).state == "PENDING"
        for t in range(14, 30):  # train fails for good: report ran after it all the same
            world.clock.advance(1)
            loop.run_once(now=NOW + t)
        with db.read_session() as s:
            assert jobs.get_job(s, train).state == "FAILED"
            done = jobs.get_job(s, ids["report"])
            assert (done.state, done.waiting_on) == ("SUCCEEDED", None)
    finally:
        loop.stop()


def test_the_dependencies_are_checked_at_submission(db: Database) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        bob = users.create_user(s, "bob", now=NOW)
        admin = users.create_user(s, "root", role="admin", now=NOW)
        mine = jobs.submit(s, _job("mine"), alice, now=NOW).id
        theirs = jobs.submit(s, _job("theirs"), bob, now=NOW).id
        failed = jobs.submit(s, _job("failed"), alice, now=NOW).id
        jobs.cancel_job(s, failed, alice, now=NOW)
        refused = {
            "depends_on.0.job: no job, sweep or job array 'abcdef012345'": ["abcdef012345"],
            f"depends_on.1.job: {theirs} belongs to another user": [mine, theirs],
            f"depends_on.0.job: the job {failed} (failed) it depends on ended CANCELLED and "
            "will never succeed: this job could never run": [failed],
            "depends_on.0.job: 'xyz' is not a job id": ["xyz"],
        }
        for message, after in refused.items():
            with pytest.raises(SpecError) as caught:
                jobs.submit(s, _job("refused", *after), alice, now=NOW)
            assert str(caught.value).startswith(message), caught.value
        # an admin may name anyone's job; conditions already met leave nothing to wait for
        ok = jobs.submit(s, _job("ok", theirs, {"job": failed, "condition": "failed"}), admin)
        assert ok.waiting_on == theirs
        ready = jobs.submit(s, _job("ready", {"job": failed, "condition": "finished"}), alice)
        assert ready.waiting_on is None
        assert ready.pending_reason == "waiting for the next scheduling round"
        assert [p.id for p in build_snapshot(s, NOW).view.pending] == [mine, theirs, ready.id]


def test_the_api_and_the_cli_submit_with_dependencies(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from danlu.cli.main import app

    with live_server(tmp_path, fake_gpus="2x80GiB", policy="fifo") as live, live.client() as c:
        first = c.post("/jobs", json=spec("first", "import time; time.sleep(3)")).json()
        r = c.post("/jobs", json=spec("bad", "pass", depends_on=[{"job": "ffff0000ffff"}]))
        assert r.status_code == 422, r.text
        assert r.json()["error"]["field"] == "depends_on.0.job"
        path = tmp_path / "second.yaml"
        path.write_text(json.dumps(spec("second", "pass")))
        flags = ["--url", live.url, "--token", live.token]
        result = CliRunner().invoke(app, ["submit", str(path), "--after", first["id"], *flags])
        assert result.exit_code == 0, result.stderr
        printed = " ".join(result.stdout.split())  # as wrapped to the terminal's width
        assert f"PENDING, waiting for job {first['id']} (first) to succeed" in printed
        second = c.get("/jobs", params={"limit": 1}).json()[0]
        assert second["waiting_on"] == first["id"]
        bad = CliRunner().invoke(app, ["submit", str(path), "--after", "abcd:soon", *flags])
        assert bad.exit_code != 0 and "--after 'abcd:soon'" in bad.stderr  # names the flag
        waited = CliRunner().invoke(
            app, ["wait", first["id"], second["id"], "--poll", "0.2", "--json", *flags]
        )
        assert waited.exit_code == 0, waited.stderr  # both succeeded
        assert [j["state"] for j in json.loads(waited.stdout)] == ["SUCCEEDED", "SUCCEEDED"]
        done = wait_state(c, second["id"], "SUCCEEDED")
        assert done["waiting_on"] is None
        failing = tmp_path / "failing.yaml"
        failing.write_text(json.dumps(spec("failing", "raise SystemExit(3)", max_restarts=0)))
        failed = CliRunner().invoke(app, ["submit", str(failing), "--wait", *flags])
        assert failed.exit_code == 1, failed.stderr
        assert "(failing): FAILED (exit 3)" in " ".join(failed.stdout.split())
        assert done["started_at"] >= c.get(f"/jobs/{first['id']}").json()["finished_at"]
