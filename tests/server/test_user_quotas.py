"""A user's own GPU quota (``danlu user set NAME --quota-gpus N``): the GPUs the user's
running jobs hold at once, in all projects, stay within it. A job whose start would go past
it waits with the reason, an elastic job grows only within it, and a plan that would go
past it is not recorded; other users' jobs are not held up."""

from __future__ import annotations

from pathlib import Path

from helpers import live_server, record_round, spec, user_and_nodes, wait_for
from typer.testing import CliRunner

from danlu.core.cluster import Allocation, Node, gpu_type
from danlu.core.state import JobState
from danlu.core.units import GiB
from danlu.sched.registry import make_policy
from danlu.sched.view import Plan, Resize, Start
from danlu.server.db import Database
from danlu.server.services import jobs, projects, users
from danlu.server.services.record import apply_plan
from danlu.server.services.view import build_snapshot

T = 1_000_000.0
NODE = Node("a", 4, gpu_type("H100"))
BIG = Node("a", 8, gpu_type("H100"))
BODY = {"command": ["python", "train.py"]}


def _gpu(g: int) -> dict[str, object]:
    return {"node": "a", "gpu": g, "milli": 1000, "memory": 80 * GiB}


def test_a_start_past_the_users_quota_waits_in_every_project(db: Database) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (BIG,), T)
        bob = users.create_user(s, "bob", now=T)
        projects.create_project(s, "vision", now=T)
        users.set_quota(s, "alice", 2)
        held = jobs.submit(s, {"name": "held", "resources": {"gpus": 1}, **BODY}, alice, now=T)
        jobs.change_state(s, held, JobState.RUNNING, "go", T, allocation=[_gpu(0)])
        one = {"name": "one", "project": "vision", "resources": {"gpus": 1}, **BODY}
        fits = jobs.submit(s, one, alice, now=T + 1).id
        over = jobs.submit(s, {**one, "name": "over"}, alice, now=T + 2).id
        grows = jobs.submit(
            s, {"name": "grows", "resources": {"gpus": "1..4"}, **BODY}, alice, now=T + 3
        ).id
        theirs = jobs.submit(
            s, {"name": "theirs", "resources": {"gpus": 2}, **BODY}, bob, now=T + 4
        ).id
    with db.session() as s:
        snap = build_snapshot(s, T + 10)
        assert set(snap.withheld) == set()  # each alone fits on top of the 1 GPU in use
        pending = {j.id: j.request for j in snap.view.pending}
        assert pending[grows].max_gpus == 1  # 1 in use + 1 more: the quota's 2
    applied = record_round(db, make_policy("fifo"), T + 10)
    started = {j.id for j in applied.started}
    # in submission order: one (2 of 2), then over and grows wait; bob's job is not held up
    assert started == {fits, theirs}
    assert applied.deferred[over] == "user 'alice' GPU quota: 2 in use + 1 asked > 2"
    with db.session() as s:
        snap = build_snapshot(s, T + 20)
        assert snap.withheld[over] == (
            "waiting for quota: user 'alice' GPU quota: 2 in use + 1 asked > 2"
        )
        assert grows in snap.withheld and snap.user_usage == {snap.user_quotas["alice"].id: 2.0}
        why = jobs.why(s, jobs.get_job(s, over), now=T + 20)
        assert "GPU quota" in why
        users.set_quota(s, "alice", None)  # lifted: both start
    applied = record_round(db, make_policy("fifo"), T + 30)
    assert {j.id for j in applied.started} == {over, grows}


