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

import codecs
import contextlib
import csv
import dataclasses
import functools
import math
import random
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from danlu.core.cluster import MILLI_PER_GPU
from danlu.core.errors import ConfigError, DataError, SpecError
from danlu.core.spec import MAX_BATCH, MAX_GPUS, MAX_PRIORITY, MODEL_FAMILIES, parse_spec
from danlu.core.units import MiB
from danlu.core.values import plain_float
from danlu.sched.view import JobRequest
from danlu.sim.csv_rows import NODE_COLUMNS, bounded_lines, check_no_extra_values, column_names
from danlu.sim.setting_types import check_real, check_whole
from danlu.sim.workload_columns import nearest_format, refuse_duration_text, unread_plain_columns


@dataclass(frozen=True, slots=True)
class RigidWork:
    """A job that needs ``duration`` seconds of running on its requested GPUs."""

    duration: float
    model: str = ""
    """The model it trains, as the simulator's interference data names it (e.g. Gavel's
    ``"ResNet-18 (batch size 64)"``); empty: only its family is known. The scheduler never
    sees it."""


@dataclass(frozen=True, slots=True)
class ProfiledWork:
    """A job of a profiled application trained at a fixed global ``batch_size``."""

    application: str
    batch_size: int


Work = RigidWork | ProfiledWork


@dataclass(frozen=True, slots=True)
class WorkloadJob:
    """One job of a workload: what the scheduler sees and what the simulator runs."""

    request: JobRequest
    work: Work
    time_limit: float | None = None
    """Seconds it may hold GPUs over all its runs; reached, it is cancelled (None: never)."""


@dataclass(frozen=True)
class Workload:
    """A named list of jobs sorted by submission."""

    name: str
    format: str
    jobs: tuple[WorkloadJob, ...]
    never_scheduled: tuple[str, ...] = ()
    """The GPU pods of an openb list that the trace never scheduled (``pod_phase`` Pending,
    no ``scheduled_time``), in file order: left out of :attr:`jobs`, having no known
    running time."""
    no_gpu: tuple[str, ...] = ()
    """The jobs that ask for no GPU (an openb list's CPU-only pods, by name; a Philly
    trace's ``num_gpus`` 0 jobs, by the ``philly-N`` name of their row), in file order:
    left out of :attr:`jobs`, as they are no part of a GPU schedule."""
    unread_columns: tuple[str, ...] = ()
    """The columns of a plain (``danlu`` format) file that the format does not read
    (:func:`~danlu.sim.workload_columns.unread_plain_columns`), in header order: they
    change nothing, and ``danlu sim`` says so."""


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


def repeated_columns(header: Sequence[str]) -> list[str]:
    """The column names a CSV header has more than once (empty ones aside), in order."""
    counts = Counter(name for name in header if name)
    return [name for name, n in counts.items() if n > 1]


def repeated_message(path: Path, repeated: Sequence[str]) -> str:
    """The error for a header with ``repeated`` columns: a row would keep only one."""
    names = ", ".join(repr(name) for name in repeated)
    return (
        f"{path}, line 1: column(s) {names} appear more than once in the header; "
        "keep one of each (a row would silently keep only one of the values)"
    )


WORKLOAD_FLAG = "--workload"
"""The ``danlu sim`` option that gives a workload file, named in the errors of
:func:`load_workload` (its only caller in the CLI)."""


