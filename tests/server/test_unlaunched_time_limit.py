"""A job's ``time_limit`` counts the time its runs ran, as ``danlu usage`` does: a run the
executor has not launched yet (it waits for GPUs another job's run still holds) adds nothing
to it until its launch, and a run stopped before its launch (its launch failed on the node,
or its GPUs left the inventory first) adds nothing to ``run_time`` and writes no stretch."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers import user_and_nodes
from test_unlaunchable import _ControllerDown, busy_launches

from danlu.config import load_settings
from danlu.core.cluster import Cluster
from danlu.core.state import JobState
from danlu.executors import (
    ExecutorError,
    FakeExecutor,
    FakeWorld,
    GpusBusyError,
    Handle,
    JobLaunch,
    NodeLaunchError,
)
from danlu.sched.registry import make_policy
from danlu.server.db import Database, JobRun
from danlu.server.reconcile import Reconciler
from danlu.server.services import jobs, usage

NOW = 1_000_000.0
INVENTORY = Cluster.homogeneous(1, 1, "H100")
BODY = {"command": ["python", "train.py"], "resources": {"gpus": 1}}


def _submit(db: Database, *bodies: dict[str, object]) -> list[str]:
    """Alice's jobs of ``BODY`` with ``bodies`` added, submitted at ``NOW``."""
    with db.session() as s:
        alice = user_and_nodes(s, INVENTORY.nodes, NOW)
        return [jobs.submit(s, {"name": "j", **BODY, **b}, alice, now=NOW).id for b in bodies]


def _settled_after_a_wait(
    db: Database, tmp_path: Path, make: Callable[[FakeWorld], FakeExecutor], edit: bool = False
) -> tuple[str, float, float, int]:
    """The job of ``BODY``, its launch refused twice (its GPU busy) by the executor ``make``
    builds, then settled at the third pass, 10 minutes after its start; ``edit``: its stored
    spec is made one no launch can be made of (an env name an older version let through)
    before that pass. Its state, ``run_time``, ``attained_service`` and ``restarts`` then."""
    [job_id] = _submit(db, {})
    world = FakeWorld()
    world.script(job_id, duration=10_000)
    loop = Reconciler(db, make(world), load_settings(home=tmp_path), policy=make_policy("fifo"))
    try:
        assert loop.run_once(now=NOW).launched == []
        assert loop.run_once(now=NOW + 300).launched == []
        if edit:
            with db.session() as s:
                job = jobs.get_job(s, job_id)
                job.spec = {**job.spec, "env": {"": "x"}}
        report = loop.run_once(now=NOW + 600)
        assert job_id in report.settled, report
    finally:
        loop.stop()
    with db.read_session() as s:
        assert s.query(JobRun).filter_by(job_id=job_id).all() == []
        assert usage.usage(s, NOW - 1, now=NOW + 700) == []
        job = jobs.get_job(s, job_id)
        return job.state, job.run_time, job.attained_service, job.restarts


@pytest.fixture
def limited(db: Database, tmp_path: Path) -> Iterator[tuple[Reconciler, _ControllerDown, str]]:
    """A job with a 5-minute ``time_limit`` started at ``NOW`` whose launch the executor
    refuses (its GPU busy with another job's run) until told otherwise (``executor.down``)."""
    [job_id] = _submit(db, {"time_limit": "5m"})
    with busy_launches(db, tmp_path, INVENTORY, job_id, 10_000, NOW) as (loop, executor):
        yield loop, executor, job_id


def test_the_wait_for_a_launch_counts_nothing_toward_the_time_limit(
    db: Database, limited: tuple[Reconciler, _ControllerDown, str]
) -> None:
    """Waiting 10 minutes for its launch, a job with a 5-minute limit is not cancelled
    "time limit reached" before it ran a second; its clock starts at its launch."""
    loop, executor, job_id = limited
    for t in (300.0, 600.0):
        report = loop.run_once(now=NOW + t)
        assert report.timed_out == [] and report.launched == []
    with db.read_session() as s:
        job = jobs.get_job(s, job_id)
        assert (job.state, job.cancel_requested_at) == ("RUNNING", None)
        assert jobs.over_time(s, NOW + 600) == []
        said = jobs.why(s, job, now=NOW + 600)
        assert said.endswith("; 5m left of its time limit of 5m"), said
    executor.down = 0
    assert loop.run_once(now=NOW + 600).launched == [job_id]
    with db.read_session() as s:
        said = jobs.why(s, jobs.get_job(s, job_id), now=NOW + 660)
        assert said.endswith("; 4m left of its time limit of 5m"), said
    assert loop.run_once(now=NOW + 899).timed_out == []
    assert loop.run_once(now=NOW + 900).timed_out == [job_id]  # 5 minutes after its launch


def test_a_launched_run_still_counts_toward_the_time_limit(db: Database) -> None:
    """The same job launched at its start: its run counts from then."""
    [job_id] = _submit(db, {"time_limit": "5m"})
    with db.session() as s:
        job = jobs.get_job(s, job_id)
        share = {"node": INVENTORY.nodes[0].name, "gpu": 0, "milli": 1000, "memory": 1}
        jobs.change_state(s, job, JobState.RUNNING, "go", NOW, allocation=[share])
        job.launched_attempt = job.attempt
    with db.read_session() as s:
        assert jobs.over_time(s, NOW + 299) == []
        assert [job_id for job_id, _ in jobs.over_time(s, NOW + 300)] == [job_id]
        said = jobs.why(s, jobs.get_job(s, job_id), now=NOW + 300)
        assert said.endswith("; time limit reached"), said


