"""The jobs of a plain (``danlu`` format) workload file: rigid jobs of given durations, with
the optional columns a job spec has (priority, GPU memory share, family, project, user, time
limit), submitted from the first job's submission."""

from __future__ import annotations

import dataclasses
import functools
import math
from pathlib import Path

from danlu.core.errors import DataError, SpecError
from danlu.core.spec import MAX_GPUS, MAX_PRIORITY, MODEL_FAMILIES, parse_spec
from danlu.core.values import plain_float
from danlu.sched.view import JobRequest
from danlu.sim.workload_columns import refuse_duration_text
from danlu.sim.workload_fields import JobNames, job_name, number, seconds, whole_number
from danlu.sim.workload_jobs import RigidWork, WorkloadJob
from danlu.sim.workload_rows import Rows


def plain_jobs(p: Path, rows: Rows, names: JobNames) -> list[WorkloadJob]:
    """The jobs of plain workload ``p`` from its ``rows``
    (:func:`~danlu.sim.workload_rows.workload_rows`), their submissions counted from the
    first's."""
    jobs: list[WorkloadJob] = []
    for line, row in rows:
        duration = seconds(row, "duration", p, line)  # as given: under 1 s too
        limit = _time_limit(row, p, line)
        request = JobRequest(
            id=job_name(row, p, line),
            submit_time=seconds(row, "submit_time", p, line),
            gpus=whole_number(row, "gpus", p, line, 1, MAX_GPUS),
            priority=_priority(row, p, line),
            gpu_memory=_gpu_memory(row, p, line),
            seq=len(jobs),
            expected_duration=duration if limit is None else limit,
            family=_family(row, p, line),
            project=(row.get("project") or "").strip() or "default",
            user=(row.get("user") or "").strip(),
        )
        model = (row.get("model") or "").strip()
        names.add(request.id, line)
        jobs.append(WorkloadJob(request, RigidWork(duration, model), limit))
    return _from_first_submission(jobs)


def _time_limit(row: dict[str, str], path: Path, line: int) -> float | None:
    """A plain job's optional ``time_limit``: seconds above 0 (None when empty: no limit).
    A negative one is told the same rule as 0 (it was told ``must be >= 0``, and then 0
    was refused as not above 0)."""
    if not row.get("time_limit"):
        return None
    refuse_duration_text(row, "time_limit", path, line)
    value = number(row, "time_limit", path, line)
    if not value > 0:  # NaN too
        raise DataError(
            f"{path}:{line}: column 'time_limit' must be above 0 seconds, got "
            f"{row['time_limit']!r}; leave it empty for no limit"
        )
    return seconds(row, "time_limit", path, line)


def _priority(row: dict[str, str], path: Path, line: int) -> int:
    """A plain job's optional ``priority``: a whole number within the bounds a job spec's
    has (:data:`~danlu.core.spec.MAX_PRIORITY` either way), 0 when empty. Up to 2**62 used
    to be taken, a priority the control plane refuses in a spec."""
    text = (row.get("priority") or "").strip()
    if not text:
        return 0
    try:
        value = plain_float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value.is_integer()):
        raise DataError(f"{path}:{line}: column 'priority' must be a whole number, got {text!r}")
    if abs(value) > MAX_PRIORITY:
        raise DataError(
            f"{path}:{line}: column 'priority' must lie within {-MAX_PRIORITY:,}.."
            f"{MAX_PRIORITY:,}, as a job spec's priority, got {text!r}"
        )
    return int(value)


def _gpu_memory(row: dict[str, str], path: Path, line: int) -> int:
    """A plain job's ``gpu_memory``: the bytes of its share of each GPU (0 when empty: whole
    GPUs), read as the control plane reads a spec's ``resources.gpu_memory``
    (:func:`~danlu.core.spec.parse_spec`): a size with a unit (``16GiB``) or whole bytes of
    at least 1 MiB (a bare ``16`` is 16 bytes, which the server refuses), no fraction of a
    byte (``0.5``), and not ``auto`` (estimated from a trace the simulator does not run)."""
    text = (row.get("gpu_memory") or "").strip()
    if not text:
        return 0
    where = f"{path}:{line}: column 'gpu_memory'"
    try:
        memory = _spec_gpu_memory(text)
    except SpecError as exc:
        raise DataError(f"{where}: {exc.message}") from None
    if not isinstance(memory, int):
        raise DataError(
            f"{where}: {text!r} is estimated by the control plane from a trace, which the "
            "simulator does not run; give the share's size, e.g. 16GiB (empty: whole GPUs)"
        )
    return memory


@functools.lru_cache(maxsize=256)
def _spec_gpu_memory(text: str) -> int | str | None:
    """A spec's ``resources.gpu_memory`` of ``text``, or the spec's :class:`SpecError`
    (remembered by text: a workload repeats a few sizes over thousands of rows)."""
    return parse_spec(
        {"name": "workload-job", "resources": {"gpu_memory": text}}
    ).resources.gpu_memory


def _family(row: dict[str, str], path: Path, line: int) -> str:
    family = (row.get("family") or "").strip()
    if family and family not in MODEL_FAMILIES:
        raise DataError(
            f"{path}:{line}: column 'family' must be one of {', '.join(MODEL_FAMILIES)} "
            f"or empty, got {family!r}"
        )
    return family


def _from_first_submission(jobs: list[WorkloadJob]) -> list[WorkloadJob]:
    """The jobs with their submission times counted from the earliest one (which is then
    0), as a Philly trace's are: epoch seconds give a timeline from 0, not 55 years on."""
    origin = min((job.request.submit_time for job in jobs), default=0.0)
    if not origin:
        return jobs
    return [
        dataclasses.replace(
            job,
            request=dataclasses.replace(job.request, submit_time=job.request.submit_time - origin),
        )
        for job in jobs
    ]
