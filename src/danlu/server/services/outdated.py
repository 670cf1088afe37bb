"""What of a scheduling plan is out of date when it is recorded
(:func:`~danlu.server.services.record.apply_plan`): the view was built, and the policy
planned, from rows that other writers may change before the plan is recorded (on
PostgreSQL, read committed, their commits land in between). Each check reads the plan's
jobs' rows as read in the recording transaction, before it changes any.
"""

from __future__ import annotations

from collections.abc import Mapping

from danlu.core.state import JobState
from danlu.sched.quota import held as held_usage
from danlu.sched.view import Plan
from danlu.server.db.models import Job
from danlu.server.services.projects import allocation_usage
from danlu.server.services.view import Snapshot


def not_due(job: Job, t: float) -> str | None:
    """Why the pending ``job`` (its row as read in this transaction) is not one to start at
    ``t``, as the snapshot's pending key query leaves such jobs out
    (:func:`~danlu.server.services.view.key_row_queries`): held, waiting for a dependency, or
    backing off; None when it may start."""
    if job.held_at is not None:
        return "held since the view was built"
    if job.waiting_on is not None:
        return f"waiting for job {job.waiting_on}"
    if job.next_attempt_at is not None and job.next_attempt_at > t:
        return "backing off until its next attempt"
    return None


def gone_starts(
    plan: Plan,
    rows: Mapping[str, Job],
    t: float,
    disabled: frozenset[int] = frozenset(),
    changed: frozenset[str] = frozenset(),
) -> set[str]:
    """The ids of ``plan``'s starts that will not happen: their jobs held, cancelled, waiting
    or backing off since the view was built, their owners (``disabled``: user ids)
    disabled, or their rows ``changed`` since (:func:`changed_rows`)."""
    return {
        s.job_id
        for s in plan.starts
        if (job := rows.get(s.job_id)) is None
        or job.state != JobState.PENDING.value
        or not_due(job, t) is not None
        or job.user_id in disabled
        or job.id in changed
    }


CHANGED = "changed since the view was built"
"""Why a start, move or batch change of a job is not made: its row is not the one the
policy saw (:func:`changed_rows`); the next round plans the job as it is now."""


def changed_rows(plan: Plan, rows: Mapping[str, Job], snapshot: Snapshot | None) -> frozenset[str]:
    """The jobs that ``plan`` starts, moves or rebatches whose rows (``rows``: as read in
    this transaction before the plan changed any) are at another ``version`` than the one
    the snapshot's status of them was built from: another writer changed them since the
    view was built (on PostgreSQL a ``PATCH /jobs/{id}`` that gave a pending job more GPUs,
    other GPU memory or another spec may commit between the view and the record), so what
    the policy chose was for the job as it was. None without the snapshot, nor for a job
    it lacks."""
    if snapshot is None:
        return frozenset()
    ids = [s.job_id for s in plan.starts] + [r.job_id for r in plan.resizes]
    ids += [b.job_id for b in plan.rebatches]
    out = set()
    for job_id in ids:
        job = rows.get(job_id)
        seen = snapshot.version_of(job.seq) if job is not None else None
        if seen is not None and job is not None and job.version != seen:
            out.add(job_id)
    return frozenset(out)


def resizes_not_made(
    plan: Plan, rows: Mapping[str, Job], disabled: frozenset[int], changed: frozenset[str]
) -> dict[str, str]:
    """The resizes of ``plan`` not to make, each with the reason: those of jobs ``changed``
    since the view was built, and those that give a job whose owner is ``disabled`` (user
    ids) more GPUs (disabling stops an owner's claim on more GPUs; running work runs on, and
    may shrink or be preempted)."""
    out: dict[str, str] = {}
    for resize in plan.resizes:
        job = rows.get(resize.job_id)
        if job is None or job.state != JobState.RUNNING.value:
            continue  # skipped as not running any more
        if job.id in changed:
            out[job.id] = CHANGED
        elif job.user_id in disabled:
            now_gpus = allocation_usage(job.allocation).gpus
            if held_usage(resize.allocation).gpus > now_gpus:
                out[job.id] = "not grown: its owner is disabled (it runs on as it is)"
    return out
