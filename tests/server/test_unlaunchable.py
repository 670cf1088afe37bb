"""A job whose stored spec no launch can be made of (an older version accepted it; the
executor refuses it now) fails with the reason, and its GPUs go to the next job, instead of
being held by a job relaunched in vain every pass."""

from __future__ import annotations

from pathlib import Path

from helpers import user_and_nodes
from sqlalchemy import update

from danlu.config import load_settings
from danlu.core.cluster import Cluster
from danlu.executors import FakeExecutor, FakeWorld
from danlu.sched.registry import make_policy
from danlu.server.db import Database, Job
from danlu.server.reconcile import Reconciler
from danlu.server.services import events, jobs

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
