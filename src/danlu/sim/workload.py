"""Workloads for the simulator: job requests plus how each job progresses.

Formats, recognised from the CSV header:

- **pollux**: ``name,time,application,num_replicas,batch_size`` (Pollux OSDI'21 artifact):
  profiled jobs that progress by the measured traces of their application.
- **philly**: ``timestamp,duration,num_gpus,gpu_time,cluster`` (Microsoft Philly, 2017):
  rigid jobs of known duration, named ``philly-N`` by their row (from 0); jobs of
  ``num_gpus`` 0 are left out, as an openb list's CPU-only pods are (they used to run as
  1-GPU jobs, GPU demand the trace never had; the Pollux artifact's copy has none), and
  named in :attr:`Workload.no_gpu`; submission times are relative to the first job (a
  ``timestamp`` without an offset is UTC, whatever the machine's time zone). ``cluster``
  is the job's virtual cluster (a team's share of the cluster in Philly, 15 of them in the
  Pollux artifact's copy): it becomes the job's ``project`` (empty: ``default``), for
  quotas (``danlu sim run --quota 6214e9=64``) and fair-share weights.
- **openb**: ``name,cpu_milli,memory_mib,num_gpu,gpu_milli,...,creation_time,deletion_time,
  scheduled_time`` (Alibaba GPU trace 2023): rigid jobs, fractional GPUs allowed, each running
  from its ``scheduled_time`` (empty: its ``creation_time``) to its ``deletion_time``.
  CPU-only pods are left out (named in :attr:`Workload.no_gpu`), and so are the GPU pods
  the trace never scheduled (``pod_phase`` ``Pending`` and no ``scheduled_time``: 861 of
  the 7,064 GPU pods of ``openb_pod_list_default.csv``), which have no known running time;
  the latter are named in :attr:`Workload.never_scheduled`.
- **danlu**: ``name,submit_time,gpus,duration[,priority][,gpu_memory][,family][,model]
  [,project][,time_limit][,user]``: a plain rigid list. ``submit_time``, ``duration`` and
  ``time_limit`` are seconds (at most :data:`MOST_SECONDS`, 1e12: a larger one, such as
  epoch nanoseconds, is refused); submission times are counted from the first job's, which
  is at 0 (epoch seconds work: the results and plots read from the first submission).
  ``gpu_memory`` asks for that part of each GPU, as a spec's ``resources.gpu_memory``: a
  size with a unit (``16GiB``, ``512MiB``) or whole bytes of at least 1 MiB (a bare ``16``
  is 16 bytes, refused as the server refuses it; so is a fraction of a byte, ``0.5``);
  empty or 0: whole GPUs. ``family`` names the model's family
  (:data:`~danlu.core.spec.MODEL_FAMILIES`, empty: unknown) for the sharing rule and the
  simulator's co-location slowdown, ``model`` the model as that slowdown's data names it
  (:attr:`RigidWork.model`; the scheduler sees only the family), ``project`` the job's
  project (empty: ``default``; the ``fair-share`` policy shares the GPUs between projects,
  and with ``users`` between a project's ``user`` values), ``time_limit`` the seconds it
  may hold GPUs over all its runs before it is cancelled (empty: no limit), as the spec's
  ``time_limit``.
  Its ``duration`` is the job's true running time, as given (under 1 s too, and 0: a job
  that ends as it starts); the scheduler is told it as the job's expected duration (one of
  0 the policies read as unknown, as a spec's), unless a ``time_limit`` is given: then it
  is told the limit, as the control plane tells it a spec's (a user's estimate, not the
  truth). (The Philly and openb formats keep a duration under 1 s as the trace gives it.)
  A column it does not read is named in :attr:`Workload.unread_columns` (``danlu sim``
  prints a note), and one that looks like a typo of a column the header lacks
  (``projct``) is refused, naming the column it looks like; a time written as a duration
  (``3h``) is refused naming the seconds to write.

Files are UTF-8 text, with or without a byte-order mark (a byte that is not UTF-8 is
reported on its line); spaces around the header's column names and the fields
(``name, submit_time, gpus, duration``) are ignored, and so is the names' case
(``Name,Submit_Time`` is ``name,submit_time``); numbers are written with the
digits 0-9 (``1_000`` and other scripts' digits are refused, not read as 1000). A row
too short to hold a column it needs is refused naming the columns it lacks (optional
columns it lacks are read as empty), and so is one with a value beyond the header's
columns (a field too many shifts the values after it; empty trailing fields are fine). A
file that leaves no GPU job to simulate (a header without rows, an openb list of CPU-only
or never-scheduled pods) is refused.
"""

