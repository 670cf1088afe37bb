"""Nodes closed to new work: ``cordon`` (no new work there, its jobs run on), ``drain`` (its
preemptible jobs are preempted by checkpoint and resume elsewhere), ``uncordon``, and a node
cordoned by the reconcile loop after launches kept failing there for the node's reasons."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import live_server, spec, user_and_nodes, wait_for, wait_state
from interleave import Interleave
from rich.console import Console
from typer.testing import CliRunner

from danlu.cli import jobs as jobs_cli
from danlu.cli.main import app
from danlu.config import load_settings
from danlu.core.cluster import Allocation, Cluster, Node, gpu_type
from danlu.core.errors import PlacementError
from danlu.executors import FakeExecutor, FakeWorld, JobLaunch, NodeLaunchError
from danlu.sched.registry import make_policy
from danlu.sched.view import ClusterView, Plan, Start
from danlu.server.db import Database, User
from danlu.server.errors import NotFoundError
from danlu.server.reconcile import Reconciler
from danlu.server.services import cluster, events, jobs, nodes
from danlu.server.services.record import apply_plan
from danlu.server.services.view import build_snapshot

NOW = 1_000_000.0
A, B = Node("a", 2, gpu_type("H100")), Node("b", 2, gpu_type("H100"))


def _submit(db: Database, alice: User, name: str, gpus: int = 1, **extra: Any) -> str:
    body = {"name": name, "command": ["python", "train.py"], "resources": {"gpus": gpus}}
    with db.session() as s:
        return jobs.submit(s, {**body, **extra}, alice, now=NOW).id


@contextmanager
def _loop(db: Database, tmp_path: Path, **settings: Any) -> Iterator[tuple[Reconciler, FakeWorld]]:
    world = FakeWorld()
    world.default = world.default.__class__(duration=10_000)
    executor = FakeExecutor(Cluster((A, B)), world)
    loop = Reconciler(
        db, executor, load_settings(home=tmp_path, **settings), policy=make_policy("priority")
    )
    try:
        yield loop, world
    finally:
        loop.stop()


def _nodes_of(db: Database, job_id: str) -> set[str]:
    with db.read_session() as s:
        return {str(share["node"]) for share in jobs.get_job(s, job_id).allocation or ()}


def _state(db: Database, job_id: str) -> str:
    with db.read_session() as s:
        return jobs.get_job(s, job_id).state


def test_a_cordoned_node_takes_no_new_work_until_uncordoned(db: Database, tmp_path: Path) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (A, B), NOW)
    first = _submit(db, alice, "first")
    with _loop(db, tmp_path) as (loop, _):
        loop.run_once(now=NOW)
        on = _nodes_of(db, first).pop()
        other = "b" if on == "a" else "a"
        with db.session() as s:
            node = nodes.cordon(s, on, "  swap a fan  ", now=NOW + 1)
            assert (nodes.state(node), node.cordon_reason, node.cordoned_at) == (
                "cordoned",
                "swap a fan",
                NOW + 1,
            )
        rest = [_submit(db, alice, f"j{i}") for i in range(3)]
        loop.run_once(now=NOW + 2)
        assert _state(db, first) == "RUNNING" and _nodes_of(db, first) == {on}  # runs on
        running = [j for j in rest if _state(db, j) == "RUNNING"]
        assert len(running) == 2 and all(_nodes_of(db, j) == {other} for j in running)
        (left,) = set(rest) - set(running)
        assert _state(db, left) == "PENDING"  # a GPU of the cordoned node is free
        with db.read_session() as s:
            why = jobs.why(s, jobs.get_job(s, left), now=NOW + 2)
            assert why.endswith(f"; cordoned (no new work): {on}"), why
            assert "cordoned" not in jobs.why(s, jobs.get_job(s, first), now=NOW + 2)
        with db.session() as s:
            nodes.cordon(s, on, "", now=NOW + 3)  # again: when and why are kept
            listed = {n.name: n for n in cluster.list_nodes(s)}[on]
            assert (listed.cordoned_at, listed.cordon_reason) == (NOW + 1, "swap a fan")
            nodes.uncordon(s, on)
        loop.run_once(now=NOW + 4)
        assert _state(db, left) == "RUNNING" and _nodes_of(db, left) == {on}
        late = _submit(db, alice, "late")
        with db.read_session() as s:
            assert "cordoned" not in jobs.why(s, jobs.get_job(s, late), now=NOW + 4)


def test_a_drain_preempts_the_preemptible_jobs_and_they_resume_elsewhere(
    db: Database, tmp_path: Path
) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (A, B), NOW)
    movable = _submit(db, alice, "movable")
    pinned = _submit(db, alice, "pinned", preemptible=False)
    with db.session() as s:  # both on node a
        nodes.cordon(s, "b", now=NOW)
    with _loop(db, tmp_path) as (loop, world):
        loop.run_once(now=NOW)
        assert _nodes_of(db, movable) == _nodes_of(db, pinned) == {"a"}
        with db.session() as s:
            nodes.uncordon(s, "b")
            node = nodes.cordon(s, "a", "kernel update", drain=True, now=NOW + 1)
            assert nodes.state(node) == "draining"
        report = loop.run_once(now=NOW + 2)
        assert report.preempted == [movable]
        with db.read_session() as s:
            reasons = [e.reason for e in events.list_events(s, movable)]
            assert "its node a is being drained" in reasons
        assert _state(db, pinned) == "RUNNING"  # not preemptible: runs to its end
        for t in range(3, 8):
            world.clock.advance(1)
            loop.run_once(now=NOW + t)
        assert _state(db, movable) == "RUNNING" and _nodes_of(db, movable) == {"b"}
        assert _nodes_of(db, pinned) == {"a"}
        report = loop.run_once(now=NOW + 9)
        assert report.preempted == []  # nothing is preempted twice


def test_a_node_that_keeps_failing_launches_is_cordoned(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (A, B), NOW)
    with db.session() as s:  # every job goes to node a first
        nodes.cordon(s, "b", now=NOW)
    job = _submit(db, alice, "unlucky")
    with _loop(db, tmp_path, node_launch_failures=2) as (loop, _):
        real = loop.executor.submit
        broken = {"a"}

        def submit(launch: JobLaunch) -> Any:
            names = {loop.executor.inventory().nodes[slot.node].name for slot in launch.gpus}
            if names & broken:
                raise NodeLaunchError("no space left on /scratch")
            return real(launch)

        monkeypatch.setattr(loop.executor, "submit", submit)
        report = loop.run_once(now=NOW)
        assert report.cordoned == [] and _state(db, job) == "PENDING"
        with db.session() as s:
            nodes.uncordon(s, "b")  # room elsewhere from now on
        with db.read_session() as s:
            assert {n.name: n.launch_failures for n in cluster.list_nodes(s)} == {"a": 1, "b": 0}
        t = NOW
        while _state(db, job) != "RUNNING" or not _nodes_of(db, job):
            t += 20  # past the job's backoff
            report = loop.run_once(now=t)
            if report.cordoned:
                assert report.cordoned == ["a"]
            assert t < NOW + 400
        assert _nodes_of(db, job) == {"b"}
        with db.read_session() as s:
            a = {n.name: n for n in cluster.list_nodes(s)}["a"]
            assert nodes.state(a) == "cordoned" and a.launch_failures == 2
            assert a.cordon_reason == (
                "2 launches in a row failed for the node's reasons "
                "(last: no space left on /scratch)"
            )
        broken.clear()
        with db.session() as s:
            nodes.uncordon(s, "a")
        second = _submit(db, alice, "second", gpus=2)  # only node a has 2 GPUs free
        loop.run_once(now=t + 1)
        assert _nodes_of(db, second) == {"a"}


@pytest.mark.parametrize(
    ("blamed", "counted"), [(("b",), {"a": 0, "b": 1}), ((), {"a": 0, "b": 0})]
)
def test_a_launch_failure_counts_only_against_the_nodes_the_executor_names(
    db: Database,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    blamed: tuple[str, ...],
    counted: dict[str, int],
) -> None:
    """A job over both nodes that Slurm could not start because node b is down counts
    against b alone; a failure the executor blames on no node (its own files) against none."""
    with db.session() as s:
        alice = user_and_nodes(s, (A, B), NOW)
    job = _submit(db, alice, "wide", gpus=4)
    with _loop(db, tmp_path) as (loop, _):

        def submit(launch: JobLaunch) -> Any:
            raise NodeLaunchError("Slurm reports node b as DOWN", nodes=blamed)

        monkeypatch.setattr(loop.executor, "submit", submit)
        loop.run_once(now=NOW)
        assert _state(db, job) == "PENDING"
        with db.read_session() as s:
            assert {n.name: n.launch_failures for n in cluster.list_nodes(s)} == counted


def test_a_launch_that_goes_through_starts_the_count_over(db: Database) -> None:
    with db.session() as s:
        user_and_nodes(s, (A, B), NOW)
        assert nodes.launch_failed(s, {"a", "b"}, "EMFILE", limit=3, now=NOW) == []
        assert nodes.launch_failed(s, {"a"}, "EMFILE", limit=3, now=NOW) == []
        nodes.launched(s, {"a"})
        assert nodes.launch_failed(s, {"a", "b"}, "EMFILE", limit=3, now=NOW) == []
        assert nodes.launch_failed(s, {"b"}, "EMFILE", limit=3, now=NOW) == ["b"]
        assert nodes.launch_failed(s, {"b"}, "EMFILE", limit=0, now=NOW) == []  # already
    with db.read_session() as s:
        counts = {n.name: (n.launch_failures, nodes.state(n)) for n in cluster.list_nodes(s)}
        assert counts == {"a": (1, "ready"), "b": (4, "cordoned")}
    with db.session() as s:
        assert nodes.launch_failed(s, {"a"}, "x", limit=0, now=NOW) == []  # 0: never
        with pytest.raises(NotFoundError) as unknown:
            nodes.cordon(s, "c")
        assert str(unknown.value) == (
            "node 'c' not found (danlu nodes, GET /cluster/nodes, lists them)"
        )


def test_a_plan_onto_a_closed_node_is_refused(db: Database) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (A, B), NOW)
    job = _submit(db, alice, "j")
    with db.session() as s:
        nodes.cordon(s, "a", now=NOW)
    with db.session() as s:
        snap = build_snapshot(s, NOW)
        assert snap.view.closed_nodes == frozenset({0})
        bad = Plan(starts=(Start(job, Allocation.whole_gpus([(0, 0)])),))
        with pytest.raises(PlacementError, match=r"plan places \w+ on a, closed to new work"):
            apply_plan(s, bad, NOW, snap.withheld, snap)


class _Blind:
    """A policy that ignores closed nodes: always node a, GPU 0."""

    name = "blind"

    def schedule(self, view: ClusterView) -> Plan:
        first = view.pending[:1]
        return Plan(starts=tuple(Start(j.id, Allocation.whole_gpus([(0, 0)])) for j in first))


def test_a_policy_that_ignores_closed_nodes_falls_back_to_fifo(
    db: Database, tmp_path: Path
) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (A, B), NOW)
        nodes.cordon(s, "a", now=NOW)
    job = _submit(db, alice, "j")
    world = FakeWorld()
    loop = Reconciler(
        db,
        FakeExecutor(Cluster((A, B)), world),
        load_settings(home=tmp_path),
        policy=_Blind(),  # type: ignore[arg-type]
    )
    try:
        report = loop.run_once(now=NOW)
        assert any("closed to new work" in e and "ran fifo" in e for e in report.errors)
        assert _nodes_of(db, job) == {"b"}
    finally:
        loop.stop()


def test_the_api_cordons_drains_and_uncordons(tmp_path: Path) -> None:
    with live_server(tmp_path, fake_gpus="2x80GiB", start_loops=False) as live, live.client() as c:
        listed = c.get("/cluster/nodes").json()
        name = listed[0]["name"]
        assert (listed[0]["state"], listed[0]["cordoned_at"], listed[0]["launch_failures"]) == (
            "ready",
            None,
            0,
        )
        r = c.post(f"/cluster/nodes/{name}/cordon", json={"reason": "bad DIMM"})
        assert r.status_code == 200, r.text
        assert (r.json()["state"], r.json()["cordon_reason"]) == ("cordoned", "bad DIMM")
        assert len(r.json()["gpus"]) == 2
        r = c.post(f"/cluster/nodes/{name}/drain", json={})
        assert (r.json()["state"], r.json()["cordon_reason"]) == ("draining", "bad DIMM")
        metrics = httpx.get(f"{live.url}/metrics").text
        assert 'danlu_nodes{state="draining"} 1.0' in metrics
        assert 'danlu_nodes{state="ready"} 0.0' in metrics
        r = c.post(f"/cluster/nodes/{name}/uncordon")
        assert (r.json()["state"], r.json()["cordoned_at"]) == ("ready", None)
        assert c.get("/cluster/nodes").json()[0]["state"] == "ready"
        # refused: an unknown node, a reason too long, a field not known, a non-admin
        assert c.post("/cluster/nodes/nope/cordon", json={}).status_code == 404
        assert c.post("/cluster/nodes/..%2Fx/cordon", json={}).status_code == 404
        long = c.post(f"/cluster/nodes/{name}/cordon", json={"reason": "x" * 501})
        assert long.status_code == 422 and "reason" in long.text
        extra = c.post(f"/cluster/nodes/{name}/cordon", json={"why": "typo"})
        assert extra.status_code == 422 and "why" in extra.text
        c.post("/users", json={"name": "bob"}).raise_for_status()
        token = c.post("/users/bob/tokens", json={"name": "t"}).json()["token"]
        with live.client(token) as bob:
            assert bob.post(f"/cluster/nodes/{name}/cordon", json={}).status_code == 403
            assert bob.get("/cluster/nodes").json()[0]["state"] == "ready"
        job = c.post("/jobs", json=spec("j", "pass")).json()
        assert job["state"] == "PENDING"


def test_the_cli_cordons_drains_and_uncordons(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobs_cli, "console", Console(width=200))  # no wrapped table rows
    with live_server(tmp_path, fake_gpus="1x80GiB", start_loops=False) as live:
        flags = ["--url", live.url, "--token", live.token]

        def danlu(*args: str) -> tuple[int, str]:
            result = CliRunner().invoke(app, [*args, *flags])
            return result.exit_code, result.stdout + result.stderr

        name = httpx.get(
            f"{live.url}/api/v1/cluster/nodes", headers={"Authorization": f"Bearer {live.token}"}
        ).json()[0]["name"]
        code, out = danlu("cordon", name, "--reason", "bad [DIMM]")
        assert code == 0 and f"node {name}: cordoned (bad [DIMM])" in out, out
        code, out = danlu("nodes")
        assert code == 0 and "[cordoned: bad [DIMM]]" in out, out
        code, out = danlu("drain", name, "--json")
        assert code == 0 and json.loads(out)["state"] == "draining"
        code, out = danlu("uncordon", name)
        assert code == 0 and f"node {name}: ready" in out
        code, out = danlu("nodes")
        assert "cordoned" not in out and "draining" not in out
        code, out = danlu("cordon", "nope")
        assert code == 2 and "node 'nope' not found" in out


def test_a_drained_node_checkpoints_its_job_which_resumes_once_uncordoned(
    tmp_path: Path,
) -> None:
    """Real processes: the job on the drained node gets SIGTERM, checkpoints and exits; it
    waits while the only node is drained, and resumes from its checkpoint once uncordoned."""
    from test_reconcile import CHECKPOINTING

    out = tmp_path / "out.txt"
    with (
        live_server(tmp_path, fake_gpus="1x80GiB", preempt_grace=10) as live,
        live.client() as c,
    ):
        name = c.get("/cluster/nodes").json()[0]["name"]
        job = c.post(
            "/jobs",
            json={"name": "long", "command": [sys.executable, "-c", CHECKPOINTING, str(out)]},
        ).json()
        wait_state(c, job["id"], "RUNNING")
        wait_for(lambda: out.exists() and "resume 0" in out.read_text())
        assert c.post(f"/cluster/nodes/{name}/drain", json={"reason": "reboot"}).status_code == 200
        wait_for(lambda: "checkpoint" in out.read_text())
        waiting = wait_state(c, job["id"], "PENDING", timeout=30)
        assert waiting["preemptions"] == 1
        why = c.get(f"/jobs/{job['id']}/why").json()["reason"]
        assert why.endswith(f"; cordoned (no new work): {name}"), why
        time.sleep(0.5)  # a few passes: it stays off the drained node
        assert c.get(f"/jobs/{job['id']}").json()["state"] == "PENDING"
        assert c.post(f"/cluster/nodes/{name}/uncordon").status_code == 200
        done = wait_state(c, job["id"], "SUCCEEDED", timeout=40)
        events = c.get(f"/jobs/{job['id']}/events").json()
    lines = out.read_text().split("\n")
    checkpoint = next(int(x.split()[1]) for x in lines if x.startswith("checkpoint"))
    assert [int(x.split()[1]) for x in lines if x.startswith("resume")] == [0, checkpoint]
    assert "done 60" in lines and done["restarts"] == 0
    assert "its node " + name + " is being drained" in [e["reason"] for e in events]


def test_a_scheduled_drain_waits_for_its_time_then_preempts(db: Database, tmp_path: Path) -> None:
    """A maintenance window: node a is to be drained at NOW + 100. Until then it takes work
    and its job runs on; from then on it is drained as of that time, with its reason."""
    with db.session() as s:
        alice = user_and_nodes(s, (A, B), NOW)
        nodes.cordon(s, "b", now=NOW)  # everything goes to a
    first = _submit(db, alice, "first")
    with _loop(db, tmp_path) as (loop, world):
        loop.run_once(now=NOW)
        assert _nodes_of(db, first) == {"a"}
        with db.session() as s:
            node = nodes.cordon(s, "a", " new PSU ", drain=True, at=NOW + 100, now=NOW + 1)
            assert (nodes.state(node), node.close_at, node.close_drain) == (
                "ready",
                NOW + 100,
                True,
            )
            assert node.close_reason == "new PSU"
        second = _submit(db, alice, "second")
        report = loop.run_once(now=NOW + 50)
        assert report.closed_nodes == [] and report.preempted == []
        assert _nodes_of(db, second) == {"a"}  # still open: work may start there
        report = loop.run_once(now=NOW + 120)
        assert report.closed_nodes == ["a"]
        assert sorted(report.preempted) == sorted([first, second])
        with db.read_session() as s:
            (row,) = [n for n in cluster.list_nodes(s) if n.name == "a"]
            assert (nodes.state(row), row.cordoned_at, row.cordon_reason) == (
                "draining",
                NOW + 100,
                "new PSU",
            )
            assert (row.close_at, row.close_reason) == (None, "")
        world.clock.advance(5)
        assert loop.run_once(now=NOW + 130).closed_nodes == []  # applied once


def test_a_schedule_is_replaced_dropped_by_uncordon_and_a_past_time_is_now(
    db: Database,
) -> None:
    with db.session() as s:
        user_and_nodes(s, (A, B), NOW)
        nodes.cordon(s, "a", "x", drain=True, at=NOW + 100, now=NOW)
        node = nodes.cordon(s, "a", "", at=NOW + 200, now=NOW)  # now a plain cordon, later
        assert (node.close_at, node.close_drain, node.close_reason) == (NOW + 200, False, "")
        assert nodes.close_due(s, NOW + 199) == []
        assert nodes.close_due(s, NOW + 200) == ["a"]
        assert (nodes.state(node), node.cordon_reason) == ("cordoned", "scheduled cordon")
        nodes.cordon(s, "b", drain=True, at=NOW + 50, now=NOW)
        nodes.uncordon(s, "b")
        assert nodes.close_due(s, NOW + 100) == []
        now_node = nodes.cordon(s, "b", "late", at=NOW - 10, now=NOW)  # the past: at once
        assert (nodes.state(now_node), now_node.cordoned_at, now_node.close_at) == (
            "cordoned",
            NOW,
            None,
        )


def test_why_names_no_node_or_gpu_gone_from_the_inventory(db: Database) -> None:
    """A node or GPU an admin closed keeps its row while missing from the inventory (so the
    close outlives a reboot); nothing is scheduled there, and a pending job's reason named it
    among the nodes closed to new work."""
    with db.session() as s:
        alice = user_and_nodes(s, (A, B, Node("c", 2, gpu_type("H100"))), NOW)
        nodes.cordon(s, "a", "fan", now=NOW)
        nodes.cordon(s, "b", "ecc", gpu=1, now=NOW)
        nodes.cordon(s, "c", "psu", now=NOW)
    waiting = _submit(db, alice, "big", gpus=2)
    with db.read_session() as s:
        why = jobs.why(s, jobs.get_job(s, waiting), now=NOW)
        assert why.endswith("; cordoned (no new work): a, c, b GPU 1"), why
    with db.session() as s:  # a and b's GPU 1 leave the inventory (a reboot, off the bus)
        cluster.replace_inventory(
            s, [Node("b", 1, gpu_type("H100")), Node("c", 2, gpu_type("H100"))], fake=True
        )
    with db.read_session() as s:
        why = jobs.why(s, jobs.get_job(s, waiting), now=NOW)
        assert why.endswith("; cordoned (no new work): c"), why


def test_a_close_done_now_drops_the_schedule_it_covers(db: Database) -> None:
    """A drain now (``--at`` a past time, or none) leaves no later cordon or drain to come
    (``danlu nodes`` showed one, and it came, taking the reason given now); a cordon now
    leaves a scheduled drain, the maintenance it was set for."""
    with db.session() as s:
        user_and_nodes(s, (A, B), NOW)
        nodes.cordon(s, "a", "window", drain=True, at=NOW + 100, now=NOW)
        node = nodes.cordon(s, "a", "disk", drain=True, at=NOW - 10, now=NOW)
        assert (nodes.state(node), node.close_at) == ("draining", None)
        assert nodes.close_due(s, NOW + 100) == []
        assert node.cordon_reason == "disk"
        nodes.cordon(s, "b", "window", drain=True, at=NOW + 100, now=NOW)
        node = nodes.cordon(s, "b", "first", now=NOW)
        assert (nodes.state(node), node.close_at, node.close_drain) == ("cordoned", NOW + 100, True)
        assert nodes.close_due(s, NOW + 100) == ["b"]
        assert (nodes.state(node), node.cordon_reason) == ("draining", "window")
        nodes.uncordon(s, "b")
        nodes.cordon(s, "b", "later", at=NOW + 300, now=NOW + 200)
        node = nodes.cordon(s, "b", "now", now=NOW + 200)
        assert (node.close_at, node.cordon_reason) == (None, "now")


def test_an_uncordon_while_a_schedule_is_applied_drops_it(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An admin's uncordon commits while the reconcile loop's ``close_due`` has read the due
    nodes (PostgreSQL): it waits for their row locks, then opens the node; the schedule it
    dropped is not applied after it."""
    with db.session() as s:
        user_and_nodes(s, (A, B), NOW)
        nodes.cordon(s, "a", "maintenance", drain=True, at=NOW + 100, now=NOW)
    race = Interleave(db)
    race.pause_at(monkeypatch, nodes, "_close", before=True)  # about to close the due nodes
    outcome = race.run(lambda s: nodes.close_due(s, NOW + 100), lambda s: nodes.uncordon(s, "a"))
    assert outcome.first_error is None and outcome.second_error is None
    assert outcome.first == ["a"]
    with db.read_session() as s:
        node = next(n for n in cluster.list_nodes(s) if n.name == "a")
        found = (nodes.state(node), node.cordoned_at, node.close_at, node.cordon_reason)
    assert found == ("ready", None, None, "")
    assert outcome.second_waited == (db.dialect == "postgresql")  # for close_due's row lock
    with db.session() as s:  # nothing is due any more
        assert nodes.close_due(s, NOW + 200) == []


