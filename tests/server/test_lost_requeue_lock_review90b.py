"""The re-queue of a job recorded on GPUs that left the inventory writes the job back only
while the reconcile loop's row lock holds.

The loop claims the job's row, cancels its run (I/O: ``scancel``, a Ray call, which can
outlast the lock), then re-queued the job without looking at the lock: a row another loop
had claimed meanwhile (the lock expired during the cancel) was written under that loop.
"""

from __future__ import annotations

from pathlib import Path

from helpers import user_and_nodes

from danlu.config import load_settings
from danlu.core.cluster import Cluster, Node, gpu_type
from danlu.executors import FakeExecutor, FakeWorld, Handle
from danlu.sched.registry import make_policy
from danlu.server.db import Database, Job
from danlu.server.reconcile import Reconciler
from danlu.server.services import cluster, jobs, locks

NOW = 1_000_000.0


class _SlowCancel(FakeExecutor):
    """Its cancel lasts past the row lock: another loop claims the job's row meanwhile."""

    def __init__(self, cluster: Cluster, world: FakeWorld, db: Database, at: float) -> None:
        super().__init__(cluster, world)
        self.db = db
        self.at = at
        self.cancelled: list[str] = []

    def cancel(self, handle: Handle, grace_seconds: float | None = None) -> None:
        self.cancelled.append(handle.job_id)
        with self.db.session() as s:  # the lock expired during the cancel
            assert locks.claim(s, Job, [handle.job_id], "other-loop", 60.0, self.at) == [
                handle.job_id
            ]
        super().cancel(handle, grace_seconds)


def test_a_lost_jobs_requeue_is_not_written_after_its_lock_was_taken_over(
    db: Database, tmp_path: Path
) -> None:
    before = Cluster((Node("a", 2, gpu_type("H100")), Node("b", 2, gpu_type("H100"))))
    with db.session() as s:
        alice = user_and_nodes(s, before.nodes, NOW)
        body = {"command": ["python", "train.py"], "resources": {"gpus": 2}}
        ids = [jobs.submit(s, {"name": f"j{i}", **body}, alice, now=NOW).id for i in range(2)]
    world = FakeWorld()
    for job_id in ids:
        world.script(job_id, duration=1000, checkpoint_seconds=30)
    settings = load_settings(home=tmp_path)
    first = Reconciler(db, FakeExecutor(before, world), settings, policy=make_policy("fifo"))
    assert sorted(first.run_once(now=NOW + 10).launched) == sorted(ids)
    first.stop()
    on_b = next(i for i in ids if world.runs[i].launch.gpus[0].node == 1)
    after = Cluster((Node("a", 2, gpu_type("H100")),))
    with db.session() as s:
        cluster.replace_inventory(s, list(after.nodes), fake=True, now=NOW + 20)
    loop = Reconciler(db, FakeExecutor(after, world), settings, policy=make_policy("fifo"))
    executor = _SlowCancel(after, world, db, NOW + 30 + loop.ttl + 1)
    loop.executor = executor
    report = loop.run_once(now=NOW + 30)
    assert executor.cancelled == [on_b]
    assert on_b not in report.settled
    with db.read_session() as s:
        job = jobs.get_job(s, on_b)
        assert job.state == "RUNNING"  # the other loop's to settle
        assert locks.holds(s, Job, on_b, "other-loop")
    loop.stop()
