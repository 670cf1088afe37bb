"""The scheduler's view of a run that was decided but not launched yet (it waits for GPUs
another run still holds): its run counts from its launch, as its GPU-hours and its time
limit do. Until then it has run 0 s and attained no service, so a policy does not take the
wait for run time (fair-share's minimum run time, tiresias' attained service, the
estimates of the work done); once launched it has run since the launch."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import user_and_nodes
from test_unlaunchable import _ControllerDown

from danlu.config import load_settings
from danlu.core.cluster import Cluster
from danlu.executors import FakeWorld, GpusBusyError
from danlu.sched.registry import make_policy
from danlu.sched.view import JobStatus
from danlu.server.db import Database
from danlu.server.reconcile import Reconciler
from danlu.server.services import jobs, projects, usage, users
from danlu.server.services.view import StatusCache, build_snapshot

NOW = 1_000_000.0
INVENTORY = Cluster.homogeneous(1, 1, "H100")


@pytest.fixture
def waiting(db: Database, tmp_path: Path) -> Iterator[tuple[Reconciler, _ControllerDown, str]]:
    """A job started at ``NOW`` whose launch the executor refuses (its GPU busy with another
    run) until told otherwise (``executor.down``), and the loop that started it."""
    body = {"command": ["python", "train.py"], "resources": {"gpus": 1}}
    with db.session() as s:
        alice = user_and_nodes(s, INVENTORY.nodes, NOW)
        job_id = jobs.submit(s, {"name": "waits", **body}, alice, now=NOW).id
    world = FakeWorld()
    world.script(job_id, duration=10_000)
    executor = _ControllerDown(INVENTORY, world, down=1000, error=GpusBusyError("GPU 0 busy"))
    loop = Reconciler(db, executor, load_settings(home=tmp_path), policy=make_policy("fifo"))
    assert loop.run_once(now=NOW).launched == []
    try:
        yield loop, executor, job_id
    finally:
        loop.stop()


def _status(db: Database, t: float, cache: StatusCache, recent: bool = False) -> JobStatus:
    with db.read_session() as s:
        read = usage.RecentUsageCache(3600.0).read(s, t) if recent else None
        (status,) = build_snapshot(s, t, cache, read).view.running
    return status


@pytest.mark.parametrize("recent", [False, True], ids=["no-history", "recent-usage"])
def test_a_run_waiting_for_its_launch_has_run_nothing_in_the_view(
    db: Database, waiting: tuple[Reconciler, _ControllerDown, str], recent: bool
) -> None:
    loop, executor, job_id = waiting
    cache = StatusCache()
    for t in (NOW + 100, NOW + 700):  # the same cached job, round after round
        status = _status(db, t, cache, recent)
        assert status.id == job_id and status.allocation.shares  # it holds its GPU
        assert status.run_time_at(t) == 0.0
        assert status.attained_at(t) == 0.0
    executor.down = 0
    assert loop.run_once(now=NOW + 800).launched == [job_id]
    status = _status(db, NOW + 900, cache, recent)
    assert status.last_start == NOW + 800
    assert status.run_time_at(NOW + 900) == pytest.approx(100.0)  # from its launch
    assert status.attained_at(NOW + 900) == pytest.approx(100.0)


def test_fair_share_does_not_take_the_wait_for_its_minimum_run_time(
    db: Database, tmp_path: Path
) -> None:
    """Two runs of project ``default`` on the two GPUs, waiting for their launch since their
    decision 700 s ago, with a minimum run time of 600 s, have not run their minimum: fair
    share's reclaim does not preempt one for a job of another project below its share (it
    did, taking the wait for run time)."""
    two = Cluster.homogeneous(1, 2, "H100")
    body = {"command": ["true"], "resources": {"gpus": 1}}
    with db.session() as s:
        alice = user_and_nodes(s, two.nodes, NOW)
        ours = {jobs.submit(s, {"name": f"ours{i}", **body}, alice, now=NOW).id for i in (0, 1)}
    executor = _ControllerDown(two, FakeWorld(), down=1000, error=GpusBusyError("GPUs busy"))
    loop = Reconciler(db, executor, load_settings(home=tmp_path), policy=make_policy("fifo"))
    try:
        loop.run_once(now=NOW)
    finally:
        loop.stop()
    with db.session() as s:
        held = {j.id for j in jobs.list_jobs(s, states=["RUNNING"])}
        assert held == ours and all(jobs.not_launched(jobs.get_job(s, j)) for j in held)
        bob = users.create_user(s, "bob", now=NOW)
        projects.create_project(s, "other", now=NOW)
        jobs.submit(s, {"name": "theirs", "project": "other", **body}, bob, now=NOW + 600)
    policy = make_policy("fair-share", reclaim=True, min_run=600.0)
    with db.read_session() as s:
        plan = policy.schedule(build_snapshot(s, NOW + 700).view)
    assert plan.preempts == ()