@contextlib.contextmanager
def _rows(path: Path) -> Iterator[tuple[list[str], Iterator[tuple[int, dict[str, str]]]]]:
    """Open ``path`` for as long as the ``with`` block lasts, giving the header's column
    names and the rows, each with the line of the file it starts on (blank lines are
    skipped but counted; a row with a quoted field that spans lines is reported where it
    starts), names and fields stripped of spaces (``name, submit_time``); a UTF-8
    byte-order mark is skipped. As :class:`csv.DictReader`, a field missing at the end of a
    short row is None; empty fields beyond the header (a spreadsheet's trailing commas) are
    dropped, and a row with a value beyond it is refused: a field too many before them
    shifts every value after it into the next column (``j1,0,2,1,3600`` under
    ``name,submit_time,gpus,duration`` ran for 1 s, its 3600 silently dropped). The file is
    closed when the block ends, whether the rows were all read or an error stopped it (it
    used to stay open after an unrecognised header, until garbage collection).

    Raises:
        DataError: the file cannot be read, is empty, or its header is blank or repeats a
            column, or a row has a value beyond the header's columns, or a line is longer
            than :data:`~danlu.sim.csv_rows.MAX_LINE_CHARS` (``/dev/zero`` was read for
            ever); the message names the file (and the row's line).
    """
    try:
        handle = path.open(newline="", encoding="utf-8-sig")
    except OSError as exc:
        # the flag too, as the line-length errors name it: the path alone named no option
        reason = exc.strerror or exc
        raise DataError(f"cannot read workload {path} ({WORKLOAD_FLAG}): {reason}") from None
    with handle:
        reader = csv.reader(bounded_lines(handle, path, f"a workload ({WORKLOAD_FLAG})"))
        try:
            first = next(reader, None)
        except (UnicodeDecodeError, csv.Error) as exc:
            raise DataError(_unreadable(path, 1, exc)) from None
        if not first:
            example = "name,submit_time,gpus,duration"
            if first is None:
                raise DataError(f"{path}: empty file, expected a header line such as {example}")
            raise DataError(f"{path}, line 1: blank; the first line must be the header ({example})")
        header = column_names(first)
        repeated = repeated_columns(header)
        if repeated:
            raise DataError(repeated_message(path, repeated))

        def rows() -> Iterator[tuple[int, dict[str, str]]]:
            start = reader.line_num + 1  # the line the next row starts on
            try:
                for fields in reader:
                    if fields:  # a blank line reads as no fields
                        extra = fields[len(header) :]
                        check_no_extra_values(path, start, len(header), extra, _ROW_FIX)
                        row: dict[str, Any] = dict.fromkeys(header[len(fields) :])  # short: None
                        row.update(zip(header, (f.strip() for f in fields), strict=False))
                        yield start, row
                    start = reader.line_num + 1
            except (UnicodeDecodeError, csv.Error) as exc:
                raise DataError(_unreadable(path, start, exc)) from None

        yield header, rows()


_ROW_FIX = "quote a value holding a comma, or name every column in the header"
"""How a workload row with a value beyond its header is written instead."""


def _whole_number(
    row: dict[str, str], column: str, path: Path, line: int, least: int, most: int
) -> int:
    """A column holding a whole number from ``least`` to ``most`` (2.5 GPUs used to be read
    as 2, and ``1e300`` GPUs was taken as asked). A negative or infinite value gets this
    message too (it was told ``must be >= 0``, and then 0 was refused as below ``least``)."""
    value = _number(row, column, path, line)
    if not (math.isfinite(value) and value.is_integer()) or value < least:
        raise DataError(
            f"{path}:{line}: column {column!r} must be a whole number >= {least}, got "
            f"{row[column]!r}"
        )
    if value > most:
        raise DataError(
            f"{path}:{line}: column {column!r} must be at most {most:,}, got {row[column]!r}"
        )
    return int(value)


def _unreadable(path: Path, line: int, exc: Exception) -> str:
    """The message for a workload file that is not UTF-8 CSV text: on ``line``, the line
    the CSV reader was on, or for a byte that is not UTF-8 the line that byte is on (the
    reader decodes 8 KiB at a time, ahead of the line it reads)."""
    if isinstance(exc, UnicodeDecodeError):
        line = undecodable_line(path) or line
    return f"{path}:{line}: not a UTF-8 CSV file ({exc}); save the workload as UTF-8 text"


