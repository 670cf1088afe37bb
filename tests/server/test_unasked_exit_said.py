"""A run that checkpointed and exited 75 with no stop danlu asked for keeps what its executor
said of its exit in the job's event (``danlu show``, ``danlu events``): a Slurm job that
Slurm's own time limit stopped ("Slurm job 12 ended TIMEOUT (TimeLimit)") read the same as
one a host's shutdown stopped. Against the in-memory executor, whose runs say it here."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from helpers import user_and_nodes

from danlu.config import load_settings
from danlu.core.cluster import Cluster
from danlu.executors import (
    ExecStatus,
    FakeExecutor,
    FakeWorld,
    Handle,
    Outcome,
    RunState,
    StopReason,
)
from danlu.executors.fake import ManualClock
from danlu.sched.registry import make_policy
from danlu.server.db import Database
from danlu.server.reconcile import Reconciler
from danlu.server.run_exits import describe_exit
from danlu.server.services import events, jobs

NOW = 1_000_000.0
SAID = "Slurm job 12 ended TIMEOUT (TimeLimit)"


class _Said(FakeExecutor):
    """The fake executor whose ended runs say :data:`SAID`."""

    def poll(self, handle: Handle) -> ExecStatus:
        status = super().poll(handle)
        return status if status.running else dataclasses.replace(status, message=SAID)


def test_an_unasked_exit_75_keeps_what_the_executor_said(
    sqlite_db: Database, tmp_path: Path
) -> None:
    inventory = Cluster.homogeneous(1, 1, "H100")
    body = {"name": "j", "command": ["python", "train.py"], "resources": {"gpus": 1}}
    with sqlite_db.session() as s:
        job_id = jobs.submit(s, body, user_and_nodes(s, inventory.nodes, NOW), now=NOW).id
    world = FakeWorld(clock=ManualClock(NOW))
    world.script(job_id, duration=10, outcome=Outcome.PREEMPTED)  # exits 75, unasked
    settings = load_settings(home=tmp_path)
    loop = Reconciler(sqlite_db, _Said(inventory, world), settings, policy=make_policy("fifo"))
    try:
        assert loop.run_once(now=NOW).launched == [job_id]
        world.clock.advance(20)
        loop.run_once(now=NOW + 20)
        with sqlite_db.read_session() as s:
            said = [(e.new, e.reason) for e in events.list_events(s, job_id)]
    finally:
        loop.stop()
    new, reason = said[2]
    assert new == "PREEMPTING", said
    assert reason.startswith("checkpointed and exited 75 on its own (a SIGTERM from outside)")
    assert reason.endswith(f"; {SAID}"), said


def test_a_checkpoint_danlu_asked_for_keeps_what_the_executor_said() -> None:
    status = ExecStatus(
        RunState.EXITED,
        outcome=Outcome.PREEMPTED,
        exit_code=75,
        stop_reason=StopReason.PREEMPT,
        message=SAID,
    )
    assert describe_exit(status) == (
        False,
        75,
        f"checkpointed and exited after preemption; re-queued to resume; {SAID}",
    )
