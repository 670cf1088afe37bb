"""Users' own GPU quotas (``users.quota_gpus``): the GPUs a user's running jobs may hold at
once, in all projects, as Slurm's ``MaxTRESPerUser=gres/gpu``.

They are kept as a project's quota is: the snapshot leaves out a pending job whose start
would take its user past the quota (it waits, with the reason), cuts an elastic job's range
to what the quota leaves (:func:`danlu.sched.quota.within_room`), and the recorded
plan is checked again (:mod:`danlu.server.services.record`). A job counts against both its
project's quota and its user's.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from danlu.sched.quota import Quota, Usage
from danlu.sched.quota import excess as quota_excess
from danlu.sched.quota import room as quota_room
from danlu.server.db.models import User


@dataclass(frozen=True, slots=True)
class UserQuota:
    """A user with a GPU quota."""

    id: int
    name: str
    gpus: float


def read_quotas(session: Session) -> dict[str, UserQuota]:
    """The users with a GPU quota, by name (none in most stores: one small query)."""
    query = select(User.id, User.name, User.quota_gpus).where(User.quota_gpus.is_not(None))
    return {
        name: UserQuota(uid, name, float(gpus))
        for uid, name, gpus in session.execute(query)
        if gpus is not None  # always: the query asks for it
    }


def as_quota(quota: UserQuota) -> Quota:
    """``quota`` as the scheduler's value type."""
    return Quota(f"user {quota.name!r}", quota.gpus)


def excess(quota: UserQuota, used: float, extra: float) -> str | None:
    """Why ``extra`` GPUs on top of ``used`` would take the user past its quota, or None."""
    return quota_excess(as_quota(quota), Usage(used), Usage(extra))


def room(quota: UserQuota, used: float) -> float:
    """Whole GPUs the user's quota leaves on top of ``used``."""
    return max(0.0, quota_room(as_quota(quota), Usage(used), 1))
