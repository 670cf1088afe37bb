"""A control plane that comes back with fewer GPUs than the store recorded jobs on (a node
gone with its runs, or left with fewer GPUs): the jobs recorded there are re-queued to
resume from their checkpoints, never launched on what is left of their allocation, and never
waited on when their runs cannot be reached."""

from __future__ import annotations

from pathlib import Path

from helpers import user_and_nodes

from danlu.config import Settings, load_settings
from danlu.core.cluster import Cluster, Node, gpu_type
from danlu.core.state import JobState
from danlu.executors import ExecStatus, ExecutorError, FakeExecutor, FakeWorld, Handle
from danlu.sched.registry import make_policy
from danlu.server.db import Database, Job
from danlu.server.reconcile import Reconciler
from danlu.server.services import cluster, events, jobs, locks
from danlu.server.services.view import lost_gpus, to_allocation

NOW = 1_000_000.0


def _launched_on_two_nodes(
    db: Database, tmp_path: Path, count: int, gpus: int
) -> tuple[list[str], FakeWorld, Settings]:
    """Nodes ``a`` and ``b`` of 2 GPUs, and ``count`` jobs of ``gpus`` GPUs each (runs of
    1,000 s that checkpoint in 30 s) launched there by a control plane that then stops."""
    before = Cluster((Node("a", 2, gpu_type("H100")), Node("b", 2, gpu_type("H100"))))
    with db.session() as s:
        alice = user_and_nodes(s, before.nodes, NOW)
        body = {"command": ["python", "train.py"], "resources": {"gpus": gpus}}
        ids = [jobs.submit(s, {"name": f"j{i}", **body}, alice, now=NOW).id for i in range(count)]
    world = FakeWorld()
    for job_id in ids:
        world.script(job_id, duration=1000, checkpoint_seconds=30)
    settings = load_settings(home=tmp_path)
    loop = Reconciler(db, FakeExecutor(before, world), settings, policy=make_policy("fifo"))
    assert sorted(loop.run_once(now=NOW + 10).launched) == sorted(ids)
    loop.stop()
    return ids, world, settings


def test_jobs_on_gpus_gone_from_the_inventory_are_requeued(db: Database, tmp_path: Path) -> None:
    ids, world, settings = _launched_on_two_nodes(db, tmp_path, count=2, gpus=2)
    on_b = next(i for i in ids if world.runs[i].launch.gpus[0].node == 1)
    on_a = next(i for i in ids if i != on_b)
    # node b is gone, and its run with it; the control plane restarts on node a alone
    del world.runs[on_b]
    after = Cluster((Node("a", 2, gpu_type("H100")),))
    with db.session() as s:
        cluster.replace_inventory(s, list(after.nodes), fake=True, now=NOW + 20)
    launches = len(world.launches)
    loop = Reconciler(db, FakeExecutor(after, world), settings, policy=make_policy("fifo"))
    report = loop.run_once(now=NOW + 30)
    assert report.errors == [] and report.launched == []
    assert len(world.launches) == launches  # nothing launched on what is left
    with db.read_session() as s:
        lost = jobs.get_job(s, on_b)
        assert (lost.state, lost.allocation, lost.preemptions, lost.restarts) == (
            "PENDING",
            None,
            1,
            0,
        )
        assert "left the inventory (b:0, b:1)" in events.list_events(s, on_b)[-2].reason
        assert jobs.get_job(s, on_a).state == "RUNNING"
    world.clock.advance(1000)  # the job on node a finishes; the re-queued one takes its GPUs
    loop.run_once(now=NOW + 1030)
    loop.run_once(now=NOW + 1040)
    assert world.runs[on_b].launch.gpus[0].node == 0
    loop.stop()


