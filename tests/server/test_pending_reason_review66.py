"""A job's ``pending_reason`` says what it really waits for: a job waiting for a
dependency keeps saying so after a submission-time estimate note and after a hold and a
release; a job held while it held GPUs reads as held once it is re-queued, whichever path
re-queued it, and gets the right next text when released."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import live_server, submit

from danlu.core.state import JobState
from danlu.core.units import GiB
from danlu.server.db import Database, Job
from danlu.server.services import dependencies, jobs, users

NOW = 1_000_000.0  # the same clock as conftest.NOW
SHARE = [{"node": "node-0", "gpu": 0, "milli": 1000, "memory": 80 * GiB}]
BODY: dict[str, Any] = {
    "command": ["python", "-c", "print('hello')"],
    "resources": {"gpus": 1, "gpu_memory": "20GiB"},
}


def _waiting_text(job_id: str, name: str) -> str:
    return f"waiting for job {job_id} ({name}) to succeed"


def test_a_dependent_job_submitted_with_an_estimate_note_says_what_it_waits_for(
    tmp_path: Path,
) -> None:
    """``gpu_memory: auto`` adds a note to the reason; the dependency's text stays first."""
    with (
        live_server(tmp_path, fake_gpus="1x80GiB", start_loops=False) as live,
        live.client() as c,
    ):
        first = submit(c, {"name": "first", **BODY})["id"]
        auto = {"gpus": 1, "gpu_memory": "auto"}
        body = {**BODY, "name": "auto", "resources": auto, "depends_on": [first]}
        job = submit(c, body)
        assert job["waiting_on"] == first
        reason = job["pending_reason"] or ""
        assert reason.startswith(_waiting_text(first, "first")), reason
        assert "gpu_memory: auto without training.model: using whole GPUs" in reason
        assert c.get(f"/jobs/{job['id']}").json()["pending_reason"] == reason
        plain = submit(c, {**BODY, "name": "plain", "resources": auto})  # no dependency
        assert plain["pending_reason"].startswith("waiting for the next scheduling round (")


def test_a_dependent_job_held_and_released_says_what_it_waits_for(tmp_path: Path) -> None:
    with (
        live_server(tmp_path, fake_gpus="1x80GiB", start_loops=False) as live,
        live.client() as c,
    ):
        first = submit(c, {"name": "first", **BODY})["id"]
        second = submit(c, {**BODY, "name": "second", "depends_on": [first]})["id"]
        held = c.patch(f"/jobs/{second}", json={"held": True}).json()
        assert held["pending_reason"] == "held by admin"
        released = c.patch(f"/jobs/{second}", json={"held": False}).json()
        assert (released["held_at"], released["waiting_on"]) == (None, first)
        assert released["pending_reason"] == _waiting_text(first, "first")


def test_a_dependent_job_released_after_its_dependency_ended_is_told_the_verdict(
    seeded: Database,
) -> None:
    """The release judges the dependencies anew: the one it waited for succeeded meanwhile
    (the pass has not cleared ``waiting_on`` yet), or failed, so it can never run."""
    with seeded.session() as s:
        alice = users.get_user(s, "alice")
        good = jobs.submit(s, {"name": "good", **BODY}, alice, now=NOW).id
        bad = jobs.submit(s, {"name": "bad", **BODY}, alice, now=NOW).id
        after_good = jobs.submit(s, {**BODY, "name": "ag", "depends_on": [good]}, alice).id
        after_bad = jobs.submit(s, {**BODY, "name": "ab", "depends_on": [bad]}, alice).id
        for job_id in (after_good, after_bad):
            jobs.hold(s, job_id, True, alice, now=NOW + 1)
        ran = jobs.get_job(s, good)
        jobs.change_state(s, ran, JobState.RUNNING, "scheduled", NOW + 1, allocation=SHARE)
        jobs.settle_exit(s, ran, succeeded=True, exit_code=0, reason="exit 0", now=NOW + 2)
        jobs.cancel_job(s, bad, alice, now=NOW + 2)
        met = jobs.hold(s, after_good, False, alice)
        assert met.pending_reason == "dependencies met: waiting for the next round"
        never = jobs.hold(s, after_bad, False, alice)
        assert never.pending_reason == (
            f"the job {bad} (bad) it depends on ended CANCELLED and will never succeed: "
            "cancelled at the next pass"
        )


def _running(s: Any, alice: Any, now: float) -> Job:
    """A preemptible job of alice's, RUNNING on one GPU."""
    job = jobs.submit(s, {"name": "run", **BODY, "max_restarts": 3}, alice, now=now)
    jobs.change_state(s, job, JobState.RUNNING, "scheduled", now + 1, allocation=SHARE)
    return job


