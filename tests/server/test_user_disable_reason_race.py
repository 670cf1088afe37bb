"""A job row changed by another transaction while a scheduling round writes its shared
waiting reason (PostgreSQL, READ COMMITTED): the round's one UPDATE picks the pending jobs
(and leaves out those of owners disabled) as of its start, and a row changed meanwhile is
checked again as it is now, but not those conditions. So a disable that commits meanwhile
kept the round's reason on its owner's queued jobs over the one the disable gave them, and a
cancelled job got a waiting reason. (SQLite serialises writers: a disable or a cancel
commits before the round's transaction or after it, never during a statement.)"""

from __future__ import annotations

from typing import Any

import pytest
from helpers import user_and_nodes
from interleave import Interleave
from sqlalchemy import event
from sqlalchemy.orm import Session

from danlu.core.cluster import Node, gpu_type
from danlu.core.state import JobState
from danlu.sched.registry import make_policy
from danlu.server.db import Database
from danlu.server.services import disabling, jobs, users
from danlu.server.services.record import Applied, apply_plan
from danlu.server.services.view import build_snapshot

T = 1_000_000.0
NODE = Node("a", 4, gpu_type("H100"))
BODY = {"command": ["python", "train.py"], "resources": {"gpus": 1}}


def _queued(db: Database) -> tuple[str, str]:
    """alice's jobs ``big`` (4 GPUs, 3 free: fifo's own reason) and ``small`` (behind it:
    the plan's shared reason), with ``root`` an admin."""
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), T)
        users.create_user(s, "root", "admin", now=T)
        ran = jobs.submit(s, {"name": "ran", **BODY}, alice, now=T)
        allocation = [{"node": "a", "gpu": 0, "milli": 1000, "memory": 80 * 2**30}]
        jobs.change_state(s, ran, JobState.RUNNING, "go", T, allocation=allocation)
        four = {**BODY, "resources": {"gpus": 4}}
        big = jobs.submit(s, {"name": "big", **four}, alice, now=T + 1).id
        small = jobs.submit(s, {"name": "small", **BODY}, alice, now=T + 2).id
    return big, small


def _round(session: Session) -> Applied:
    """One fifo round at ``T + 10`` in ``session``."""
    snap = build_snapshot(session, T + 10)
    return apply_plan(session, make_policy("fifo").schedule(snap.view), T + 10, snap.withheld, snap)


def _checked(race: Interleave, first: Any) -> None:
    """``first`` paused with alice's job rows written, the round meanwhile: its shared-reason
    UPDATE waits for those rows; then ``first`` commits, and the round after it."""
    out = race.run(first, _round)
    assert out.first_error is None, out.first_error
    assert out.second_error is None, out.second_error
    assert out.second_waited  # the round's UPDATE waited for the first's rows
    applied: Applied = out.second
    assert not applied.started  # the round saw alice's jobs as they were: none fits


@pytest.mark.parametrize("backend", ["postgresql"])
def test_a_disable_committed_during_the_shared_reason_update_keeps_its_reason(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    big, small = _queued(db)
    race = Interleave(db)
    race.pause_at(monkeypatch, disabling, "_set_queued_reason")  # written, not committed

    def disable(s: Session) -> None:
        disabling.disable(s, "alice", users.get_user(s, "root"), now=T + 5)

    _checked(race, disable)
    said = users.owner_disabled("alice")
    with db.read_session() as s:
        reasons = {j: jobs.get_job(s, j).pending_reason for j in (big, small)}
    assert reasons == {big: said, small: said}


@pytest.mark.parametrize("backend", ["postgresql"])
def test_a_job_cancelled_during_the_shared_reason_update_gets_no_waiting_reason(
    db: Database,
) -> None:
    _, small = _queued(db)
    race = Interleave(db)

    def paused(*args: Any) -> None:  # once the cancel has written the job's row
        if str(args[2]).lstrip().startswith("UPDATE jobs"):
            race.pause()

    def cancel(s: Session) -> None:
        jobs.cancel_job(s, small, users.get_user(s, "alice"), "not needed", T + 5)

    event.listen(db.engine, "after_cursor_execute", paused)
    try:
        _checked(race, cancel)
    finally:
        event.remove(db.engine, "after_cursor_execute", paused)
    with db.read_session() as s:
        job = jobs.get_job(s, small)
        assert (job.state, job.pending_reason) == ("CANCELLED", None)