class _NodeUnreachable(FakeExecutor):
    """Its node ``b`` is gone: the runs that were there cannot be polled or stopped."""

    def __init__(self, cluster: Cluster, world: FakeWorld, on_b: set[str]) -> None:
        super().__init__(cluster, world)
        self.on_b = on_b
        self.polled: list[str] = []

    def poll(self, handle: Handle) -> ExecStatus:
        self.polled.append(handle.job_id)
        if handle.job_id in self.on_b:
            raise ExecutorError(f"cannot reach node b for {handle.key}")
        return super().poll(handle)

    def cancel(self, handle: Handle, grace_seconds: float | None = None) -> None:
        if handle.job_id in self.on_b:
            raise ExecutorError(f"cannot reach node b for {handle.key}")
        super().cancel(handle, grace_seconds)


def test_jobs_on_a_node_gone_are_requeued_without_waiting_on_their_runs(
    db: Database, tmp_path: Path
) -> None:
    ids, world, settings = _launched_on_two_nodes(db, tmp_path, count=4, gpus=1)
    on_b = sorted(i for i in ids if world.runs[i].launch.gpus[0].node == 1)
    preempting = on_b[1]
    with db.session() as s:  # one of them was being preempted when node b left
        jobs.change_state(s, jobs.get_job(s, preempting), JobState.PREEMPTING, "test", NOW + 15)
    after = Cluster((Node("a", 2, gpu_type("H100")),))
    with db.session() as s:
        cluster.replace_inventory(s, list(after.nodes), fake=True, now=NOW + 20)
    executor = _NodeUnreachable(after, world, set(on_b))
    loop = Reconciler(db, executor, settings, policy=make_policy("fifo"))
    report = loop.run_once(now=NOW + 30)
    assert report.errors == [] and sorted(report.settled) == on_b
    assert not set(executor.polled) & set(on_b)  # not waited on: their node is gone
    with db.read_session() as s:
        for job_id in on_b:
            job = jobs.get_job(s, job_id)
            assert (job.state, job.allocation, job.restarts) == ("PENDING", None, 0)
            reasons = [event.reason for event in events.list_events(s, job_id)]
            assert any("left the inventory (b:" in reason for reason in reasons[-2:])
    loop.stop()


def test_a_lost_job_another_loop_still_locks_is_requeued_once_the_lock_expires(
    db: Database, tmp_path: Path
) -> None:
    ids, world, settings = _launched_on_two_nodes(db, tmp_path, count=2, gpus=2)
    on_b = next(i for i in ids if world.runs[i].launch.gpus[0].node == 1)
    after = Cluster((Node("a", 2, gpu_type("H100")),))
    with db.session() as s:
        cluster.replace_inventory(s, list(after.nodes), fake=True, now=NOW + 20)
    with db.session() as s:  # a loop that died mid-pass still holds the job's row lock
        assert locks.claim(s, Job, [on_b], "another-loop", ttl=60.0, now=NOW + 25) == [on_b]
    loop = Reconciler(
        db, _NodeUnreachable(after, world, {on_b}), settings, policy=make_policy("fifo")
    )
    loop.run_once(now=NOW + 30)
    with db.read_session() as s:
        assert jobs.get_job(s, on_b).state == "RUNNING"
    assert loop.run_once(now=NOW + 90).settled == [on_b]  # the lock expired at NOW + 85
    with db.read_session() as s:
        assert jobs.get_job(s, on_b).state == "PENDING"
    loop.stop()


def test_an_allocation_on_gpus_the_inventory_lacks_is_cut_to_what_is_there() -> None:
    inventory = Cluster((Node("a", 4, gpu_type("H100")), Node("b", 4, gpu_type("H100"))))
    stored = [
        {"node": "a", "gpu": 3, "milli": 1000, "memory": 0},
        {"node": "a", "gpu": 6, "milli": 1000, "memory": 0},  # node a had 8 GPUs
        {"node": "c", "gpu": 0, "milli": 1000, "memory": 0},  # node c is gone
    ]
    assert [(g.node, g.gpu) for g in to_allocation(stored, inventory).shares] == [(0, 3)]
    assert lost_gpus(stored, inventory) == ["a:6", "c:0"]
    assert lost_gpus(stored[:1], inventory) == []