def test_the_api_and_the_cli_schedule_a_drain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobs_cli, "console", Console(width=200))  # no wrapped table rows
    with live_server(tmp_path, fake_gpus="1x80GiB", start_loops=False) as live, live.client() as c:
        name = c.get("/cluster/nodes").json()[0]["name"]
        at = time.time() + 7200
        r = c.post(f"/cluster/nodes/{name}/drain", json={"reason": "firmware", "at": at})
        assert r.status_code == 200, r.text
        node = r.json()
        assert (node["state"], node["close_action"], node["close_reason"]) == (
            "ready",
            "drain",
            "firmware",
        )
        assert node["close_at"] == pytest.approx(at)
        bad = c.post(f"/cluster/nodes/{name}/cordon", json={"at": -1})
        assert bad.status_code == 422 and "at" in bad.text
        # a time in milliseconds (JavaScript's Date.now()) is past the calendar: refused
        in_ms = c.post(f"/cluster/nodes/{name}/drain", json={"at": time.time() * 1000})
        assert in_ms.status_code == 422 and "milliseconds" in in_ms.text, in_ms.text
        flags = ["--url", live.url, "--token", live.token]

        def danlu(*args: str) -> tuple[int, str]:
            result = CliRunner().invoke(app, [*args, *flags])
            return result.exit_code, result.stdout + result.stderr

        code, out = danlu("nodes")
        assert code == 0 and "[drain at " in out and "firmware]" in out, out
        assert "(in 2h)" in out or "(in 1h59m)" in out, out
        code, out = danlu("cordon", name, "--at", "+30m", "--reason", "reboot")
        assert code == 0 and f"node {name}: ready; cordon at " in out and ": reboot" in out
        assert c.get("/cluster/nodes").json()[0]["close_at"] == pytest.approx(
            time.time() + 1800, abs=60
        )
        code, out = danlu("drain", name, "--at", "soon")
        assert code == 2 and "--at: 'soon' is not a time" in out
        code, out = danlu("uncordon", name)
        assert code == 0 and c.get("/cluster/nodes").json()[0]["close_at"] is None
