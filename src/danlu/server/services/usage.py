"""GPU usage over a period, by project and user: what a cluster's owners charge back; and
each project's recent usage, which the fair-share policy weighs.

Each stretch of a job on its GPUs is a :class:`~danlu.server.db.models.JobRun` row once it
ends (the job finished, was preempted or moved); the stretches still running are read off
the jobs holding GPUs, except a run waiting for its launch
(:func:`~danlu.server.services.jobs.waits_for_launch`: it waits for GPUs another run still
holds, and a stop before its launch charges it nothing; its launch starts its stretch). A
moved job's new run that waits for the run it left to stop counts from the move, as it is
charged once launched.
A stretch counts for the part of it inside the period, at the GPUs it held (thousandths of
a GPU for a share) and the GPU memory; its energy, where the control plane meters its GPUs,
from its :class:`~danlu.server.db.models.JobEnergy` row.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from sqlalchemy import BigInteger, ColumnElement, SQLColumnExpression, case, cast, func, select
from sqlalchemy.orm import Session

from danlu.core.cluster import MILLI_PER_GPU
from danlu.sched.project_usage import add_stretch
from danlu.server.db.models import Job, JobEnergy, JobRun, Project, User
from danlu.server.services.common import resolve_now
from danlu.server.services.jobs import WAITS_FOR_LAUNCH
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
    """Jobs with GPU time in the period (a stretch on GPUs inside it; a run stopped before
    its launch has none)."""
    energy: float | None = None
    """Joules the GPUs used (the metered stretches' energy, each counted for the part of
    its metered time inside the period); None when no stretch of theirs was metered."""


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
    seconds = _inside(JobRun.started_at, JobRun.ended_at, since, end)
    query = (
        select(
            JobRun.project_id,
            JobRun.user_id,
            JobRun.job_id,
            func.sum(seconds * JobRun.gpu_milli),
            func.sum(seconds * JobRun.gpu_memory),
        )
        # an empty stretch (a run stopped at its start, before its launch) is no usage: its
        # job is not counted among the period's
        .where(JobRun.ended_at > since, JobRun.started_at < end)
        .where(JobRun.ended_at > JobRun.started_at)
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
        Job.state.in_(HOLDING), Job.last_start < end, ~WAITS_FOR_LAUNCH
    )
    if user_id is not None:
        running = running.where(Job.user_id == user_id)
    for job_id, project_id, uid, last_start, allocation in session.execute(running):
        held = end - max(float(last_start), since)
        if held > 0 and allocation:
            milli = sum(int(s["milli"]) for s in allocation)
            memory = sum(int(s["memory"]) for s in allocation)
            add((project_id, uid), job_id, held * milli, held * memory)
    joules = _energy(session, since, end, user_id)
    names = _names(session, {p for p, _ in totals}, {u for _, u in totals})
    rows = [
        UsageRow(
            project=names[0].get(project_id, str(project_id)),
            user=names[1].get(uid, str(uid)),
            gpu_seconds=milli_seconds / MILLI_PER_GPU,
            gpu_memory_byte_seconds=byte_seconds,
            jobs=len(jobs[(project_id, uid)]),
            energy=joules.get((project_id, uid)),
        )
        for (project_id, uid), (milli_seconds, byte_seconds) in totals.items()
    ]
    return sorted(rows, key=lambda r: (-r.gpu_seconds, r.project, r.user))


def _inside(
    start: SQLColumnExpression[float], stop: SQLColumnExpression[float], since: float, end: float
) -> ColumnElement[float]:
    """The SQL seconds of ``[start, stop]`` (two columns) inside ``[since, end)``, for the
    rows that overlap it."""
    start_in = case((start > since, start), else_=since)
    end_in = case((stop < end, stop), else_=end)
    return end_in - start_in


def _energy(
    session: Session, since: float, end: float, user_id: int | None
) -> dict[tuple[int, int], float]:
    """Joules by (project id, user id) of the metered stretches in ``[since, end)``: each
    stretch's energy so far, in proportion to the part of its metered time (from its start
    to its last charge) inside the period."""
    metered = JobEnergy.updated_at - JobEnergy.run_start
    inside = _inside(JobEnergy.run_start, JobEnergy.updated_at, since, end)
    part = case((metered > 0, inside / metered), else_=0.0)
    query = (
        select(JobEnergy.project_id, JobEnergy.user_id, func.sum(JobEnergy.joules * part))
        .where(JobEnergy.updated_at > since, JobEnergy.run_start < end)
        .group_by(JobEnergy.project_id, JobEnergy.user_id)
    )
    if user_id is not None:
        query = query.where(JobEnergy.user_id == user_id)
    return {(p, u): float(j or 0.0) for p, u, j in session.execute(query)}


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


RECENT_HORIZON = 24
"""Half-lives of the past that recent usage reads: older stretches weigh under 1e-7."""
RECENT_BUCKETS = 32
"""Time buckets per half-life in which finished stretches are summed (see
:func:`finished_recent_usage`)."""
RECENT_REREAD = 600.0
"""Seconds between full reads of the finished stretches' recent usage (at most a bucket's
width: ``half_life / RECENT_BUCKETS``); in between only the new stretches are read."""


@dataclass(frozen=True)
class RecentUsage:
    """What a policy that reads projects' recent usage needs from the store: its half-life
    and the recent usage, by project name, of the stretches that ended; the view adds the
    running ones from its jobs, but those in ``unlaunched``."""

    half_life: float
    finished: Mapping[str, float] = field(default_factory=dict)
    unlaunched: frozenset[str] = frozenset()
    """The ids of the jobs holding GPUs whose current run waits for its launch
    (:func:`unlaunched_jobs`): no stretch of theirs runs yet."""


def unlaunched_jobs(session: Session) -> frozenset[str]:
    """The ids of the jobs holding GPUs whose current run waits for its launch
    (:func:`~danlu.server.services.jobs.waits_for_launch`): their wait for GPUs another run
    holds is no usage (a stop before the launch charges none)."""
    query = select(Job.id).where(Job.state.in_(HOLDING), WAITS_FOR_LAUNCH)
    return frozenset(session.scalars(query))


def finished_recent_usage(
    session: Session, now: float, half_life: float, *, up_to_run: int | None = None
) -> dict[str, float]:
    """Each project's recent usage (:attr:`danlu.sched.project_usage.ProjectShare.recent_milli`)
    from its finished stretches on GPUs (:class:`JobRun` rows, those of id at most
    ``up_to_run`` when given), by project name; the stretches still running are the view's
    to add (they change every round).

    The database sums the stretches by project and by the time buckets their start and end
    fall in (``half_life / RECENT_BUCKETS`` wide), so that a long history comes back as a
    few hundred rows; each group is weighted at its mean start and end. A bucket's width
    moves a stretch's ends by at most 1/32 of a half-life, its weight by at most about 2%."""
    width = half_life / RECENT_BUCKETS
    since = now - RECENT_HORIZON * half_life
    query = (
        select(
            Project.name,
            func.sum(JobRun.gpu_milli),
            func.sum(JobRun.gpu_milli * JobRun.started_at),
            func.sum(JobRun.gpu_milli * JobRun.ended_at),
        )
        .join(Project, Project.id == JobRun.project_id)
        .where(JobRun.ended_at > since, JobRun.gpu_milli > 0)
        .group_by(
            Project.name,
            cast(JobRun.started_at / width, BigInteger),
            cast(JobRun.ended_at / width, BigInteger),
        )
    )
    if up_to_run is not None:
        query = query.where(JobRun.id <= up_to_run)
    recent: dict[str, float] = {}
    for name, total, start_sum, end_sum in session.execute(query):
        milli = float(total or 0)
        if milli > 0:
            start, end = float(start_sum) / milli, float(end_sum) / milli
            add_stretch(recent, name, milli, start, end, now, half_life)
    return recent


