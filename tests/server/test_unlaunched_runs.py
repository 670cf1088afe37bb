"""A job the scheduler started whose run the executor has not launched yet (it waits for
GPUs another run still holds: ``GpusBusyError``) is RUNNING but runs nothing: no energy is
charged to it (the GPUs' energy is the other run's), and a cancel before its launch
charges it no GPU-hours. A run recorded before ``jobs.launched_attempt`` (migration 0032:
the column null) is charged as before."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import user_and_nodes
from sqlalchemy import update
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session
from test_energy import ScriptedMeter
from test_unlaunchable import _ControllerDown

from danlu.config import load_settings
from danlu.core.cluster import Cluster
from danlu.core.state import JobState
from danlu.executors import FakeExecutor, FakeWorld, GpusBusyError
from danlu.sched.registry import make_policy
from danlu.server.db import Database, Job, JobRun
from danlu.server.energy import EnergyLoop
from danlu.server.reconcile import Reconciler
from danlu.server.services import energy, jobs, locks, usage
from danlu.server.services.view import build_snapshot

NOW = 1_000_000.0
INVENTORY = Cluster.homogeneous(1, 1, "H100")
GPU = (INVENTORY.nodes[0].name, 0)
WATTS = 100.0


@pytest.fixture
def waiting(db: Database, tmp_path: Path) -> Iterator[tuple[Reconciler, _ControllerDown, str]]:
    """A job started at ``NOW`` whose launch the executor refuses (its GPU busy with another
    run) until told otherwise (``executor.down``), and the loop that started it."""
    body = {"command": ["python", "train.py"], "resources": {"gpus": 1}}
    with db.session() as s:
        alice = user_and_nodes(s, INVENTORY.nodes, NOW)
        job_id = jobs.submit(s, {"name": "waits", **body}, alice, now=NOW).id
    world = FakeWorld()
    world.script(job_id, duration=1000)
    executor = _ControllerDown(INVENTORY, world, down=1000, error=GpusBusyError("GPU 0 busy"))
    loop = Reconciler(db, executor, load_settings(home=tmp_path), policy=make_policy("fifo"))
    assert loop.run_once(now=NOW).launched == []
    with db.read_session() as s:
        job = jobs.get_job(s, job_id)
        assert (job.state, job.attempt, job.allocation is not None) == ("RUNNING", 1, True)
    try:
        yield loop, executor, job_id
    finally:
        loop.stop()


def test_a_run_waiting_for_its_launch_is_charged_no_energy(
    db: Database, waiting: tuple[Reconciler, _ControllerDown, str]
) -> None:
    loop, executor, job_id = waiting
    meter = ScriptedMeter({GPU: WATTS})
    metering = EnergyLoop(db, meter)
    metering.run_once(NOW)
    assert metering.run_once(NOW + 10) == 0  # the GPU's energy is the other run's
    with db.read_session() as s:
        job = jobs.get_job(s, job_id)
        assert (job.energy, job.launched_attempt) == (None, 0)  # started, not launched
        assert jobs.not_launched(job) and energy.holdings(s) == []
    executor.down = 0
    assert loop.run_once(now=NOW + 20).launched == [job_id]
    metering.run_once(NOW + 20)
    assert metering.run_once(NOW + 30) == 1
    with db.read_session() as s:
        job = jobs.get_job(s, job_id)
        assert job.launched_attempt == job.attempt == 1
        assert job.last_start == NOW + 20  # its clock starts at the launch
        assert job.energy == pytest.approx(WATTS * 10)  # since its launch only
        [row] = usage.usage(s, NOW - 1, now=NOW + 30)
        assert row.gpu_seconds == pytest.approx(10.0)


def test_a_cancel_before_the_launch_charges_no_gpu_hours(
    db: Database, waiting: tuple[Reconciler, _ControllerDown, str]
) -> None:
    loop, _, job_id = waiting
    loop.run_once(now=NOW + 30)
    with db.session() as s:
        jobs.cancel_job(s, job_id, now=NOW + 50)
    report = loop.run_once(now=NOW + 60)
    assert job_id in report.settled
    with db.read_session() as s:
        job = jobs.get_job(s, job_id)
        assert (job.state, job.run_time, job.attained_service) == ("CANCELLED", 0.0, 0.0)
        runs = s.query(JobRun).filter_by(job_id=job_id).all()
        assert sum(r.ended_at - r.started_at for r in runs) == 0.0
        assert [r.gpu_seconds for r in usage.usage(s, NOW - 1, now=NOW + 100)] in ([], [0.0])


def test_a_run_recorded_before_the_column_is_charged_as_before(
    db: Database, waiting: tuple[Reconciler, _ControllerDown, str]
) -> None:
    """A null ``launched_attempt``: a run recorded running before migration 0032, whose
    launch is not known, is charged energy and GPU-hours as it was."""
    loop, _, job_id = waiting
    with db.session() as s:
        s.execute(update(Job).where(Job.id == job_id).values(launched_attempt=None))
    meter = ScriptedMeter({GPU: WATTS})
    metering = EnergyLoop(db, meter)
    metering.run_once(NOW)
    assert metering.run_once(NOW + 10) == 1
    with db.session() as s:
        assert jobs.get_job(s, job_id).energy == pytest.approx(WATTS * 10)
        jobs.cancel_job(s, job_id, now=NOW + 50)
    loop.run_once(now=NOW + 60)
    with db.read_session() as s:
        job = jobs.get_job(s, job_id)
        assert (job.state, job.run_time) == ("CANCELLED", 60.0)


def test_each_new_run_waits_for_its_own_launch(db: Database) -> None:
    """A job started again (after a preemption) has launched an earlier run, not this one:
    no energy until the executor takes this one."""
    with db.session() as s:
        alice = user_and_nodes(s, INVENTORY.nodes, NOW)
        job = jobs.submit(s, {"name": "again", "command": ["true"]}, alice, now=NOW)
        share = {"node": GPU[0], "gpu": 0, "milli": 1000, "memory": 1}
        jobs.change_state(s, job, JobState.RUNNING, "go", NOW, allocation=[share])
        job.launched_attempt = job.attempt  # the executor took it
        job_id = job.id
    with db.read_session() as s:
        assert [h.job_id for h in energy.holdings(s)] == [job_id]
    with db.session() as s:
        job = jobs.get_job(s, job_id)
        jobs.change_state(s, job, JobState.PREEMPTING, "make room", NOW + 5)
        jobs.change_state(s, job, JobState.PENDING, "checkpointed", NOW + 6)
        jobs.change_state(s, job, JobState.RUNNING, "go", NOW + 7, allocation=[share])
        assert (job.attempt, job.launched_attempt) == (2, 1)
    with db.read_session() as s:
        assert energy.holdings(s) == []


def test_a_run_waiting_for_its_launch_counts_no_usage_and_no_fair_share(
    db: Database, waiting: tuple[Reconciler, _ControllerDown, str]
) -> None:
    """``danlu usage``, the projects' standing and the recent usage the fair-share policy
    weighs count a run from its launch, as its stretch is charged when it stops: not the
    wait for GPUs another run held."""
    loop, executor, job_id = waiting
    half_life = 3600.0
    with db.read_session() as s:
        assert usage.usage(s, NOW - 1, now=NOW + 100) == []
        [standing] = usage.standing(s, NOW + 100, half_life).values()
        assert (standing.gpus_held, standing.recent_gpus) == (1.0, 0.0)  # held, not used
        recent = usage.RecentUsageCache(half_life).read(s, NOW + 100)
        shares = build_snapshot(s, NOW + 100, recent=recent).view.projects
        assert all(share.recent_milli == 0.0 for share in shares.values())
    executor.down = 0
    assert loop.run_once(now=NOW + 100).launched == [job_id]
    with db.read_session() as s:
        [row] = usage.usage(s, NOW - 1, now=NOW + 200)
        assert row.gpu_seconds == pytest.approx(100.0)  # from its launch
        [standing] = usage.standing(s, NOW + 200, half_life).values()
        assert standing.recent_gpus is not None and standing.recent_gpus > 0.0
        recent = usage.RecentUsageCache(half_life).read(s, NOW + 200)
        shares = build_snapshot(s, NOW + 200, recent=recent).view.projects
        assert sum(share.recent_milli for share in shares.values()) > 0.0


def test_a_running_run_whose_launch_the_store_missed_is_recorded_at_the_next_poll(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The executor took the launch but the store failed as it was recorded: the next pass,
    finding the run running, records it, and its usage and energy count from then on (the
    run was taken for one never launched for as long as it ran)."""
    body = {"command": ["python", "train.py"], "resources": {"gpus": 1}}
    with db.session() as s:
        alice = user_and_nodes(s, INVENTORY.nodes, NOW)
        job_id = jobs.submit(s, {"name": "runs", **body}, alice, now=NOW).id
    world = FakeWorld()
    world.script(job_id, duration=1000)
    loop = Reconciler(
        db, FakeExecutor(INVENTORY, world), load_settings(home=tmp_path), policy=make_policy("fifo")
    )
    update_if_token = locks.update_if_token

    def failing(session: Session, model: Any, key: Any, token: str, values: Any) -> bool:
        if "launched_attempt" in values:
            raise OperationalError("UPDATE jobs", {}, Exception("disk I/O error"))
        return update_if_token(session, model, key, token, values)

    monkeypatch.setattr(locks, "update_if_token", failing)
    try:
        report = loop.run_once(now=NOW)
        assert report.launched == [job_id]
        assert any("cannot record the launches" in e for e in report.errors)
        with db.read_session() as s:
            assert jobs.not_launched(jobs.get_job(s, job_id))  # as the store has it
        monkeypatch.setattr(locks, "update_if_token", update_if_token)
        loop.run_once(now=NOW + 10)
        with db.read_session() as s:
            job = jobs.get_job(s, job_id)
            assert (job.state, job.launched_attempt, job.attempt) == ("RUNNING", 1, 1)
            assert [h.job_id for h in energy.holdings(s)] == [job_id]
            [row] = usage.usage(s, NOW - 1, now=NOW + 20)
            assert row.gpu_seconds == pytest.approx(20.0)
    finally:
        loop.stop()
