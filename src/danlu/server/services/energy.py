"""Charging GPU energy to the jobs that held the GPUs (the store's side of
:mod:`danlu.server.energy`).

Each reading of the energy meter gives how many joules every GPU used since the last one.
A job holding ``milli`` thousandths of a GPU is charged that fraction of the GPU's energy (as
its GPU-hours count that fraction of the GPU's time), for the part of the interval it held
the GPU; what no job held is charged to nobody. The charge goes to the job's total
(``jobs.energy``) and to its current stretch on the GPUs (a :class:`JobEnergy` row), both
with Core UPDATEs that leave the job's version alone, so the reconcile loop's optimistic
writes never conflict with them. A stretch that ended, or a job whose GPUs changed, since
the allocations were read is not charged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sqlalchemy import func, insert, select, update
from sqlalchemy.orm import Session

from danlu.core.cluster import MILLI_PER_GPU
from danlu.devices.inventory import GpuKey
from danlu.server.db.models import Job, JobEnergy
from danlu.server.services.jobs import NOT_LAUNCHED
from danlu.server.services.projects import HOLDING


@dataclass(frozen=True, slots=True)
class Holding:
    """One job holding GPUs: since when, and its shares as ``(node, gpu, milli)``."""

    job_id: str
    last_start: float
    project_id: int
    user_id: int
    shares: tuple[tuple[str, int, int], ...]


def holdings(session: Session) -> list[Holding]:
    """The jobs holding GPUs now, with their shares; not one whose current run the executor
    has not launched (:func:`~danlu.server.services.jobs.not_launched`: it waits for GPUs
    another run still holds, whose energy that run uses)."""
    query = select(Job.id, Job.last_start, Job.project_id, Job.user_id, Job.allocation).where(
        Job.state.in_(HOLDING), ~NOT_LAUNCHED
    )
    out = []
    for job_id, last_start, project_id, user_id, allocation in session.execute(query):
        if last_start is None or not allocation:
            continue
        shares = tuple((str(s["node"]), int(s["gpu"]), int(s["milli"])) for s in allocation)
        out.append(Holding(job_id, float(last_start), project_id, user_id, shares))
    return out


def busy(held: Iterable[Holding]) -> dict[GpuKey, int]:
    """Milli-GPU held on each GPU."""
    load: dict[GpuKey, int] = {}
    for holding in held:
        for node, gpu, milli in holding.shares:
            load[(node, gpu)] = load.get((node, gpu), 0) + milli
    return load


def charges(
    held: Iterable[Holding], used: Mapping[GpuKey, float], since: float, t: float
) -> dict[Holding, float]:
    """Joules to charge each job for the interval ``[since, t]`` in which each GPU used
    ``used`` joules: its share of each GPU's energy, for the part of the interval after
    its stretch began. A job on none of the metered GPUs (another control plane's, sharing
    the store) is left out."""
    length = t - since
    out: dict[Holding, float] = {}
    for holding in held:
        if not any((node, gpu) in used for node, gpu, _ in holding.shares):
            continue
        part = 1.0 if length <= 0 else min(1.0, max(0.0, (t - holding.last_start) / length))
        joules = sum(used.get((node, gpu), 0.0) * milli for node, gpu, milli in holding.shares)
        out[holding] = joules / MILLI_PER_GPU * part
    return out


def charge(session: Session, charged: Mapping[Holding, float], t: float) -> int:
    """Add each job's charge to its total and its stretch's row (metered up to ``t``),
    where the job still holds GPUs from the same start. Returns the jobs charged."""
    done = 0
    for holding, joules in charged.items():
        added = session.execute(
            update(Job)
            .where(
                Job.id == holding.job_id,
                Job.state.in_(HOLDING),
                Job.last_start == holding.last_start,
            )
            .values(energy=func.coalesce(Job.energy, 0.0) + joules)
            .execution_options(synchronize_session=False)
        )
        if not added.rowcount:  # type: ignore[attr-defined]  # CursorResult of an UPDATE
            continue
        done += 1
        stretch = session.execute(
            update(JobEnergy)
            .where(JobEnergy.job_id == holding.job_id, JobEnergy.run_start == holding.last_start)
            .values(joules=JobEnergy.joules + joules, updated_at=t)
            .execution_options(synchronize_session=False)
        )
        if not stretch.rowcount:  # type: ignore[attr-defined]
            session.execute(
                insert(JobEnergy).values(
                    job_id=holding.job_id,
                    project_id=holding.project_id,
                    user_id=holding.user_id,
                    run_start=holding.last_start,
                    updated_at=t,
                    joules=joules,
                )
            )
    return done
