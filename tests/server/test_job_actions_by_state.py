"""Every job action (cancel, hold, release, a priority change, rerun) on a job in each state
answers alike: a finished job (SUCCEEDED, FAILED, CANCELLED) is a 409 naming its state for
each action but rerun, release included (it answered 200 changing nothing, while a hold of
the same job was a 409); an unfinished job's hold of a held one, release of one that is not
held and cancel of one being cancelled change nothing."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from danlu.core.state import JobState
from danlu.core.units import GiB
from danlu.server.db import Database, Job, User
from danlu.server.errors import ConflictError
from danlu.server.services import jobs, users

NOW = 1_000_000.0  # the clock of the seeded store
SHARE = [{"node": "node-0", "gpu": 0, "milli": 1000, "memory": 80 * GiB}]
BODY = {"name": "j", "command": ["python", "t.py"], "resources": {"gpus": 1}}


def _ended(db: Database, state: JobState, *, held: bool) -> tuple[User, str]:
    """alice and a job of hers that ended in ``state`` (``held``: held before it ended)."""
    with db.session() as s:
        alice = users.get_user(s, "alice")
        job = jobs.submit(s, BODY, alice, now=NOW)
        if held:
            jobs.hold(s, job.id, True, alice, now=NOW)
        if state is JobState.CANCELLED:
            jobs.cancel_job(s, job.id, alice, now=NOW + 1)
        else:
            jobs.change_state(s, job, JobState.RUNNING, "scheduled", NOW + 1, allocation=SHARE)
            jobs.change_state(s, job, state, "exited", NOW + 2, exit_code=0)
        assert job.state == state.value
        return alice, job.id


ENDS = [JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED]


@pytest.mark.parametrize("held", [False, True], ids=["not-held", "held-before-it-ended"])
@pytest.mark.parametrize("state", ENDS, ids=lambda s: s.value)
def test_releasing_a_finished_job_is_a_conflict_naming_its_state(
    seeded: Database, state: JobState, held: bool
) -> None:
    alice, job_id = _ended(seeded, state, held=held)
    with seeded.session() as s, pytest.raises(ConflictError) as refused:
        jobs.hold(s, job_id, False, alice)
    said = str(refused.value)
    assert state.value in said and "held" in said and "rerun" in said, said
    with seeded.read_session() as s:  # nothing changed
        assert (jobs.get_job(s, job_id).held_at is not None) == held


Action = Callable[[object, str, User], object]
ACTIONS: dict[str, Action] = {
    "cancel": lambda s, j, u: jobs.cancel_job(s, j, u),  # type: ignore[arg-type]
    "hold": lambda s, j, u: jobs.hold(s, j, True, u),  # type: ignore[arg-type]
    "release": lambda s, j, u: jobs.hold(s, j, False, u),  # type: ignore[arg-type]
    "priority": lambda s, j, u: jobs.set_priority(s, j, 7, u),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("action", sorted(ACTIONS))
@pytest.mark.parametrize("state", ENDS, ids=lambda s: s.value)
def test_every_action_but_rerun_on_a_finished_job_is_a_conflict_naming_its_state(
    seeded: Database, state: JobState, action: str
) -> None:
    alice, job_id = _ended(seeded, state, held=False)
    with seeded.session() as s:
        with pytest.raises(ConflictError, match=state.value):
            ACTIONS[action](s, job_id, alice)
        rerun = jobs.rerun_spec(jobs.get_job(s, job_id, alice))  # rerun takes it
        assert rerun.command == ["python", "t.py"]


def test_releasing_a_queued_job_that_is_not_held_changes_nothing(seeded: Database) -> None:
    with seeded.session() as s:
        alice = users.get_user(s, "alice")
        job = jobs.submit(s, BODY, alice, now=NOW)
        reason = job.pending_reason
        released = jobs.hold(s, job.id, False, alice)
        assert (released.state, released.held_at, released.pending_reason) == (
            "PENDING",
            None,
            reason,
        )


def test_releasing_a_running_job_held_before_its_preemption_keeps_it_running(
    seeded: Database,
) -> None:
    with seeded.session() as s:
        alice = users.get_user(s, "alice")
        job: Job = jobs.submit(s, BODY, alice, now=NOW)
        jobs.change_state(s, job, JobState.RUNNING, "scheduled", NOW + 1, allocation=SHARE)
        assert jobs.hold(s, job.id, True, alice, now=NOW + 2).held_at == NOW + 2
        released = jobs.hold(s, job.id, False, alice)
        assert (released.state, released.held_at, released.pending_reason) == (
            "RUNNING",
            None,
            None,
        )


def test_holding_a_running_job_being_cancelled_is_a_conflict(seeded: Database) -> None:
    """Its run is being stopped and it ends CANCELLED: the hold was answered 200 with
    ``held_at`` set (``danlu hold`` said "stopping it to wait"), as if it were to wait."""
    with seeded.session() as s:
        alice = users.get_user(s, "alice")
        job: Job = jobs.submit(s, BODY, alice, now=NOW)
        jobs.change_state(s, job, JobState.RUNNING, "scheduled", NOW + 1, allocation=SHARE)
        jobs.cancel_job(s, job.id, alice, now=NOW + 2)
    with seeded.session() as s, pytest.raises(ConflictError) as refused:
        jobs.hold(s, job.id, True, alice, now=NOW + 3)
    assert "being cancelled" in str(refused.value) and "cancelled by alice" in str(refused.value)
    with seeded.read_session() as s:
        assert jobs.get_job(s, job.id).held_at is None
