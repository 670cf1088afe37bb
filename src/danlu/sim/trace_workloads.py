"""The jobs of the published traces' workload formats (:mod:`danlu.sim.workload` tells them
apart by their columns): Pollux's profiled jobs, and Philly's and openb's rigid ones, with
the jobs a trace lists that are not simulated (:class:`LeftOut`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from danlu.core.cluster import MILLI_PER_GPU
from danlu.core.errors import DataError
from danlu.core.spec import MAX_BATCH, MAX_GPUS
from danlu.core.units import MiB
from danlu.sched.view import JobRequest
from danlu.sim.workload_fields import (
    MAX_CPU_MILLI,
    MAX_MEMORY_MIB,
    JobNames,
    job_name,
    nonnegative_number,
    seconds,
    whole_number,
)
from danlu.sim.workload_jobs import ProfiledWork, RigidWork, WorkloadJob
from danlu.sim.workload_rows import Rows


@dataclass
class LeftOut:
    """The jobs of a trace that are not simulated, by name in file order."""

    no_gpu: list[str] = field(default_factory=list)
    """Those that ask for no GPU (:attr:`~danlu.sim.workload_jobs.Workload.no_gpu`)."""
    never_scheduled: list[str] = field(default_factory=list)
    """An openb list's GPU pods the trace never scheduled
    (:attr:`~danlu.sim.workload_jobs.Workload.never_scheduled`)."""


def pollux_jobs(p: Path, rows: Rows, names: JobNames) -> list[WorkloadJob]:
    """The jobs of a Pollux workload ``p``: profiled, each progressing by the measured traces
    of its ``application``."""
    jobs: list[WorkloadJob] = []
    for line, row in rows:
        replicas = whole_number(row, "num_replicas", p, line, 1, MAX_GPUS)
        batch = whole_number(row, "batch_size", p, line, 1, MAX_BATCH)
        request = JobRequest(
            id=job_name(row, p, line),
            submit_time=seconds(row, "time", p, line),
            gpus=replicas,
            seq=len(jobs),
            batch_size=batch,
        )
        work = ProfiledWork(pollux_application(row, p, line), batch)
        names.add(request.id, line)
        jobs.append(WorkloadJob(request, work))
    return jobs


def philly_jobs(p: Path, rows: Rows, left_out: LeftOut) -> list[WorkloadJob]:
    """The jobs of a Philly trace ``p``, named ``philly-N`` by their row, submitted at the
    seconds since the first; those of ``num_gpus`` 0 go to ``left_out``."""
    jobs: list[WorkloadJob] = []
    raw: list[tuple[float, float, int, int, str]] = []
    for index, (line, row) in enumerate(rows):  # jobs are named by their row
        if not row.get("timestamp"):
            raise DataError(
                f"{p}:{line}: column 'timestamp' is missing or empty; give every job its "
                "submission date-time (a row with fewer fields than the header lacks it)"
            )
        try:
            stamp = utc_timestamp(row["timestamp"])
        except ValueError:
            raise DataError(
                f"{p}:{line}: column 'timestamp' must be an ISO date-time, "
                f"got {row['timestamp']!r}; write it as 2017-10-09 07:01:55 (UTC unless "
                "it has an offset), or give seconds in the danlu format's submit_time"
            ) from None
        gpus = whole_number(row, "num_gpus", p, line, 0, MAX_GPUS)
        team = (row.get("cluster") or "").strip() or "default"  # its virtual cluster
        duration = seconds(row, "duration", p, line)  # as given: under 1 s too
        if gpus == 0:  # takes no GPU: not part of a GPU schedule (as openb's CPU pods)
            left_out.no_gpu.append(f"philly-{index}")
            continue
        raw.append((stamp, duration, gpus, index, team))
    raw.sort(key=lambda r: (r[0], r[3]))
    origin = raw[0][0] if raw else 0.0
    for stamp, duration, gpus, index, team in raw:
        request = JobRequest(
            id=f"philly-{index}",
            submit_time=stamp - origin,
            gpus=gpus,
            seq=len(jobs),
            expected_duration=duration,
            project=team,
        )
        jobs.append(WorkloadJob(request, RigidWork(duration)))
    return jobs


def openb_jobs(p: Path, rows: Rows, names: JobNames, left_out: LeftOut) -> list[WorkloadJob]:
    """The jobs of an openb pod list ``p``, each running from its scheduling to its deletion;
    its CPU-only pods and the GPU pods it never scheduled go to ``left_out``."""
    jobs: list[WorkloadJob] = []
    for line, row in rows:
        gpus = whole_number(row, "num_gpu", p, line, 0, MAX_GPUS)
        milli = openb_milli(row, gpus, p, line) if gpus else MILLI_PER_GPU
        # 0 is a time like any other (the trace's first pods are scheduled at 0)
        start = seconds(row, "scheduled_time", p, line) if row.get("scheduled_time") else None
        if gpus and start is None and row.get("pod_phase") == "Pending":
            left_out.never_scheduled.append(job_name(row, p, line))  # never got its GPUs
            continue
        created = seconds(row, "creation_time", p, line)
        deleted = seconds(row, "deletion_time", p, line)
        if start is not None and start < created:
            raise DataError(
                f"{p}:{line}: column 'scheduled_time' ({row['scheduled_time']}) is before "
                f"the pod's creation_time ({row['creation_time']}); a pod is scheduled "
                "after it is created"
            )
        began = created if start is None else start
        if deleted < began:
            since = "creation_time" if start is None else "scheduled_time"
            raise DataError(
                f"{p}:{line}: column 'deletion_time' ({row['deletion_time']}) is before "
                f"the pod's {since} ({row[since]}); a pod is deleted after it starts"
            )
        duration = deleted - began  # as the trace gives it: under 1 s too
        request = JobRequest(
            id=job_name(row, p, line),
            submit_time=created,
            gpus=gpus,
            gpu_milli=milli if gpus else 0,
            cpu_milli=whole_number(row, "cpu_milli", p, line, 0, MAX_CPU_MILLI),
            memory=whole_number(row, "memory_mib", p, line, 0, MAX_MEMORY_MIB) * MiB,
            seq=len(jobs),
            expected_duration=duration,
        )
        if gpus == 0:
            left_out.no_gpu.append(request.id)  # takes no GPU: not part of a GPU schedule
            continue
        names.add(request.id, line)
        jobs.append(WorkloadJob(request, RigidWork(duration)))
    return jobs


def pollux_application(row: dict[str, str], path: Path, line: int) -> str:
    """A pollux job's ``application``: the name of the measured traces it progresses by."""
    application = (row.get("application") or "").strip()
    if not application:
        raise DataError(
            f"{path}:{line}: column 'application' is empty; give every job the application "
            "whose measured traces it follows (bert, cifar10, imagenet, ...)"
        )
    return application


