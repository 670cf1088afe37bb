"""What a job says when its launch is refused for the cluster's reasons, not the job's nor a
node's: Slurm's controller unreachable (the placed job read as running on its GPUs while
nothing was submitted; now its ``pending_reason`` and ``danlu why`` say it is not launched,
and why, until a launch goes through), and Slurm's partition closed (re-queued as "the node
could not launch it"; now as its partition taking no job, naming it and its state, no node
counted). Against the in-memory executor, refusing as the Slurm executor does."""

from __future__ import annotations

from pathlib import Path

from helpers import user_and_nodes
from sqlalchemy import select

from danlu.config import load_settings
from danlu.core.cluster import Cluster
from danlu.executors import (
    ExecutorError,
    ExecutorUnavailableError,
    FakeExecutor,
    FakeWorld,
    Handle,
    JobLaunch,
    PartitionClosedError,
)
from danlu.sched.registry import make_policy
from danlu.server.db import Database, Node
from danlu.server.reconcile import Reconciler
from danlu.server.services import events, jobs

NOW = 1_000_000.0
UNREACHABLE = "sbatch: error: Batch job submission failed: Unable to contact slurm controller"
CLOSED = (
    "Slurm reports partition gpu DRAIN: it takes no job until scontrol update "
    "PartitionName=gpu State=UP; Slurm refused job x: Required partition not available"
)


class _Refusing(FakeExecutor):
    """The fake executor refusing its first ``times`` launches with ``error``."""

    def __init__(self, inventory: Cluster, error: ExecutorError, times: int) -> None:
        super().__init__(inventory, FakeWorld())
        self.error, self.times = error, times

    def submit(self, job: JobLaunch) -> Handle:
        if self.times > 0:
            self.times -= 1
            raise self.error
        return super().submit(job)


def _loop(db: Database, tmp_path: Path, error: ExecutorError) -> tuple[Reconciler, str]:
    """A fifo loop over one 1-GPU node whose first two launches are refused with ``error``,
    and its one job."""
    inventory = Cluster.homogeneous(1, 1, "H100")
    body = {"name": "j", "command": ["python", "train.py"], "resources": {"gpus": 1}}
    with db.session() as s:
        job_id = jobs.submit(s, body, user_and_nodes(s, inventory.nodes, NOW), now=NOW).id
    executor = _Refusing(inventory, error, times=2)
    settings = load_settings(home=tmp_path)
    return Reconciler(db, executor, settings, policy=make_policy("fifo")), job_id


def test_a_job_its_cluster_cannot_be_reached_for_says_it_is_not_launched(
    db: Database, tmp_path: Path
) -> None:
    loop, job_id = _loop(db, tmp_path, ExecutorUnavailableError(UNREACHABLE))
    try:
        for step in range(2):
            assert loop.run_once(now=NOW + step).launched == []
            with db.read_session() as s:
                job = jobs.get_job(s, job_id)
                assert (job.state, job.restarts) == ("RUNNING", 0)  # it keeps its GPU
                assert job.pending_reason == (
                    f"not launched: the cluster cannot be reached ({UNREACHABLE}): it keeps "
                    "its GPUs and is launched once the cluster answers"
                )
                why = jobs.why(s, job, now=NOW + step)
                assert why.startswith(f"{job.pending_reason}; placed on "), why
        assert loop.run_once(now=NOW + 2).launched == [job_id]
        with db.read_session() as s:
            job = jobs.get_job(s, job_id)
            assert (job.state, job.pending_reason) == ("RUNNING", None)
            assert jobs.why(s, job, now=NOW + 2).startswith("running on ")
    finally:
        loop.stop()


def test_a_launch_refused_as_the_partition_is_closed_says_so(
    sqlite_db: Database, tmp_path: Path
) -> None:
    loop, job_id = _loop(sqlite_db, tmp_path, PartitionClosedError(CLOSED, "gpu", "DRAIN"))
    try:
        assert loop.run_once(now=NOW).launched == []
        with sqlite_db.read_session() as s:
            job = jobs.get_job(s, job_id)
            state, restarts = job.state, job.restarts
            said = [(e.new, e.reason) for e in events.list_events(s, job_id)]
            why = jobs.why(s, job, now=NOW)
            failures = list(s.scalars(select(Node.launch_failures)))
    finally:
        loop.stop()
    assert (state, restarts) == ("PENDING", 0)
    assert said[2] == (
        "RESTARTING",
        f"its partition takes no job: {CLOSED} (no restart counted)",
    ), said
    assert why.startswith(f"its partition takes no job: {CLOSED}; eligible again in "), why
    assert failures == [0]  # no node blamed