def test_a_plan_past_the_quota_is_not_recorded(db: Database) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), T)
        users.set_quota(s, "alice", 2)
        elastic = jobs.submit(s, {"name": "e", "resources": {"gpus": "1..4"}, **BODY}, alice, now=T)
        jobs.change_state(s, elastic, JobState.RUNNING, "go", T, allocation=[_gpu(0)])
        a = jobs.submit(s, {"name": "a", **BODY}, alice, now=T).id
        b = jobs.submit(s, {"name": "b", **BODY}, alice, now=T).id
        elastic_id = elastic.id
    with db.session() as s:  # a policy that ignored the quota: the store refuses
        snap = build_snapshot(s, T + 10)
        assert [r.max_gpus for r in (j.request for j in snap.view.running)] == [2]
        grown = Allocation.whole_gpus([(0, 0), (0, 1), (0, 2)], memory=80 * GiB)
        plan = Plan(resizes=(Resize(elastic_id, grown),))
        applied = apply_plan(s, plan, T + 10, snap.withheld, snap)
        assert applied.deferred[elastic_id] == "user 'alice' GPU quota: 1 in use + 2 asked > 2"
    with db.session() as s:  # without a snapshot, the usage is read from the store
        starts = tuple(
            Start(job_id, Allocation.whole_gpus([(0, g)], memory=80 * GiB))
            for job_id, g in ((a, 1), (b, 2))
        )
        applied = apply_plan(s, Plan(starts=starts), T + 20)
        assert [j.id for j in applied.started] == [a]
        assert applied.deferred[b] == "user 'alice' GPU quota: 2 in use + 1 asked > 2"


def test_the_api_and_the_cli_set_and_show_a_users_quota(tmp_path: Path) -> None:
    from danlu.cli.main import app

    with live_server(tmp_path, fake_gpus="4x80GiB") as live, live.client() as c:
        c.post("/users", json={"name": "carol"}).raise_for_status()
        got = c.put("/users/carol", json={"quota_gpus": 1}).json()
        assert (got["quota_gpus"], got["os_user"]) == (1.0, None)
        assert c.put("/users/carol", json={"os_user": "carol2"}).json()["quota_gpus"] == 1.0
        bad = c.put("/users/carol", json={"quota_gpus": -1})
        assert bad.status_code == 422 and "quota_gpus" in bad.text
        token = c.post("/users/carol/tokens", json={"name": "t"}).json()["token"]
        with live.client(token) as carol:
            assert carol.put("/users/carol", json={"quota_gpus": 9}).status_code == 403
            first = carol.post("/jobs", json=spec("first", "import time; time.sleep(30)")).json()
            second = carol.post("/jobs", json=spec("second", "pass")).json()

            def quota_reason() -> str | None:
                reason = str(carol.get(f"/jobs/{second['id']}/why").json()["reason"])
                return reason if "GPU quota" in reason else None

            reason = wait_for(quota_reason)
            assert "user 'carol' GPU quota: 1 in use + 1 asked > 1" in reason
            carol.post(f"/jobs/{first['id']}/cancel").raise_for_status()
        flags = ["--url", live.url, "--token", live.token]
        runner = CliRunner()
        result = runner.invoke(app, ["user", "set", "carol", "--quota-gpus", "3", *flags])
        assert result.exit_code == 0 and "at most 3 GPUs" in result.stdout
        listed = runner.invoke(app, ["user", "ls", *flags])
        assert "GPU quota" in listed.stdout and "carol" in listed.stdout
        result = runner.invoke(app, ["user", "set", "carol", "--quota-gpus", "none", *flags])
        assert result.exit_code == 0 and "at most" not in result.stdout
        assert c.get("/users").json()[-1]["quota_gpus"] is None
        result = runner.invoke(app, ["user", "set", "carol", "--quota-gpus", "-2", *flags])
        assert result.exit_code == 2 and "--quota-gpus" in result.output
        result = runner.invoke(app, ["user", "set", "carol", *flags])
        assert result.exit_code == 2 and "nothing to change" in result.output


def test_users_me_shows_the_callers_stored_os_user_and_quota(tmp_path: Path, db_url: str) -> None:
    with (
        live_server(tmp_path, fake_gpus="1x80GiB", db_url=db_url, start_loops=False) as live,
        live.client() as c,
    ):
        c.post("/users", json={"name": "carol"}).raise_for_status()
        c.put("/users/carol", json={"os_user": "carol_os", "quota_gpus": 2}).raise_for_status()
        token = c.post("/users/carol/tokens", json={"name": "t"}).json()["token"]
        with live.client(token) as carol:
            me = carol.get("/users/me").json()
        assert me == {
            "name": "carol",
            "role": "user",
            "os_user": "carol_os",
            "quota_gpus": 2.0,
            "disabled_at": None,
            "disabled_by": None,
            "disable_reason": None,
        }
