"""A launch step that ends early (the store failing as one job's launch is prepared, a
``database is locked`` under load) still records the launches it made before: their
processes run, so their jobs' ``launched_attempt`` is written, and a launch made after the
decision moves the job's ``last_start`` to when its process began (its GPU-hours, its time
limit and its energy count from then). So does a poll that ends early (the store failing as
a later job's exit is settled) for the running runs it found whose launch the store lacked:
until it is recorded, such a run is charged no energy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import user_and_nodes
from sqlalchemy import update
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session
from test_unlaunchable import _ControllerDown

from danlu.config import load_settings
from danlu.core.cluster import Cluster
from danlu.executors import FakeWorld, GpusBusyError, Handle, JobLaunch
from danlu.sched.registry import make_policy
from danlu.server.db import Database, Job
from danlu.server.reconcile import Reconciler
from danlu.server.services import energy, jobs

NOW = 1_000_000.0
INVENTORY = Cluster.homogeneous(1, 2, "H100")


LOCKED = OperationalError("UPDATE jobs", {}, Exception("database is locked"))


class _StoreFailsFor(Reconciler):
    """A loop whose store fails as the launch of ``failing`` is prepared, or as its exit is
    settled."""

    failing = ""

    def job_launch(self, session: Session, job: Job) -> JobLaunch:
        if job.id == self.failing:
            raise LOCKED
        return super().job_launch(session, job)

    def _settle(self, job_id: str, *args: Any, **kwargs: Any) -> None:
        if job_id == self.failing:
            raise LOCKED
        super()._settle(job_id, *args, **kwargs)


def test_the_launches_made_before_a_store_failure_are_recorded(
    db: Database, tmp_path: Path
) -> None:
    body = {"command": ["python", "train.py"], "resources": {"gpus": 1}}
    with db.session() as s:
        alice = user_and_nodes(s, INVENTORY.nodes, NOW)
        first = jobs.submit(s, {"name": "first", **body}, alice, now=NOW).id
        second = jobs.submit(s, {"name": "second", **body}, alice, now=NOW).id
    world = FakeWorld()
    for job_id in (first, second):
        world.script(job_id, duration=1000)
    # both started at NOW, their launches refused (their GPUs busy with other runs)
    executor = _ControllerDown(INVENTORY, world, down=2, error=GpusBusyError("GPU busy"))
    loop = _StoreFailsFor(db, executor, load_settings(home=tmp_path), policy=make_policy("fifo"))
    try:
        assert loop.run_once(now=NOW).launched == []
        loop.failing = second
        with pytest.raises(OperationalError):  # the pass ends at the second job's launch
            loop.run_once(now=NOW + 20)
        assert executor.poll(Handle(first, 1)).running  # the first job's process runs
        with db.read_session() as s:
            job = jobs.get_job(s, first)
            assert (job.launched_attempt, job.attempt) == (1, 1)
            assert job.last_start == NOW + 20  # its clock starts at its launch
            assert job.lock_token is None  # and its row is free again
        loop.failing = ""
        assert loop.run_once(now=NOW + 30).launched == [second]
        with db.read_session() as s:
            assert jobs.get_job(s, first).last_start == NOW + 20
    finally:
        loop.stop()


def test_the_running_runs_a_failed_poll_found_unrecorded_are_recorded(
    db: Database, tmp_path: Path
) -> None:
    body = {"command": ["python", "train.py"], "resources": {"gpus": 1}}
    with db.session() as s:
        alice = user_and_nodes(s, INVENTORY.nodes, NOW)
        running = jobs.submit(s, {"name": "running", **body}, alice, now=NOW).id
        ending = jobs.submit(s, {"name": "ending", **body}, alice, now=NOW).id
    world = FakeWorld()
    world.script(running, duration=1000)
    world.script(ending, duration=5)
    executor = _ControllerDown(INVENTORY, world, down=0)
    loop = _StoreFailsFor(db, executor, load_settings(home=tmp_path), policy=make_policy("fifo"))
    try:
        assert sorted(loop.run_once(now=NOW).launched) == sorted([running, ending])
        with db.session() as s:  # its launch never recorded (the plane killed just after it)
            s.execute(update(Job).where(Job.id == running).values(launched_attempt=0))
        world.clock.advance(10)  # the second job's run has exited
        loop.failing = ending
        with pytest.raises(OperationalError):  # the pass ends at the second job's exit
            loop.run_once(now=NOW + 10)
        with db.read_session() as s:
            job = jobs.get_job(s, running)
            assert (job.launched_attempt, job.attempt) == (1, 1)
            assert job.lock_token is None
            assert running in [h.job_id for h in energy.holdings(s)]  # metered again
    finally:
        loop.stop()