class RecentUsageCache:
    """The finished stretches' recent usage for the reconcile loop, without reading a long
    history every round: a full read (:func:`finished_recent_usage`) every
    :data:`RECENT_REREAD` seconds (or a bucket's width, if shorter), and in between the runs
    recorded since the last read (by id), each weighted exactly, the totals decayed to the
    time asked. A run committed late with a lower id than one already read waits for the
    next full read."""

    def __init__(self, half_life: float) -> None:
        self.half_life = half_life
        self.reread = min(RECENT_REREAD, half_life / RECENT_BUCKETS)
        self._read_at = -math.inf
        self._as_of = 0.0
        self._last_run = 0
        self._totals: dict[str, float] = {}

    def read(self, session: Session, now: float) -> RecentUsage:
        """The recent usage of the stretches that ended, at ``now``."""
        last_run = int(session.scalar(select(func.max(JobRun.id))) or 0)
        if not self._read_at <= now < self._read_at + self.reread:
            self._totals = finished_recent_usage(session, now, self.half_life, up_to_run=last_run)
            self._read_at = self._as_of = now
        else:
            self._decay(now)
            if last_run > self._last_run:
                rows = select(
                    Project.name, JobRun.gpu_milli, JobRun.started_at, JobRun.ended_at
                ).join(Project, Project.id == JobRun.project_id)
                rows = rows.where(JobRun.id > self._last_run, JobRun.id <= last_run)
                for name, milli, start, end in session.execute(rows):
                    totals, at, half_life = self._totals, self._as_of, self.half_life
                    add_stretch(totals, name, float(milli), start, end, at, half_life)
        self._last_run = last_run
        return RecentUsage(self.half_life, dict(self._totals), unlaunched_jobs(session))

    def _decay(self, now: float) -> None:
        if now > self._as_of:
            factor = math.exp2(-(now - self._as_of) / self.half_life)
            self._totals = {name: value * factor for name, value in self._totals.items()}
            self._as_of = now


@dataclass(frozen=True, slots=True)
class Standing:
    """What decides a project's turn in the fair-share policy, in GPUs."""

    gpus_held: float
    """GPUs (whole-GPU equivalents) its running jobs hold now."""
    recent_gpus: float | None
    """Its recent usage (the decayed average of GPUs held, running jobs included); None
    when the policy keeps no history."""


def standing(session: Session, now: float, half_life: float) -> dict[str, Standing]:
    """Every project's :class:`Standing` by name (projects with neither GPUs held nor
    recent usage left out); ``half_life`` 0: no recent usage."""
    held: dict[str, float] = {}
    recent = finished_recent_usage(session, now, half_life) if half_life > 0 else {}
    running = select(Project.name, Job.last_start, Job.allocation, WAITS_FOR_LAUNCH).join(
        Project, Project.id == Job.project_id
    )
    rows = session.execute(running.where(Job.state.in_(HOLDING)))
    for name, last_start, allocation, unlaunched in rows:
        milli = sum(int(s["milli"]) for s in allocation or ())
        held[name] = held.get(name, 0.0) + milli
        if half_life > 0 and last_start is not None and not unlaunched:
            add_stretch(recent, name, milli, float(last_start), now, now, half_life)
    return {
        name: Standing(
            held.get(name, 0.0) / MILLI_PER_GPU,
            recent.get(name, 0.0) / MILLI_PER_GPU if half_life > 0 else None,
        )
        for name in sorted(set(held) | set(recent))
    }
