"""Projects (queues): priority, quotas (GPUs, GPU memory) and fair-share weight, and what
they use now."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from danlu.core.cluster import MILLI_PER_GPU
from danlu.core.errors import SpecError
from danlu.core.state import JobState
from danlu.sched.policies.fair_share import FairSharePolicy
from danlu.sched.project_usage import MAX_WEIGHT, MIN_WEIGHT
from danlu.sched.quota import Quota, Usage, excess
from danlu.server.db.models import Project
from danlu.server.errors import ConflictError, NotFoundError
from danlu.server.services.common import resolve_now

DEFAULT_PROJECT = "default"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}\Z")
HOLDING = (JobState.RUNNING.value, JobState.PREEMPTING.value)
"""States whose jobs hold GPUs."""


MAX_SHARE = MAX_WEIGHT
"""The largest fair-share weight a project may be given."""
MIN_SHARE = MIN_WEIGHT
"""The smallest fair-share weight a project may be given: a fair-share round divides by the
weights, and a tiny one (``1e-320``) made a quotient overflow to infinity. A project stored
with a smaller one before this bound keeps it (the scheduler weighs it as this)."""


def _check_quotas(quota_gpus: float | None, quota_gpu_memory: int | None) -> None:
    if quota_gpus is not None and quota_gpus < 0:
        raise SpecError("quota_gpus", "a quota cannot be negative; omit it for no limit")
    if quota_gpu_memory is not None and quota_gpu_memory < 0:
        raise SpecError("quota_gpu_memory", "a quota cannot be negative; omit it for no limit")


def share_problem(share: float) -> str | None:
    """What is wrong with ``share`` as a project's new fair-share weight (the message of the
    error naming ``share``), or None for one from :data:`MIN_SHARE` to :data:`MAX_SHARE`."""
    if math.isfinite(share) and MIN_SHARE <= share <= MAX_SHARE:
        return None
    return (
        f"a fair-share weight is from {MIN_SHARE:.6f} to {MAX_SHARE:,.0f}, not {share:g}; "
        "weights are relative: scale them all alike"
    )


SHARE_POLICY = FairSharePolicy.name
"""The one policy that reads a project's ``share``."""


def share_notes(share: float | None, policy: str) -> list[str]:
    """What to tell of a project's ``share`` set to ``share`` (None: not set) when the
    control plane schedules with ``policy``: that the weight counts for nothing under it,
    where it is not 1 (the default, which changes nothing under any policy)."""
    if share is None or share == 1.0 or policy == SHARE_POLICY:
        return []
    return [
        f"share {share:g} is kept, but only the {SHARE_POLICY} policy weighs projects by it; "
        f"this control plane schedules with {policy!r} (DANLU_POLICY), which does not"
    ]


def _check_share(share: float) -> None:
    problem = share_problem(share)
    if problem is not None:
        raise SpecError("share", problem)


def create_project(
    session: Session,
    name: str,
    priority: int = 0,
    quota_gpus: float | None = None,
    quota_gpu_memory: int | None = None,
    now: float | None = None,
    share: float = 1.0,
) -> Project:
    """Create a project; quotas ``None`` mean unlimited; ``share``: its fair-share weight.
    A taken name is a ConflictError."""
    if not _NAME.match(name):
        raise SpecError("name", "use 1-63 letters, digits, '.', '_' or '-'")
    _check_quotas(quota_gpus, quota_gpu_memory)
    _check_share(share)
    project = Project(
        name=name,
        priority=priority,
        quota_gpus=quota_gpus,
        quota_gpu_memory=quota_gpu_memory,
        share=share,
        created_at=resolve_now(now),
    )
    try:
        with session.begin_nested():
            session.add(project)
    except IntegrityError:
        raise ConflictError(f"a project named {name!r} already exists", field="name") from None
    return project


def ensure_default_project(session: Session, now: float | None = None) -> Project:
    """The ``default`` project, created on first use."""
    project = session.scalar(select(Project).where(Project.name == DEFAULT_PROJECT))
    if project is not None:
        return project
    try:
        return create_project(session, DEFAULT_PROJECT, now=now)
    except ConflictError:  # created concurrently
        return get_project(session, DEFAULT_PROJECT)


def project_for_use(session: Session, name: str, now: float | None = None) -> Project:
    """The project called ``name`` for a job, a quota or a webhook to use: ``default`` is
    made on first use (:func:`ensure_default_project`), another is
    :func:`get_project`'s (a :class:`NotFoundError` when there is none)."""
    if name == DEFAULT_PROJECT:
        return ensure_default_project(session, now)
    return get_project(session, name)


def get_project(session: Session, name: str) -> Project:
    """The project called ``name`` or :class:`NotFoundError` (field ``project``)."""
    project = session.scalar(select(Project).where(Project.name == name))
    if project is None:
        raise NotFoundError("project", name, "project")
    return project


def list_projects(session: Session) -> list[Project]:
    """All projects by name."""
    return list(session.scalars(select(Project).order_by(Project.name)))


class _Unset:
    """Marker for "leave this quota as it is" (``None`` removes a quota)."""


UNSET = _Unset()


def update_project(
    session: Session,
    name: str,
    *,
    priority: int | None = None,
    quota_gpus: float | _Unset | None = UNSET,
    quota_gpu_memory: int | _Unset | None = UNSET,
    share: float | None = None,
) -> Project:
    """Change a project's priority, quotas (pass ``None`` to remove a quota) and/or
    fair-share weight. ``default`` is made first when no job made it yet (it is made on
    first use: setting its quota on a new cluster was a 404)."""
    project = project_for_use(session, name)
    if share is not None:
        _check_share(share)
        project.share = share
    new_gpus = project.quota_gpus if isinstance(quota_gpus, _Unset) else quota_gpus
    new_mem = project.quota_gpu_memory if isinstance(quota_gpu_memory, _Unset) else quota_gpu_memory
    mem = None if new_mem is None else int(new_mem)
    _check_quotas(new_gpus, mem)
    if priority is not None:
        project.priority = priority
    project.quota_gpus = new_gpus
    project.quota_gpu_memory = mem
    session.flush()
    return project


def allocation_usage(allocation: Sequence[Mapping[str, Any]] | None) -> Usage:
    """GPUs and bytes held by one stored allocation."""
    if not allocation:
        return Usage()
    milli = sum(int(s["milli"]) for s in allocation)
    return Usage(milli / MILLI_PER_GPU, sum(int(s["memory"]) for s in allocation))


def with_quota(projects: Iterable[Project]) -> set[int]:
    """The ids of the projects with a quota (of GPUs, of GPU memory or both)."""
    return {p.id for p in projects if p.quota_gpus is not None or p.quota_gpu_memory is not None}


def project_quota(project: Project) -> Quota:
    """``project``'s quota as the scheduler's value type (no limit where it has none)."""
    return Quota(f"project {project.name!r}", project.quota_gpus, project.quota_gpu_memory)


def quota_excess(project: Project, used: Usage, extra: Usage) -> str | None:
    """Why ``extra`` on top of ``used`` would exceed ``project``'s quota, or ``None``."""
    return excess(project_quota(project), used, extra)