def openb_milli(row: dict[str, str], gpus: int, path: Path, line: int) -> int:
    """An openb pod's ``gpu_milli``: a 1-GPU pod's share of the GPU, 1..1000 thousandths;
    a pod of more GPUs takes them whole (1000, as the FGD experiment's pod lists must
    give it; empty is taken as whole too). A 2-GPU pod of 500 used to run on whole GPUs
    silently."""
    if gpus > 1:
        text = (row.get("gpu_milli") or "").strip()
        if text and nonnegative_number(row, "gpu_milli", path, line) != MILLI_PER_GPU:
            raise DataError(
                f"{path}:{line}: column 'gpu_milli' must be {MILLI_PER_GPU} for a {gpus}-GPU "
                f"pod (it takes whole GPUs; only a 1-GPU pod shares one), got {text!r}"
            )
        return MILLI_PER_GPU
    value = nonnegative_number(row, "gpu_milli", path, line)
    if not value.is_integer() or not 0 < value <= MILLI_PER_GPU:
        raise DataError(
            f"{path}:{line}: column 'gpu_milli' must be a whole number from 1 to "
            f"{MILLI_PER_GPU} for a 1-GPU pod (its share of the GPU), got {row['gpu_milli']!r}"
        )
    return int(value)


def utc_timestamp(text: str) -> float:
    """Seconds since the epoch of an ISO date-time, read as UTC unless it has an offset
    (``2017-10-09 07:01:55`` is UTC, ``...+02:00`` keeps its offset): never the machine's
    time zone, whose daylight-saving changes would shift the gaps between submissions.
    ValueError if it is not an ISO date-time."""
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()