def undecodable_line(path: Path) -> int | None:
    """The line (from 1) of the first byte of ``path`` that is not UTF-8, counting the
    newlines before it; None if every byte is (or the file cannot be read)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    line = 1
    try:
        with path.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                pending = len(decoder.getstate()[0])  # bytes of a character cut at the end
                try:
                    decoder.decode(chunk)
                except UnicodeDecodeError as exc:  # its start counts the pending bytes too
                    return line + chunk[: max(exc.start - pending, 0)].count(b"\n")
                line += chunk.count(b"\n")
            decoder.decode(b"", final=True)  # a character cut short by the file's end
    except UnicodeDecodeError:
        return line
    except OSError:
        return None
    return None


def _num(row: dict[str, str], column: str, path: Path, line: int) -> float:
    """The number in ``column`` (finite, >= 0), or a :class:`DataError` naming the file,
    line and column (:func:`_number`)."""
    value = _number(row, column, path, line)
    if not math.isfinite(value) or value < 0:
        raise DataError(f"{path}:{line}: column {column!r} must be >= 0, got {value}")
    return value


def _number(row: dict[str, str], column: str, path: Path, line: int) -> float:
    """The number in ``column`` (any float, NaN and infinities too), or a
    :class:`DataError` naming the file, line and column: also for a row too short to reach
    the column (its field is None, which raised a bare AttributeError)."""
    if column in row and row[column] is None:
        lacks = ", ".join(repr(name) for name, value in row.items() if value is None)
        raise DataError(
            f"{path}:{line}: column {column!r} is missing: the row has fewer fields than the "
            f"header (it lacks {lacks}); give every row a value for each column (empty ones "
            "separated by commas)"
        )
    try:
        value = plain_float(row[column])
    except (KeyError, TypeError, ValueError):
        raise DataError(
            f"{path}:{line}: column {column!r} must be a number (digits 0-9, no '_'), got "
            f"{row.get(column)!r}"
        ) from None
    return value


MAX_CPU_MILLI = 1_000_000_000
"""Most CPU an openb node may have, or a pod ask for: a million cores (the openb lists: 128)."""
MAX_MEMORY_MIB = 1 << 30
"""Most host memory an openb node may have, or a pod ask for: 1 PiB (the openb lists: 1 TiB).
With these bounds every sum over a cluster stays well within 64-bit integers (larger
values crashed the run with OverflowError)."""

MOST_SECONDS = 1e12
"""The largest time a plain workload's ``submit_time``, ``duration`` or ``time_limit`` may
have, in seconds (over 30,000 years; the simulated clock still steps by
:data:`~danlu.sim.config.MIN_INTERVAL` there): a larger one is in a smaller unit. Epoch
seconds (about 1.7e9) are within it; epoch milliseconds of any date since 2001 (1e12 and
more), microseconds and nanoseconds (about 1.7e18) are not."""
_SMALLER_UNITS = (("milliseconds", 1e3), ("microseconds", 1e6), ("nanoseconds", 1e9))


def _seconds(row: dict[str, str], column: str, path: Path, line: int) -> float:
    """A column of seconds (:func:`_num`) of at most :data:`MOST_SECONDS`; a larger value
    is refused naming the units it looks like, and so is a duration (``3h``), naming the
    seconds to write."""
    refuse_duration_text(row, column, path, line)
    value = _num(row, column, path, line)
    if value <= MOST_SECONDS:
        return value
    units = [name for name, per_second in _SMALLER_UNITS if value / per_second <= MOST_SECONDS]
    listed = " or ".join([", ".join(units[:-1]), units[-1]] if len(units) > 1 else units)
    looks = f"looks like {listed}" if units else "is no time in seconds"
    raise DataError(
        f"{path}:{line}: column {column!r} is seconds; {value:g} (over 30,000 years) {looks}: "
        f"give the times in seconds (at most {MOST_SECONDS:g})"
    )


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


def _name(row: dict[str, str], path: Path, line: int) -> str:
    """The job's name: the ``name`` column, which must not be empty (results name jobs by it)."""
    name = row.get("name") or ""
    if not name.strip():
        raise DataError(f"{path}:{line}: column 'name' is empty; give every job a name")
    return name


