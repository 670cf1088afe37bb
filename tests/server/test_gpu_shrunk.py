"""A GPU the inventory reports smaller than the jobs placed on it hold (the same home
started with ``--fake-gpus 2x40GiB`` after ``2x80GiB``, a node whose GPUs were split):
the jobs run on, the over-commit is logged and told by the job's ``why``, nothing new is
placed on the GPU while it lasts, and a queued job that can no longer fit says so."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from helpers import record_round, user_and_nodes

from danlu.config import load_settings
from danlu.core.cluster import Cluster, GpuType, Node
from danlu.core.units import GiB
from danlu.executors import FakeExecutor, FakeWorld, Script
from danlu.sched.registry import make_policy
from danlu.server import app as app_module
from danlu.server.db import Database
from danlu.server.reconcile import Reconciler
from danlu.server.services import cluster, jobs

NOW = 1_000_000.0
BIG = Cluster((Node("n", 2, GpuType("fake-80", 80 * GiB)),))
SMALL = Cluster((Node("n", 2, GpuType("fake-40", 40 * GiB)),))


def _body(name: str, gpus: int, memory: str) -> dict[str, object]:
    return {
        "name": name,
        "command": ["python", "train.py"],
        "resources": {"gpus": gpus, "gpu_memory": memory},
    }


def test_a_gpu_read_smaller_keeps_its_job_reports_it_and_takes_nothing_new(
    db: Database, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, BIG.nodes, NOW)
        big = jobs.submit(s, _body("big", 1, "65GiB"), alice, now=NOW).id
    world = FakeWorld()
    world.default = Script(duration=1_000)
    settings = load_settings(home=tmp_path, inventory_refresh=30.0)
    loop = Reconciler(db, FakeExecutor(BIG, world), settings, policy=make_policy("fifo"))
    try:
        assert loop.run_once(now=NOW + 1).launched == [big]
        with db.read_session() as s:
            (share,) = jobs.get_job(s, big).allocation or []
        gpu = int(share["gpu"])
        world.cluster = SMALL  # the node's GPUs are read again at 40 GiB
        with db.session() as s:
            two = jobs.submit(s, _body("two", 2, "10GiB"), alice, now=NOW + 2).id
        with caplog.at_level(logging.WARNING, logger="danlu.server.inventory"):
            report = loop.run_once(now=NOW + 40)
        assert report.inventory == ["~n"]
        said = [r.getMessage() for r in caplog.records if "its jobs hold" in r.getMessage()]
        assert len(said) == 1
        assert f"GPU n:{gpu} has 40.0GiB, its jobs hold 65.0GiB ({big})" in said[0]
        assert "nothing new is placed on it" in said[0]
        loop.run_once(now=NOW + 41)
        with db.read_session() as s:
            job = jobs.get_job(s, big)
            assert job.state == "RUNNING" and job.allocation == [share]  # alive: it runs on
            reason = jobs.why(s, job, now=NOW + 41)
            # the two-GPU job would need the over-committed GPU: it waits
            assert jobs.get_job(s, two).state == "PENDING"
            over = cluster.over_committed(s)
        assert f"GPU n:{gpu} has 40.0GiB, its jobs hold 65.0GiB" in reason
        assert "nothing new is placed there" in reason
        assert [(o.node, o.gpu, o.held, o.jobs) for o in over] == [("n", gpu, 65 * GiB, (big,))]
        # the big job ends: the GPU is free again, and the two-GPU job starts on both
        world.clock.advance(1_000)
        loop.run_once(now=NOW + 50)
        loop.run_once(now=NOW + 51)
        with db.read_session() as s:
            assert jobs.get_job(s, big).state == "SUCCEEDED"
            assert jobs.get_job(s, two).state == "RUNNING"
            assert cluster.over_committed(s) == []
    finally:
        loop.stop()


def test_a_control_plane_started_on_smaller_gpus_reports_the_jobs_over_them(
    db: Database, db_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, BIG.nodes, NOW)
        ids = [jobs.submit(s, _body(f"j{i}", 1, "30GiB"), alice, now=NOW).id for i in range(3)]
    record_round(db, make_policy("fifo"), NOW + 1)  # two share one 80 GiB GPU
    with db.read_session() as s:
        placed = {j: (jobs.get_job(s, j).allocation or [])[0]["gpu"] for j in ids}
    shared = next(g for g in placed.values() if list(placed.values()).count(g) == 2)
    on_it = tuple(sorted(j for j, g in placed.items() if g == shared))
    settings = load_settings(home=tmp_path / "home", database_url=db_url)
    with caplog.at_level(logging.WARNING, logger="danlu.server.inventory"):
        app = app_module.create_app(
            settings, executor=FakeExecutor(SMALL, FakeWorld()), start_loops=False
        )
    try:
        said = [r.getMessage() for r in caplog.records if "its jobs hold" in r.getMessage()]
        # 30 GiB alone fits a 40 GiB GPU: only the shared one is named
        assert said == [
            f"GPU n:{shared} has 40.0GiB, its jobs hold 60.0GiB ({', '.join(on_it)}) since the "
            "inventory reported it smaller: they run on, but may run out of memory; nothing "
            "new is placed on it until they hold no more than it has"
        ]
    finally:
        app.state.danlu.db.dispose()


def test_a_queued_job_that_no_longer_fits_the_smaller_gpus_says_so(
    db: Database, tmp_path: Path
) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, BIG.nodes, NOW)
        big = jobs.submit(s, _body("big", 1, "65GiB"), alice, now=NOW).id
        cluster.replace_inventory(s, list(SMALL.nodes), fake=True, now=NOW + 1)
    record_round(db, make_policy("fifo"), NOW + 2)
    with db.read_session() as s:
        job = jobs.get_job(s, big)
        assert job.state == "PENDING"
        assert jobs.why(s, job, now=NOW + 2).startswith("cannot fit the current inventory")
