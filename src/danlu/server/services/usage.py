"""GPU usage over a period, by project and user: what a cluster's owners charge back.

Each stretch of a job on its GPUs is a :class:`~danlu.server.db.models.JobRun` row once it
ends (the job finished, was preempted or moved); the stretches still running are read off
the jobs holding GPUs. A stretch counts for the part of it inside the period, at the
GPUs it held (thousandths of a GPU for a share) and the GPU memory.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from danlu.core.cluster import MILLI_PER_GPU
from danlu.server.db.models import Job, JobRun, Project, User
from danlu.server.services.common import resolve_now
from danlu.server.services.projects import HOLDING


@dataclass(frozen=True, slots=True)
class UsageRow:
    """What one user's jobs of one project used in the period."""

    project: str
    user: str
    gpu_seconds: float
    """GPU-seconds (a GPU held for a second is 1; half a GPU, 0.5)."""
    gpu_memory_byte_seconds: float
    jobs: int
    """Jobs with a stretch on GPUs in the period."""


def usage(
    session: Session,
    since: float,
    until: float | None = None,
    *,
    user_id: int | None = None,
    now: float | None = None,
) -> list[UsageRow]:
    """The GPU usage in ``[since, until)`` (``until`` default: now) by project and user,
    most GPU-seconds first; ``user_id``: that user's only."""
    t = resolve_now(now)
    end = t if until is None else min(until, t)
    start_in = case((JobRun.started_at > since, JobRun.started_at), else_=since)
    end_in = case((JobRun.ended_at < end, JobRun.ended_at), else_=end)
    seconds = end_in - start_in
    query = (
        select(
            JobRun.project_id,
            JobRun.user_id,
            JobRun.job_id,
            func.sum(seconds * JobRun.gpu_milli),
            func.sum(seconds * JobRun.gpu_memory),
        )
        .where(JobRun.ended_at > since, JobRun.started_at < end)
        .group_by(JobRun.project_id, JobRun.user_id, JobRun.job_id)
    )
    if user_id is not None:
        query = query.where(JobRun.user_id == user_id)
    totals: dict[tuple[int, int], list[float]] = {}
    jobs: dict[tuple[int, int], set[str]] = {}

    def add(key: tuple[int, int], job_id: str, milli_seconds: float, byte_seconds: float) -> None:
        entry = totals.setdefault(key, [0.0, 0.0])
        entry[0] += milli_seconds
        entry[1] += byte_seconds
        jobs.setdefault(key, set()).add(job_id)

    for project_id, uid, job_id, milli_seconds, byte_seconds in session.execute(query):
        add((project_id, uid), job_id, float(milli_seconds or 0), float(byte_seconds or 0))
    running = select(Job.id, Job.project_id, Job.user_id, Job.last_start, Job.allocation).where(
        Job.state.in_(HOLDING), Job.last_start < end
    )
    if user_id is not None:
        running = running.where(Job.user_id == user_id)
    for job_id, project_id, uid, last_start, allocation in session.execute(running):
        held = end - max(float(last_start), since)
        if held > 0 and allocation:
            milli = sum(int(s["milli"]) for s in allocation)
            memory = sum(int(s["memory"]) for s in allocation)
            add((project_id, uid), job_id, held * milli, held * memory)
    names = _names(session, {p for p, _ in totals}, {u for _, u in totals})
    rows = [
        UsageRow(
            project=names[0].get(project_id, str(project_id)),
            user=names[1].get(uid, str(uid)),
            gpu_seconds=milli_seconds / MILLI_PER_GPU,
            gpu_memory_byte_seconds=byte_seconds,
            jobs=len(jobs[(project_id, uid)]),
        )
        for (project_id, uid), (milli_seconds, byte_seconds) in totals.items()
    ]
    return sorted(rows, key=lambda r: (-r.gpu_seconds, r.project, r.user))


def _names(
    session: Session, projects: Iterable[int], users: Iterable[int]
) -> tuple[dict[int, str], dict[int, str]]:
    """The names of ``projects`` and ``users`` by id."""
    project_names: dict[int, str] = {
        pid: name
        for pid, name in session.execute(
            select(Project.id, Project.name).where(Project.id.in_(list(projects)))
        )
    }
    user_names: dict[int, str] = {
        uid: name
        for uid, name in session.execute(select(User.id, User.name).where(User.id.in_(list(users))))
    }
    return project_names, user_names