from __future__ import annotations

import random
from pathlib import Path

from danlu.core.errors import ConfigError, DataError
from danlu.sched.view import JobRequest
from danlu.sim.csv_rows import NODE_COLUMNS
from danlu.sim.plain_workload import plain_jobs
from danlu.sim.setting_types import check_real, check_whole
from danlu.sim.trace_workloads import LeftOut, openb_jobs, philly_jobs, pollux_jobs
from danlu.sim.workload_columns import nearest_format, unread_plain_columns
from danlu.sim.workload_fields import MOST_SECONDS, JobNames
from danlu.sim.workload_jobs import (
    ProfiledWork,
    RigidWork,
    Work,
    Workload,
    WorkloadJob,
    in_submission_order,
)
from danlu.sim.workload_rows import Rows, workload_rows

__all__ = [
    "FORMATS",
    "MOST_SYNTHETIC_JOBS",
    "ProfiledWork",
    "RigidWork",
    "Work",
    "Workload",
    "WorkloadJob",
    "detect_format",
    "in_submission_order",
    "load_workload",
    "synthetic_workload",
]


FORMATS: dict[str, frozenset[str]] = {
    "pollux": frozenset({"name", "time", "application", "num_replicas", "batch_size"}),
    "philly": frozenset({"timestamp", "duration", "num_gpus"}),
    "openb": frozenset({"name", "num_gpu", "gpu_milli", "creation_time", "deletion_time"}),
    "danlu": frozenset({"name", "submit_time", "gpus", "duration"}),
}


def detect_format(header: list[str], path: Path | None = None) -> str:
    """The format whose required columns the header has; DataError lists the formats (and
    names ``path``, the file the header was read from, if given), or the formats a header
    with the required columns of several would be read as (it was read as the first)."""
    columns = {c.strip() for c in header}
    where = "" if path is None else f"{path}, line 1: "
    matched = [name for name, required in FORMATS.items() if required <= columns]
    if len(matched) > 1:
        raise DataError(
            f"{where}the columns fit several workload formats ({', '.join(matched)}); keep "
            f"the columns of one: "
            + "; ".join(f"{n}: {','.join(sorted(FORMATS[n]))}" for n in matched)
        )
    if matched:
        return matched[0]
    described = "; ".join(f"{n}: {','.join(sorted(c))}" for n, c in FORMATS.items())
    hint = ""  # a node list holds no jobs, JSON is no CSV: say so, and what reads it
    if columns.issuperset(NODE_COLUMNS):
        hint = (
            "; this looks like an openb node list (a cluster's nodes, no jobs): "
            "`danlu sim pack --nodes` reads it"
        )
    elif header and header[0].lstrip().startswith(("[", "{")):
        hint = (
            "; this looks like JSON: a workload is a CSV file whose first line names the "
            "columns (as examples/workloads/two-teams.csv)"
        )
    elif len(header) == 1 and (separator := _other_separator(header[0])):
        hint = (
            f"; the line holds no comma but {separator}: a workload's columns are separated "
            "by commas (save the file as comma-separated CSV)"
        )
    nearest = nearest_format(columns, FORMATS)
    raise DataError(
        f"{where}unrecognised workload columns {sorted(columns)}; expected one of "
        f"{described}{nearest}{hint}"
    )


_OTHER_SEPARATORS = {"\t": "tabs", ";": "semicolons", "|": "vertical bars"}
"""The separators a spreadsheet writes instead of commas, by how an error calls them."""


def _other_separator(line: str) -> str:
    """How the error calls the separator of ``line``, a header read as one column, if it
    holds one of :data:`_OTHER_SEPARATORS` (a tab- or semicolon-separated file); else empty."""
    return next((called for sep, called in _OTHER_SEPARATORS.items() if sep in line), "")


def load_workload(path: str | Path) -> Workload:
    """Load a workload CSV of any supported format (recognised from its columns)."""
    p = Path(path)
    with workload_rows(p) as (header, rows):
        return _workload(p, header, rows)