class _BusyThenBroken(FakeExecutor):
    """Refuses the first ``busy`` launches (a GPU busy with another run), then fails each
    launch on the node (its disk full)."""

    def __init__(self, inventory: Cluster, world: FakeWorld, busy: int) -> None:
        super().__init__(inventory, world)
        self.busy = busy

    def submit(self, job: JobLaunch) -> Handle:
        if self.busy > 0:
            self.busy -= 1
            raise GpusBusyError("GPU 0 busy")
        error: ExecutorError = NodeLaunchError("No space left on device")
        raise error


def test_a_launch_failing_on_its_node_after_a_wait_charges_no_run_time(
    db: Database, tmp_path: Path
) -> None:
    """Its launch refused for 10 minutes (its GPU busy), then failed on the node: the job is
    re-queued with nothing charged for a run that never ran (no ``run_time`` toward its
    limit, no stretch, no GPU-hours)."""
    settled = _settled_after_a_wait(db, tmp_path, lambda w: _BusyThenBroken(INVENTORY, w, busy=2))
    assert settled == ("PENDING", 0.0, 0.0, 0)


def test_gpus_lost_before_the_launch_charge_no_run_time(db: Database) -> None:
    """A run whose GPUs left the inventory before its launch ran nothing: re-queued with
    no ``run_time`` and no stretch; a launched one is charged up to then."""
    waiting, ran = _submit(db, {"time_limit": "5m"}, {})
    with db.session() as s:
        share = {"node": INVENTORY.nodes[0].name, "gpu": 0, "milli": 1000, "memory": 1}
        for job_id in (waiting, ran):
            job = jobs.get_job(s, job_id)
            jobs.change_state(s, job, JobState.RUNNING, "go", NOW, allocation=[share])
        jobs.get_job(s, ran).launched_attempt = 1
    with db.session() as s:
        for job_id in (waiting, ran):
            jobs.requeue_lost(s, jobs.get_job(s, job_id), ["node-0:0"], NOW + 600)
    with db.read_session() as s:
        lost = jobs.get_job(s, waiting)
        assert (lost.state, lost.run_time, lost.preemptions) == ("PENDING", 0.0, 0)
        assert s.query(JobRun).filter_by(job_id=waiting).all() == []
        assert jobs.get_job(s, ran).run_time == 600.0
        [row] = usage.usage(s, NOW - 1, now=NOW + 700)
        assert (row.gpu_seconds, row.jobs) == (600.0, 1)


def test_a_job_whose_only_stretch_is_empty_counts_in_no_usage(db: Database) -> None:
    """An empty stretch (its start its end: a run stopped before its launch, as stored by a
    version that wrote one for it) is no usage: its job is not among the ``jobs`` of the
    period, and a user with nothing else gets no row; a job with GPU time counts once."""
    never, ran = _submit(db, {}, {})
    with db.session() as s:
        job = jobs.get_job(s, never)
        for job_id, start, end in (
            (never, NOW + 50, NOW + 50),
            (ran, NOW, NOW + 100),
            (never, NOW + 150, NOW + 150),
        ):
            run = {"job_id": job_id, "project_id": job.project_id, "user_id": job.user_id}
            s.add(JobRun(**run, started_at=start, ended_at=end, gpu_milli=1000, gpu_memory=1))
    with db.read_session() as s:
        [row] = usage.usage(s, NOW - 1, now=NOW + 200)
        assert (row.gpu_seconds, row.jobs) == (100.0, 1)
        assert usage.usage(s, NOW + 120, NOW + 200, now=NOW + 200) == []


class _BusyThenRefused(_BusyThenBroken):
    """Refuses the first ``busy`` launches (a GPU busy), then fails each launch for a fault
    of the job's own (not the node's): the job fails."""

    def submit(self, job: JobLaunch) -> Handle:
        if self.busy > 0:
            self.busy -= 1
            raise GpusBusyError("GPU 0 busy")
        raise ExecutorError("the job's command cannot be started")


def test_a_launch_failing_for_the_job_after_a_wait_charges_no_run_time(
    db: Database, tmp_path: Path
) -> None:
    """Its launch refused for 10 minutes (its GPU busy), then failed for the job's own
    fault: the run fails (the job is re-queued as its restart policy says) with nothing
    charged for it."""
    settled = _settled_after_a_wait(db, tmp_path, lambda w: _BusyThenRefused(INVENTORY, w, busy=2))
    assert settled[:2] == ("PENDING", 0.0) and settled[3] == 1


def test_a_spec_no_launch_can_be_made_of_after_a_wait_charges_no_run_time(
    db: Database, tmp_path: Path
) -> None:
    """A stored spec the executor refuses (an older version accepted it), found only once
    its GPU came free after a 10-minute wait: failed, charged nothing."""
    busy = GpusBusyError("GPU 0 busy")
    settled = _settled_after_a_wait(
        db, tmp_path, lambda w: _ControllerDown(INVENTORY, w, down=2, error=busy), edit=True
    )
    assert settled[:2] == ("FAILED", 0.0)
