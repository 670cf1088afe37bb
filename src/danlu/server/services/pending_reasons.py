"""The ``pending_reason`` a job gets when it is re-queued, held or released, so that it says
what the job really waits for (``danlu ls``'s "where / why", ``danlu show``, ``danlu top``).

A scheduling round rewrites a queued job's reason only when its own verdict changes and never
a held job's, nor one waiting for a dependency (:mod:`danlu.server.services.record`): a wrong
text written here would stay. So a held job reads as held whatever re-queued it, and a job
waiting for a dependency names it.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from danlu.core.state import JobState
from danlu.server.db.models import Job
from danlu.server.services import dependencies

HELD_BY = "held by "
"""How the reason of a held job begins (:func:`held_by`)."""
HELD = "held"
"""The reason of a held job whose holder is not known (held before its reason named them)."""
RELEASED = "released: waiting for the next round"
"""The reason of a released job that waits for nothing else."""


def held_by(who: str) -> str:
    """The reason of a job ``who`` held."""
    return f"{HELD_BY}{who}"


def requeued(job: Job, old: JobState) -> str:
    """The reason of ``job`` re-queued (-> PENDING) from ``old``: a held one keeps saying who
    held it (:func:`~danlu.server.services.jobs.hold` wrote it while the job still held
    GPUs), else a preempted one resumes from its checkpoint and a failed one restarts."""
    if job.held_at is not None:
        reason = job.pending_reason
        return reason if reason is not None and reason.startswith(HELD_BY) else HELD
    if old is JobState.PREEMPTING:
        return "preempted: re-queued to resume from its checkpoint"
    return f"restart {job.restarts} after a failure"


def released(session: Session, job: Job) -> str:
    """The reason of the PENDING ``job`` just released: what its dependencies wait for when
    it waits for one (judged anew: the dependency pass updates ``waiting_on`` if that
    changed meanwhile, and cancels a job whose dependency can never be met), else
    :data:`RELEASED`."""
    if job.waiting_on is None:
        return RELEASED
    deps = dependencies.stored(job.spec)
    verdict = dependencies.judge(deps, dependencies.lookup_found(session, (d.job for d in deps)))
    if verdict.never is not None:
        return f"{verdict.never}: cancelled at the next pass"
    return verdict.reason or "dependencies met: waiting for the next round"