def _workload(p: Path, header: list[str], rows: Rows) -> Workload:
    """The workload of file ``p`` from its ``header`` and ``rows``
    (:func:`~danlu.sim.workload_rows.workload_rows`)."""
    kind = detect_format(header, p)
    names = JobNames(p)  # each job's name, and the line it is on
    left_out = LeftOut()  # the trace's jobs not simulated
    unread: tuple[str, ...] = ()  # a plain file's columns the format does not read
    if kind == "pollux":
        jobs = pollux_jobs(p, rows, names)
    elif kind == "philly":
        jobs = philly_jobs(p, rows, left_out)
    elif kind == "openb":
        jobs = openb_jobs(p, rows, names, left_out)
    else:
        unread = unread_plain_columns(p, header)  # (a typo of one it reads is refused)
        jobs = plain_jobs(p, rows, names)
    if not jobs:
        raise DataError(_no_jobs(p, kind, len(left_out.no_gpu), len(left_out.never_scheduled)))
    return Workload(
        p.stem,
        kind,
        in_submission_order(jobs),
        tuple(left_out.never_scheduled),
        tuple(left_out.no_gpu),
        unread,
    )


def _no_jobs(path: Path, kind: str, cpu_only: int, pending: int) -> str:
    """The error for a workload file that leaves no GPU job to simulate, with the cause."""
    if not cpu_only and not pending:
        cause = "the file has a header and no rows (no jobs)"
    elif kind == "philly":
        cause = f"its {cpu_only} job(s) ask for no GPU (num_gpus 0)"
    else:
        causes = [f"{cpu_only} CPU-only pod(s) (num_gpu 0)"] if cpu_only else []
        if pending:
            causes.append(
                f"{pending} GPU pod(s) never scheduled in the trace (pod_phase Pending, "
                "no scheduled_time)"
            )
        cause = "its pods are " + " and ".join(causes)
    return f"{path}: no GPU job to simulate ({kind} format): {cause}"


MOST_SYNTHETIC_JOBS = 1_000_000
"""The most jobs :func:`synthetic_workload` builds (a larger count is a typo: it would build
until memory ran out)."""


def synthetic_workload(jobs: int = 200, seed: int = 0, hours: float = 8.0) -> Workload:
    """A deterministic Philly-like workload: mostly 1-GPU jobs, some gangs of 2-16 GPUs,
    log-normal durations (minutes to hours), random priorities; used as the embedded
    default when no workload file is given."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or not 1 <= jobs <= MOST_SYNTHETIC_JOBS:
        raise ConfigError(
            f"jobs (--jobs) must be a whole number from 1 to {MOST_SYNTHETIC_JOBS:,}, got {jobs!r}"
        )
    check_whole("seed (--seed)", seed, "0")  # a list raised a bare TypeError in random
    if seed < 0:  # random.Random seeds with |seed|: -1 drew seed 1's workload under a new name
        raise ConfigError(f"seed (--seed) must be a whole number of 0 or more, e.g. 1; got {seed}")
    check_real("hours", hours, "8.0")  # a string, with a bare TypeError below
    if not 0 <= hours <= MOST_SECONDS / 3600.0:  # NaN too: it compares false
        raise ConfigError(
            f"hours must be a number of hours from 0 to {MOST_SECONDS / 3600.0:g} (the span "
            f"the submissions are drawn over), got {hours!r}"
        )
    rng = random.Random(int(seed))  # a NumPy integer too
    sizes = [1] * 70 + [2] * 12 + [4] * 10 + [8] * 6 + [16] * 2
    out: list[WorkloadJob] = []
    for i in range(jobs):
        submit = float(int(rng.uniform(0.0, hours * 3600.0)))
        gpus = rng.choice(sizes)
        duration = float(int(min(12 * 3600.0, max(60.0, rng.lognormvariate(7.2, 1.3)))))
        request = JobRequest(
            id=f"job-{i:04d}",
            submit_time=submit,
            gpus=gpus,
            priority=rng.choice([0, 0, 0, 1, 2]),
            seq=i,
            expected_duration=duration,
        )
        out.append(WorkloadJob(request, RigidWork(duration)))
    return Workload(f"synthetic-{jobs}-seed{seed}", "danlu", in_submission_order(out))