def _preempted(s: Any, job: Job) -> None:
    """The round's preemption of a held job, then its checkpoint and exit 75."""
    jobs.change_state(s, job, JobState.PREEMPTING, "held: preempted", NOW + 3)
    jobs.settle_exit(s, job, succeeded=False, exit_code=75, reason="checkpointed", now=NOW + 4)


def _crashed(s: Any, job: Job) -> None:
    jobs.settle_exit(s, job, succeeded=False, exit_code=1, reason="exit 1", failed=True)


def _crashed_while_preempted(s: Any, job: Job) -> None:
    jobs.change_state(s, job, JobState.PREEMPTING, "held: preempted", NOW + 3)
    jobs.settle_exit(s, job, succeeded=False, exit_code=1, reason="exit 1", failed=True)


def _stopped_from_outside(s: Any, job: Job) -> None:
    jobs.settle_exit(s, job, succeeded=False, exit_code=75, reason="sigterm", preempted=True)


def _node_lost(s: Any, job: Job) -> None:
    jobs.requeue_lost(s, job, ["node-0"], now=NOW + 4)


def _launch_failed(s: Any, job: Job) -> None:
    jobs.requeue_unlaunched(s, job, "No space left on device", now=NOW + 4)


REQUEUES: dict[str, Callable[[Any, Job], None]] = {
    "preempted-by-checkpoint": _preempted,
    "crashed": _crashed,
    "crashed-while-preempted": _crashed_while_preempted,
    "stopped-from-outside": _stopped_from_outside,
    "node-lost": _node_lost,
    "launch-failed": _launch_failed,
}


@pytest.mark.parametrize("path", sorted(REQUEUES), ids=sorted(REQUEUES))
def test_a_job_held_while_running_reads_as_held_once_requeued(seeded: Database, path: str) -> None:
    with seeded.session() as s:
        alice = users.get_user(s, "alice")
        job = _running(s, alice, NOW)
        jobs.hold(s, job.id, True, alice, now=NOW + 2)
        assert job.state == "RUNNING"
        REQUEUES[path](s, job)
        assert (job.state, job.held_at) == ("PENDING", NOW + 2)
        assert job.pending_reason == "held by alice"
        why = jobs.why(s, job)
        assert why.startswith("held by alice: not scheduled until released (danlu release)")
        released = jobs.hold(s, job.id, False, alice)
        assert released.pending_reason == "released: waiting for the next round"


def test_a_running_job_released_before_its_preemption_has_no_pending_reason(
    seeded: Database,
) -> None:
    """Released while it still runs: nothing of the hold stays; a later preemption writes
    its own reason."""
    with seeded.session() as s:
        alice = users.get_user(s, "alice")
        root = users.get_user(s, "root")
        job = _running(s, alice, NOW)
        jobs.hold(s, job.id, True, root, now=NOW + 2)
        jobs.hold(s, job.id, False, alice)
        assert (job.state, job.held_at, job.pending_reason) == ("RUNNING", None, None)
        _preempted(s, job)
        assert job.pending_reason == "preempted: re-queued to resume from its checkpoint"


def test_a_preempting_job_held_reads_as_held_once_requeued(seeded: Database) -> None:
    """Held while it checkpoints for another job's preemption: it is re-queued held."""
    with seeded.session() as s:
        alice = users.get_user(s, "alice")
        root = users.get_user(s, "root")
        job = _running(s, alice, NOW)
        jobs.change_state(s, job, JobState.PREEMPTING, "preempted for another", NOW + 2)
        jobs.hold(s, job.id, True, root, now=NOW + 3)
        jobs.settle_exit(s, job, succeeded=False, exit_code=75, reason="checkpointed")
        assert (job.state, job.pending_reason) == ("PENDING", "held by root")


def test_a_held_dependent_job_keeps_saying_who_held_it_when_its_dependency_ends(
    seeded: Database,
) -> None:
    """The dependency pass clears ``waiting_on`` once the job it waited for succeeded; a
    held job still reads as held, and its release says the dependencies are met."""
    with seeded.session() as s:
        alice = users.get_user(s, "alice")
        first = jobs.submit(s, {"name": "first", **BODY}, alice, now=NOW).id
        second = jobs.submit(s, {**BODY, "name": "second", "depends_on": [first]}, alice).id
        jobs.hold(s, second, True, alice, now=NOW + 1)
        ran = jobs.get_job(s, first)
        jobs.change_state(s, ran, JobState.RUNNING, "scheduled", NOW + 1, allocation=SHARE)
        jobs.settle_exit(s, ran, succeeded=True, exit_code=0, reason="exit 0", now=NOW + 2)
        passed = dependencies.due(s)
        assert [job_id for job_id, _ in passed] == [second]
        assert dependencies.record(s, second, passed[0][1])
        job = jobs.get_job(s, second)
        assert (job.waiting_on, job.pending_reason) == (None, "held by alice")
        released = jobs.hold(s, second, False, alice)
        assert released.pending_reason == "released: waiting for the next round"