def _application(row: dict[str, str], path: Path, line: int) -> str:
    """A pollux job's ``application``: the name of the measured traces it progresses by."""
    application = (row.get("application") or "").strip()
    if not application:
        raise DataError(
            f"{path}:{line}: column 'application' is empty; give every job the application "
            "whose measured traces it follows (bert, cifar10, imagenet, ...)"
        )
    return application


def _openb_milli(row: dict[str, str], gpus: int, path: Path, line: int) -> int:
    """An openb pod's ``gpu_milli``: a 1-GPU pod's share of the GPU, 1..1000 thousandths;
    a pod of more GPUs takes them whole (1000, as the FGD experiment's pod lists must
    give it; empty is taken as whole too). A 2-GPU pod of 500 used to run on whole GPUs
    silently."""
    if gpus > 1:
        text = (row.get("gpu_milli") or "").strip()
        if text and _num(row, "gpu_milli", path, line) != MILLI_PER_GPU:
            raise DataError(
                f"{path}:{line}: column 'gpu_milli' must be {MILLI_PER_GPU} for a {gpus}-GPU "
                f"pod (it takes whole GPUs; only a 1-GPU pod shares one), got {text!r}"
            )
        return MILLI_PER_GPU
    value = _num(row, "gpu_milli", path, line)
    if not value.is_integer() or not 0 < value <= MILLI_PER_GPU:
        raise DataError(
            f"{path}:{line}: column 'gpu_milli' must be a whole number from 1 to "
            f"{MILLI_PER_GPU} for a 1-GPU pod (its share of the GPU), got {row['gpu_milli']!r}"
        )
    return int(value)


def _family(row: dict[str, str], path: Path, line: int) -> str:
    family = (row.get("family") or "").strip()
    if family and family not in MODEL_FAMILIES:
        raise DataError(
            f"{path}:{line}: column 'family' must be one of {', '.join(MODEL_FAMILIES)} "
            f"or empty, got {family!r}"
        )
    return family


def load_workload(path: str | Path) -> Workload:
    """Load a workload CSV of any supported format (recognised from its columns)."""
    p = Path(path)
    with _rows(p) as (header, rows):
        return _workload(p, header, rows)


