"""``danlu why`` (and ``danlu run``'s last line) on an ended job said its state twice when the
last event's reason already began with it: ``FAILED: failed: failed (exit code 3); out of
restarts (0 of 0)``."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from danlu.server.db import Database, JobEvent, User
from danlu.server.services import jobs, users

NOW = 1_000_000.0
SPEC: dict[str, Any] = {"name": "a", "command": ["python", "train.py"], "resources": {"gpus": 1}}


def _failed(s: Session, alice: User, reason: str) -> str:
    """A job that failed, its last event's reason ``reason``."""
    job = jobs.submit(s, SPEC, alice, now=NOW)
    job.state = "FAILED"
    s.add(JobEvent(job_id=job.id, time=NOW + 2, old="RUNNING", new="FAILED", reason=reason))
    return job.id


def test_an_ended_jobs_reason_says_its_state_once(seeded: Database) -> None:
    with seeded.session() as s:
        alice = users.get_user(s, "alice")
        cancelled = jobs.submit(s, SPEC, alice, now=NOW).id
        jobs.cancel_job(s, cancelled, alice, now=NOW + 1)
        failed = _failed(s, alice, "failed (exit code 3)")
        lost = _failed(s, alice, "lost with its node a")
        s.flush()
        said = {j: jobs.why(s, jobs.get_job(s, j), now=NOW + 3) for j in (cancelled, failed, lost)}
    assert said[cancelled].startswith("cancelled by alice"), said
    assert said[failed] == "failed (exit code 3)", said
    assert said[lost] == "failed: lost with its node a", said
