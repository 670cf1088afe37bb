"""One GPU closed to new work on its own: ``danlu cordon NODE --gpu N`` (no new work on that
GPU; its jobs run on), ``danlu drain NODE --gpu N`` (the jobs holding it are preempted by
checkpoint and resume on other GPUs), ``danlu uncordon NODE --gpu N``; the node's other GPUs
take work as before."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import live_server, user_and_nodes
from rich.console import Console
from typer.testing import CliRunner

from danlu.cli import jobs as jobs_cli
from danlu.cli.main import app
from danlu.config import load_settings
from danlu.core.cluster import Allocation, Cluster, Node, gpu_type
from danlu.core.errors import PlacementError, SpecError
from danlu.executors import FakeExecutor, FakeWorld
from danlu.sched.registry import make_policy
from danlu.sched.view import Plan, Start
from danlu.server.db import Database, User
from danlu.server.errors import NotFoundError
from danlu.server.reconcile import Reconciler
from danlu.server.services import cluster, events, jobs, nodes
from danlu.server.services.record import apply_plan
from danlu.server.services.view import build_snapshot

NOW = 1_000_000.0
A = Node("a", 4, gpu_type("H100"))


def _submit(db: Database, alice: User, name: str, gpus: int = 1, **extra: Any) -> str:
    body = {"name": name, "command": ["python", "train.py"], "resources": {"gpus": gpus}}
    with db.session() as s:
        return jobs.submit(s, {**body, **extra}, alice, now=NOW).id


@contextmanager
def _loop(db: Database, tmp_path: Path) -> Iterator[tuple[Reconciler, FakeWorld]]:
    world = FakeWorld()
    world.default = world.default.__class__(duration=10_000)
    executor = FakeExecutor(Cluster((A,)), world)
    loop = Reconciler(db, executor, load_settings(home=tmp_path), policy=make_policy("fifo"))
    try:
        yield loop, world
    finally:
        loop.stop()


def _gpus_of(db: Database, job_id: str) -> set[int]:
    with db.read_session() as s:
        return {int(share["gpu"]) for share in jobs.get_job(s, job_id).allocation or ()}


def _state(db: Database, job_id: str) -> str:
    with db.read_session() as s:
        return jobs.get_job(s, job_id).state


def test_a_cordoned_gpu_takes_no_new_work_until_uncordoned(db: Database, tmp_path: Path) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (A,), NOW)
    first = _submit(db, alice, "first")
    with _loop(db, tmp_path) as (loop, _):
        loop.run_once(now=NOW)
        (held,) = _gpus_of(db, first)
        spare = next(i for i in range(4) if i != held)
        with db.session() as s:
            node = nodes.cordon(s, "a", " fan noise ", gpu=held, now=NOW + 1)
            node = nodes.cordon(s, "a", "Xid 79", gpu=spare, now=NOW + 1)
            gpus = {g.index: g for g in node.gpus}
            assert (nodes.state(gpus[spare]), gpus[spare].cordon_reason) == ("cordoned", "Xid 79")
            assert (nodes.state(gpus[held]), gpus[held].cordon_reason) == ("cordoned", "fan noise")
            assert nodes.state(node) == "ready"  # the node itself stays open
        rest = [_submit(db, alice, f"j{i}") for i in range(3)]
        loop.run_once(now=NOW + 2)
        assert _state(db, first) == "RUNNING" and _gpus_of(db, first) == {held}  # runs on
        running = [j for j in rest if _state(db, j) == "RUNNING"]
        assert len(running) == 2
        assert set().union(*(_gpus_of(db, j) for j in running)) == set(range(4)) - {held, spare}
        (left,) = set(rest) - set(running)
        with db.read_session() as s:
            why = jobs.why(s, jobs.get_job(s, left), now=NOW + 2)
            assert f"cordoned (no new work): a GPU {min(held, spare)}, a GPU" in why, why
        with db.session() as s:  # uncordoning the node leaves its GPUs' cordons
            nodes.uncordon(s, "a")
        loop.run_once(now=NOW + 3)
        assert _state(db, left) == "PENDING"
        with db.session() as s:
            node = nodes.uncordon(s, "a", gpu=spare)
            assert {g.index for g in node.gpus if g.cordoned_at is not None} == {held}
        loop.run_once(now=NOW + 4)
        assert _state(db, left) == "RUNNING" and _gpus_of(db, left) == {spare}
        # a GPU the node does not have, and a later time, are refused
        with db.session() as s, pytest.raises(NotFoundError, match="a GPU 4"):
            nodes.cordon(s, "a", gpu=4)
        with db.session() as s, pytest.raises(SpecError, match="at: a cordon or drain of one GPU"):
            nodes.cordon(s, "a", gpu=0, at=NOW + 3600, now=NOW)


def test_a_drained_gpu_preempts_its_jobs_and_they_resume_on_others(
    db: Database, tmp_path: Path
) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (A,), NOW)
    movable = _submit(db, alice, "movable")
    pinned = _submit(db, alice, "pinned", preemptible=False)
    beside = _submit(db, alice, "beside")
    with _loop(db, tmp_path) as (loop, world):
        loop.run_once(now=NOW)
        on = _gpus_of(db, movable)
        with db.session() as s:
            nodes.cordon(s, "a", "ECC", drain=True, gpu=min(on), now=NOW + 1)
            nodes.cordon(s, "a", "ECC", drain=True, gpu=min(_gpus_of(db, pinned)), now=NOW + 1)
        report = loop.run_once(now=NOW + 2)
        assert report.preempted == [movable]
        with db.read_session() as s:
            reasons = [e.reason for e in events.list_events(s, movable)]
        assert f"its GPU (a GPU {min(on)}) is being drained" in reasons
        assert _state(db, pinned) == "RUNNING"  # not preemptible: runs to its end
        assert _state(db, beside) == "RUNNING"  # another GPU of the same node
        for t in range(3, 8):
            world.clock.advance(1)
            loop.run_once(now=NOW + t)
        assert _state(db, movable) == "RUNNING"
        assert not _gpus_of(db, movable) & (on | _gpus_of(db, pinned))
        assert loop.run_once(now=NOW + 9).preempted == []  # nothing is preempted twice


def test_a_plan_onto_a_closed_gpu_is_refused_and_the_cordon_outlives_a_refresh(
    db: Database,
) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (A,), NOW)
    job = _submit(db, alice, "j")
    with db.session() as s:
        nodes.cordon(s, "a", gpu=2, now=NOW)
    with db.session() as s:  # the executor reports the same node again
        cluster.replace_inventory(s, (A, Node("b", 1, gpu_type("H100"))), now=NOW)
    with db.session() as s:
        snap = build_snapshot(s, NOW)
        assert snap.view.closed_gpus == frozenset({2}) and not snap.view.closed_nodes
        bad = Plan(starts=(Start(job, Allocation.whole_gpus([(0, 1), (0, 2)])),))
        with pytest.raises(PlacementError, match=r"plan places \w+ on a GPU 2, closed to new"):
            apply_plan(s, bad, NOW, snap.withheld, snap)


def test_the_api_and_the_cli_close_and_open_one_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobs_cli, "console", Console(width=200))  # no wrapped table rows
    with live_server(tmp_path, fake_gpus="2x80GiB", start_loops=False) as live:
        with live.client() as c:
            name = c.get("/cluster/nodes").json()[0]["name"]
            r = c.post(f"/cluster/nodes/{name}/cordon", json={"reason": "Xid 48", "gpu": 1})
            assert r.status_code == 200, r.text
            got = r.json()
            assert got["state"] == "ready"
            assert [(g["state"], g["cordon_reason"]) for g in got["gpus"]] == [
                ("ready", ""),
                ("cordoned", "Xid 48"),
            ]
            assert got["gpus"][1]["cordoned_at"] is not None
            assert [g["uuid"] for g in got["gpus"]] == ["GPU-fake-0000", "GPU-fake-0001"]
            r = c.post(f"/cluster/nodes/{name}/drain", json={"gpu": 1})
            assert r.json()["gpus"][1]["state"] == "draining"
            # refused: a GPU the node lacks, a future time, a bad index
            assert c.post(f"/cluster/nodes/{name}/cordon", json={"gpu": 2}).status_code == 404
            later = c.post(f"/cluster/nodes/{name}/cordon", json={"gpu": 0, "at": 4e9})
            assert later.status_code == 422 and later.json()["error"]["field"] == "at", later.text
            bad = c.post(f"/cluster/nodes/{name}/cordon", json={"gpu": -1})
            assert bad.status_code == 422 and "gpu" in bad.text
            r = c.post(f"/cluster/nodes/{name}/uncordon", json={"gpu": 1})
            assert [g["state"] for g in r.json()["gpus"]] == ["ready", "ready"]
            assert c.post(f"/cluster/nodes/{name}/uncordon").json()["state"] == "ready"
        flags = ["--url", live.url, "--token", live.token]

        def danlu(*args: str) -> tuple[int, str]:
            result = CliRunner().invoke(app, [*args, *flags])
            return result.exit_code, result.stdout + result.stderr

        code, out = danlu("cordon", name, "--gpu", "0", "--reason", "row remap [pending]")
        assert code == 0 and f"node {name} GPU 0: cordoned (row remap [pending])" in out, out
        code, out = danlu("nodes")
        assert code == 0 and "0 [cordoned: row remap [pending]]" in out, out
        code, out = danlu("drain", name, "--gpu", "0", "--json")
        assert code == 0 and json.loads(out)["gpus"][0]["state"] == "draining"
        code, out = danlu("uncordon", name, "--gpu", "0")
        assert code == 0 and f"node {name} GPU 0: ready" in out, out
        code, out = danlu("cordon", name, "--gpu", "7")
        assert code == 2 and "GPU 7" in out and "not found" in out, out
        listed = httpx.get(
            f"{live.url}/api/v1/cluster/nodes", headers={"Authorization": f"Bearer {live.token}"}
        ).json()
        assert [g["state"] for g in listed[0]["gpus"]] == ["ready", "ready"]