def _workload(p: Path, header: list[str], rows: Iterator[tuple[int, dict[str, str]]]) -> Workload:
    """The workload of file ``p`` from its ``header`` and ``rows`` (:func:`_rows`)."""
    kind = detect_format(header, p)
    jobs: list[WorkloadJob] = []
    left_out: dict[str, list[str]] = {"cpu": [], "pending": []}  # openb pods not simulated
    lines: dict[str, int] = {}  # each job's name, and the line it is on
    unread: tuple[str, ...] = ()  # a plain file's columns the format does not read

    def unique(name: str, line: int) -> None:
        """Refuse a job name used on an earlier line, naming both lines (the jobs'
        places among the jobs kept were named, which are not the file's rows when an
        openb list's CPU-only or never-scheduled pods come before them)."""
        first = lines.setdefault(name, line)
        if first != line:
            raise DataError(
                f"{p}:{line}: job name {name!r} is used twice (lines {first} and {line}); "
                "give every job its own name"
            )

    if kind == "pollux":
        for line, row in rows:
            replicas = _whole_number(row, "num_replicas", p, line, 1, MAX_GPUS)
            batch = _whole_number(row, "batch_size", p, line, 1, MAX_BATCH)
            request = JobRequest(
                id=_name(row, p, line),
                submit_time=_seconds(row, "time", p, line),
                gpus=replicas,
                seq=len(jobs),
                batch_size=batch,
            )
            work = ProfiledWork(_application(row, p, line), batch)
            unique(request.id, line)
            jobs.append(WorkloadJob(request, work))
    elif kind == "philly":
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
            gpus = _whole_number(row, "num_gpus", p, line, 0, MAX_GPUS)
            team = (row.get("cluster") or "").strip() or "default"  # its virtual cluster
            duration = _seconds(row, "duration", p, line)  # as given: under 1 s too
            if gpus == 0:  # takes no GPU: not part of a GPU schedule (as openb's CPU pods)
                left_out["cpu"].append(f"philly-{index}")
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
    elif kind == "openb":
        for line, row in rows:
            gpus = _whole_number(row, "num_gpu", p, line, 0, MAX_GPUS)
            milli = _openb_milli(row, gpus, p, line) if gpus else MILLI_PER_GPU
            # 0 is a time like any other (the trace's first pods are scheduled at 0)
            start = _seconds(row, "scheduled_time", p, line) if row.get("scheduled_time") else None
            if gpus and start is None and row.get("pod_phase") == "Pending":
                left_out["pending"].append(_name(row, p, line))  # never got its GPUs
                continue
            created = _seconds(row, "creation_time", p, line)
            deleted = _seconds(row, "deletion_time", p, line)
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
                id=_name(row, p, line),
                submit_time=created,
                gpus=gpus,
                gpu_milli=milli if gpus else 0,
                cpu_milli=_whole_number(row, "cpu_milli", p, line, 0, MAX_CPU_MILLI),
                memory=_whole_number(row, "memory_mib", p, line, 0, MAX_MEMORY_MIB) * MiB,
                seq=len(jobs),
                expected_duration=duration,
            )
            if gpus == 0:
                left_out["cpu"].append(request.id)  # takes no GPU: not part of a GPU schedule
                continue
            unique(request.id, line)
            jobs.append(WorkloadJob(request, RigidWork(duration)))
    else:
        unread = unread_plain_columns(p, header)  # (a typo of one it reads is refused)
        for line, row in rows:
            duration = _seconds(row, "duration", p, line)  # as given: under 1 s too
            limit = _time_limit(row, p, line)
            request = JobRequest(
                id=_name(row, p, line),
                submit_time=_seconds(row, "submit_time", p, line),
                gpus=_whole_number(row, "gpus", p, line, 1, MAX_GPUS),
                priority=_priority(row, p, line),
                gpu_memory=_gpu_memory(row, p, line),
                seq=len(jobs),
                expected_duration=duration if limit is None else limit,
                family=_family(row, p, line),
                project=(row.get("project") or "").strip() or "default",
                user=(row.get("user") or "").strip(),
            )
            model = (row.get("model") or "").strip()
            unique(request.id, line)
            jobs.append(WorkloadJob(request, RigidWork(duration, model), limit))
        jobs = _from_first_submission(jobs)
    if not jobs:
        raise DataError(_no_jobs(p, kind, len(left_out["cpu"]), len(left_out["pending"])))
    return Workload(
        p.stem,
        kind,
        in_submission_order(jobs),
        tuple(left_out["pending"]),
        tuple(left_out["cpu"]),
        unread,
    )


def _time_limit(row: dict[str, str], path: Path, line: int) -> float | None:
    """A plain job's optional ``time_limit``: seconds above 0 (None when empty: no limit).
    A negative one is told the same rule as 0 (it was told ``must be >= 0``, and then 0
    was refused as not above 0)."""
    if not row.get("time_limit"):
        return None
    refuse_duration_text(row, "time_limit", path, line)
    value = _number(row, "time_limit", path, line)
    if not value > 0:  # NaN too
        raise DataError(
            f"{path}:{line}: column 'time_limit' must be above 0 seconds, got "
            f"{row['time_limit']!r}; leave it empty for no limit"
        )
    return _seconds(row, "time_limit", path, line)


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


def utc_timestamp(text: str) -> float:
    """Seconds since the epoch of an ISO date-time, read as UTC unless it has an offset
    (``2017-10-09 07:01:55`` is UTC, ``...+02:00`` keeps its offset): never the machine's
    time zone, whose daylight-saving changes would shift the gaps between submissions.
    ValueError if it is not an ISO date-time."""
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


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


def in_submission_order(jobs: list[WorkloadJob]) -> tuple[WorkloadJob, ...]:
    """Sort by submission time (file order breaks ties) and number ``seq`` in that order."""
    jobs.sort(key=lambda j: (j.request.submit_time, j.request.seq))
    return tuple(
        dataclasses.replace(j, request=dataclasses.replace(j.request, seq=i))
        for i, j in enumerate(jobs)
    )


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
