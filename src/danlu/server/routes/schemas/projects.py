"""The models of projects (the queues) and of what their users' jobs used, and the function
that turns a project into one."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, field_validator

from danlu.server.db import Project
from danlu.server.routes.schemas.base import _In, _no_boolean
from danlu.server.routes.schemas.users import UserName
from danlu.server.services.projects import MAX_SHARE, MIN_SHARE, share_problem
from danlu.server.services.usage import Standing


class UsageOut(BaseModel):
    """What one user's jobs of one project used on GPUs in the period asked for."""

    project: str
    user: str
    gpu_hours: float
    gpu_memory_gib_hours: float
    jobs: int
    energy_kwh: float | None = None
    """kWh the jobs' GPUs used in the period (a stretch's metered energy counted for its
    part inside the period); null when none of them was metered."""


class ProjectOut(BaseModel):
    """A project (queue)."""

    name: str
    priority: int
    quota_gpus: float | None
    quota_gpu_memory: int | None
    share: float
    """Its weight in the fair-share policy (1 by default)."""
    members: list[str] = Field(default_factory=list)
    """The users who may submit jobs to it, by name; empty: every user may."""
    gpus_held: float | None = None
    """``GET /projects``: the GPUs its running jobs hold now."""
    recent_gpus: float | None = None
    """``GET /projects``: its recent usage in GPUs (the decayed average the fair-share
    policy's ``half_life`` weighs); null when the policy keeps no history."""
    notes: list[str] = []
    """``POST``/``PUT /projects``: what the request should know (a ``share`` other than 1
    given under a policy that does not read it)."""


_SHARE_RANGE: dict[str, Any] = {"minimum": MIN_SHARE, "maximum": MAX_SHARE}
"""A project's ``share`` range, as the OpenAPI schema shows it (:func:`_share_in_range`
checks it)."""


def _share_in_range(value: float | None) -> float | None:
    """A new ``share`` from :data:`MIN_SHARE` to :data:`MAX_SHARE`, refused with the range
    (pydantic's bound errors named one end only); a stored project's smaller one stays."""
    problem = None if value is None else share_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


class ProjectIn(_In):
    """A new project (admin)."""

    name: str = Field(max_length=63)
    priority: int = Field(default=0, ge=-1_000_000, le=1_000_000)
    quota_gpus: float | None = Field(default=None, ge=0, le=1e9, allow_inf_nan=False)
    quota_gpu_memory: int | None = Field(default=None, ge=0, le=2**62)
    share: float = Field(default=1.0, allow_inf_nan=False, json_schema_extra=_SHARE_RANGE)
    members: list[UserName] = Field(default_factory=list, max_length=10_000)
    """The users who may submit jobs to it (besides the admins); empty: every user."""

    _numbers = field_validator(
        "priority", "quota_gpus", "quota_gpu_memory", "share", mode="before"
    )(_no_boolean)
    _share = field_validator("share")(_share_in_range)


class ProjectPatch(_In):
    """A partial project: fields present are changed (``null`` removes a quota; ``members``
    replaces the list, ``[]`` opens the project to every user)."""

    priority: int | None = Field(default=None, ge=-1_000_000, le=1_000_000)
    quota_gpus: float | None = Field(default=None, ge=0, le=1e9, allow_inf_nan=False)
    quota_gpu_memory: int | None = Field(default=None, ge=0, le=2**62)
    share: float | None = Field(default=None, allow_inf_nan=False, json_schema_extra=_SHARE_RANGE)
    members: list[UserName] | None = Field(default=None, max_length=10_000)

    _numbers = field_validator(
        "priority", "quota_gpus", "quota_gpu_memory", "share", mode="before"
    )(_no_boolean)
    _share = field_validator("share")(_share_in_range)


def project_out(
    project: Project, standing: Standing | None = None, members: list[str] | None = None
) -> dict[str, Any]:
    """``project`` as the API's Project object, with its ``members``; with ``standing``,
    what it holds and used lately."""
    out: dict[str, Any] = {
        "name": project.name,
        "priority": project.priority,
        "quota_gpus": project.quota_gpus,
        "quota_gpu_memory": project.quota_gpu_memory,
        "share": project.share,
        "members": members or [],
    }
    if standing is not None:
        out["gpus_held"] = standing.gpus_held
        out["recent_gpus"] = standing.recent_gpus
    return out
