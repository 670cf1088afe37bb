"""A job whose stored spec no launch can be made of (an older version accepted it; the
executor refuses it now) fails with the reason, and its GPUs go to the next job, instead of
being held by a job relaunched in vain every pass."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from helpers import user_and_nodes
from sqlalchemy import func, select, update

from danlu.config import load_settings
from danlu.core.cluster import Cluster
from danlu.executors import (
    ExecutorError,
    ExecutorUnavailableError,
    FakeExecutor,
    FakeWorld,
    GpusBusyError,
    Handle,
    JobAlreadyRunningError,
    JobLaunch,
)
from danlu.sched.registry import make_policy
from danlu.server.db import Database, Job, Node
from danlu.server.db.models import ApiToken
from danlu.server.reconcile import Reconciler
from danlu.server.services import events, jobs, users

NOW = 1_000_000.0


def test_a_job_that_cannot_be_launched_fails_and_frees_its_gpu(
    db: Database, tmp_path: Path
) -> None:
    inventory = Cluster.homogeneous(1, 1, "H100")
    body = {"command": ["python", "train.py"], "resources": {"gpus": 1}}
    with db.session() as s:
        alice = user_and_nodes(s, inventory.nodes, NOW)
        broken = jobs.submit(s, {"name": "broken", **body}, alice, now=NOW)
        fine = jobs.submit(s, {"name": "fine", **body}, alice, now=NOW + 1)
        broken_id, fine_id = broken.id, fine.id
    with db.session() as s:  # as stored by a version that let any env name through
        stored = {**broken.spec, "env": {"": "x"}}
        s.execute(update(Job).where(Job.id == broken_id).values(spec=stored))
    world = FakeWorld()
    world.script(fine_id, duration=100)
    loop = Reconciler(
        db, FakeExecutor(inventory, world), load_settings(home=tmp_path), policy=make_policy("fifo")
    )
    report = loop.run_once(now=NOW + 10)
    assert report.settled == [broken_id] and report.errors == []
    report = loop.run_once(now=NOW + 20)
    assert report.launched == [fine_id]
    with db.read_session() as s:
        failed = jobs.get_job(s, broken_id)
        assert (failed.state, failed.allocation) == ("FAILED", None)
        reason = events.list_events(s, broken_id)[-1].reason
        assert reason.startswith("cannot be launched: env.") and "environment variable" in reason
    loop.stop()


class _ControllerDown(FakeExecutor):
    """A fake executor that refuses the first ``down`` launches with ``error`` (by default,
    its backend is unreachable)."""

    def __init__(
        self,
        inventory: Cluster,
        world: FakeWorld,
        down: int,
        error: ExecutorError | None = None,
    ) -> None:
        super().__init__(inventory, world)
        self.down = down
        self.error = error or ExecutorUnavailableError("Unable to contact slurm controller")

    def submit(self, job: JobLaunch) -> Handle:
        if self.down > 0:
            self.down -= 1
            raise self.error
        return super().submit(job)


@contextmanager
def busy_launches(
    db: Database, tmp_path: Path, inventory: Cluster, job_id: str, duration: float, now: float
) -> Iterator[tuple[Reconciler, _ControllerDown]]:
    """The fifo loop of ``job_id`` (a job of ``duration`` seconds in the fake world) after
    its first pass at ``now``, which started it but whose launch the executor refused (its
    GPU busy with another run): it refuses it until told otherwise (``executor.down``)."""
    world = FakeWorld()
    world.script(job_id, duration=duration)
    executor = _ControllerDown(inventory, world, down=1000, error=GpusBusyError("GPU busy"))
    loop = Reconciler(db, executor, load_settings(home=tmp_path), policy=make_policy("fifo"))
    try:
        assert loop.run_once(now=now).launched == []
        yield loop, executor
    finally:
        loop.stop()


def test_a_launch_the_executor_cannot_make_now_is_made_later(db: Database, tmp_path: Path) -> None:
    """Slurm's controller down: the job keeps its GPUs and is launched once it answers, with
    no restart counted against it and its node not blamed."""
    inventory = Cluster.homogeneous(1, 1, "H100")
    body = {"command": ["python", "train.py"], "resources": {"gpus": 1}}
    with db.session() as s:
        alice = user_and_nodes(s, inventory.nodes, NOW)
        job_id = jobs.submit(s, {"name": "waits", **body}, alice, now=NOW).id
    world = FakeWorld()
    world.script(job_id, duration=100)
    executor = _ControllerDown(inventory, world, down=2)
    loop = Reconciler(db, executor, load_settings(home=tmp_path), policy=make_policy("fifo"))
    for step in range(2):
        report = loop.run_once(now=NOW + 10 + step)
        assert report.launched == [] and "Unable to contact" in report.errors[0]
    report = loop.run_once(now=NOW + 20)
    assert report.launched == [job_id]
    with db.read_session() as s:
        job = jobs.get_job(s, job_id)
        assert (job.state, job.restarts) == ("RUNNING", 0)
        assert {n.name: n.launch_failures for n in s.scalars(select(Node))} == {
            inventory.nodes[0].name: 0
        }
    loop.stop()


@pytest.mark.parametrize(
    "refusal",
    [
        ExecutorUnavailableError("Unable to contact slurm controller"),
        GpusBusyError("a stopping run still holds GPU 0"),
        JobAlreadyRunningError("its previous run still exits"),
    ],
)
def test_a_refused_launch_leaves_no_token_behind(
    db: Database, tmp_path: Path, refusal: ExecutorError
) -> None:
    """Each launch is made with a fresh job token; one the executor refuses for now takes
    its token back, so a launch retried every pass does not add a token row a pass."""
    inventory = Cluster.homogeneous(1, 1, "H100")
    body = {"command": ["python", "train.py"], "resources": {"gpus": 1}}
    with db.session() as s:
        alice = user_and_nodes(s, inventory.nodes, NOW)
        job_id = jobs.submit(s, {"name": "waits", **body}, alice, now=NOW).id
    world = FakeWorld()
    world.script(job_id, duration=100)
    executor = _ControllerDown(inventory, world, down=5, error=refusal)
    loop = Reconciler(db, executor, load_settings(home=tmp_path), policy=make_policy("fifo"))
    for step in range(5):
        assert loop.run_once(now=NOW + 10 + step).launched == []
    assert loop.run_once(now=NOW + 20).launched == [job_id]
    with db.read_session() as s:
        rows = s.scalar(select(func.count()).select_from(ApiToken).where(ApiToken.job_id == job_id))
        assert rows == 1
        live = users.find_token(s, world.launches[-1].token)  # the launched run's token works
        assert live is not None and live.job_id == job_id
    loop.stop()


def test_a_launch_that_waited_starts_the_jobs_clock_when_it_goes(
    db: Database, tmp_path: Path
) -> None:
    """A start whose launch the executor refused for a while (GPUs a moved job's run still
    held) counts its stretch from the launch: its run time, its time limit, its GPU-hours
    and the policy's hold (``last_start``) begin when its process does, not at the
    decision 20 s before."""
    inventory = Cluster.homogeneous(1, 1, "H100")
    body = {"command": ["python", "train.py"], "resources": {"gpus": 1}, "time_limit": 30}
    with db.session() as s:
        alice = user_and_nodes(s, inventory.nodes, NOW)
        job_id = jobs.submit(s, {"name": "waits", **body}, alice, now=NOW).id
    world = FakeWorld()
    world.script(job_id, duration=100)
    executor = _ControllerDown(inventory, world, down=4, error=GpusBusyError("GPU 0 is busy"))
    loop = Reconciler(db, executor, load_settings(home=tmp_path), policy=make_policy("fifo"))
    try:
        for step in range(4):
            assert loop.run_once(now=NOW + 5 * step).launched == []
        assert loop.run_once(now=NOW + 20).launched == [job_id]
        with db.read_session() as s:
            assert jobs.get_job(s, job_id).last_start == NOW + 20
        # 25 s after the decision but 5 s after the launch: not over its 30 s limit yet
        assert loop.run_once(now=NOW + 25).timed_out == []
        assert loop.run_once(now=NOW + 50).timed_out == [job_id]
    finally:
        loop.stop()
