"""Reading the local executor's run records (``launch.json``, ``job.json``,
``supervisor.json``, ``stop.json``, ``exit.json``; see :mod:`danlu.executors.supervise`) with
every field checked.

The records are files in the state directory, which the jobs (run as the same OS user, unless
``DANLU_RUN_AS=user``) could write to and a failing disk could damage. A field of the wrong
type is dropped, as if the record lacked it, and a record without one of its required fields
reads as missing: one damaged run directory then looks like a run with less known about it,
never an exception that would stop the control plane's passes over every other run.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from danlu.executors import supervise
from danlu.executors.base import StopReason

log = logging.getLogger(__name__)

Check = Callable[[Any], bool]


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**63


def _natural(value: Any) -> bool:
    return _int(value) and value >= 0


MAX_PID = 2**31 - 1
"""The largest process id there can be (``pid_t`` is a signed 32-bit integer; Linux's
``pid_max`` is far below)."""


def _pid(value: Any) -> bool:
    """A process (or process group) id: positive. 0 (and -1) are not one: signalled, they
    name the signalling process's own group (every process), which a damaged record must
    never make the control plane do. Nor is one above :data:`MAX_PID`: ``os.killpg`` raised
    ``OverflowError`` for it, which ended the poll of the run."""
    return _int(value) and 0 < value <= MAX_PID


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _text(value: Any) -> bool:
    return isinstance(value, str)


def _optional_int(value: Any) -> bool:
    return value is None or _int(value)


def optional_number(value: Any) -> bool:
    """A check: None, or a finite number that is not a bool (a time: ``started_at``)."""
    return value is None or _number(value)


def _argv(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(a, str) for a in value)


def _slots(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(s, list) and len(s) == 2 and all(_natural(x) for x in s) for s in value
    )


LOG_RUNS_KEPT = 100
"""The most earlier runs of a job whose start in its log a launch record keeps
(``log_runs``): the newest ones (the record is read at every poll)."""


def _log_runs(value: Any) -> bool:
    """A launch record's ``log_runs``: the job's earlier runs, each ``[attempt, offset,
    started_at]`` (where it began in the job's log, and when it was launched), at most
    :data:`LOG_RUNS_KEPT` of them."""
    return (
        isinstance(value, list)
        and len(value) <= LOG_RUNS_KEPT
        and all(
            isinstance(run, list)
            and len(run) == 3
            and _natural(run[0])
            and _natural(run[1])
            and _number(run[2])
            for run in value
        )
    )


_REASONS = frozenset(r.value for r in StopReason)


def _reason(value: Any) -> bool:
    return isinstance(value, str) and value in _REASONS


LAUNCH_FIELDS: Mapping[str, Check] = {
    "job_id": _text,
    "attempt": _natural,
    "command": _argv,
    "log_path": _text,
    "log_offset": _natural,
    "log_runs": _log_runs,
    "cancel_grace": _number,
    "launched_at": _number,
    "gpus": _slots,
    "shared": lambda v: isinstance(v, bool),
    "user": supervise.is_account,
    "workdir": _text,
    "preempt_grace": _number,
}
JOB_FIELDS: Mapping[str, Check] = {
    "pid": _pid,
    "pgid": _pid,
    "start": _natural,
    "supervisor_pid": _pid,
    "supervisor_start": _natural,
    "started_at": _number,
}
SUPERVISOR_FIELDS: Mapping[str, Check] = {"pid": _pid, "start": _natural}
STOP_FIELDS: Mapping[str, Check] = {
    "reason": _reason,
    "grace": _number,
    "requested_at": _number,
}
EXIT_FIELDS: Mapping[str, Check] = {
    "exit_code": _optional_int,
    "signal": _optional_int,
    "finished_at": _number,
    "error": _text,
    "node_lost": lambda v: isinstance(v, bool),
    "oom_kills": _natural,
}
"""An exit record's fields; ``node_lost``: the run was lost with its node (the local
executor's: with the host, which rebooted meanwhile); ``oom_kills``: the OOM kills of the
job's memory cgroup while it ran, as its supervisor counted them (the local executor's:
:mod:`~danlu.executors.oom_kills`)."""


def checked(
    data: Mapping[str, Any] | None, fields: Mapping[str, Check], required: tuple[str, ...] = ()
) -> dict[str, Any] | None:
    """The entries of ``data`` named in ``fields`` whose values pass their check (others,
    and names not in ``fields``, dropped); None when ``data`` is None or lacks one of
    ``required`` after that."""
    if data is None:
        return None
    out = {k: v for k, v in data.items() if k in fields and fields[k](v)}
    return out if all(k in out for k in required) else None


LAUNCH_REQUIRED = ("job_id", "attempt", "log_path", "launched_at")
"""What identifies a run in its launch record."""


def read_launch(
    run_dir: Path,
    fields: Mapping[str, Check] = LAUNCH_FIELDS,
    required: tuple[str, ...] = LAUNCH_REQUIRED,
) -> dict[str, Any] | None:
    """The run's launch record (``fields`` checked: an executor's own record adds some to
    :data:`LAUNCH_FIELDS`), or None when it is missing or lacks one of ``required``."""
    return checked(supervise.read_json(run_dir / supervise.LAUNCH), fields, required)


def save_launch(run_dir: Path, launch: dict[str, Any]) -> None:
    """Write the run's launch record ``launch``, as well as the disk allows: a write that
    fails (a full disk) leaves the record as it was (each caller says what that costs)."""
    with contextlib.suppress(OSError):
        supervise.write_json(run_dir / supervise.LAUNCH, launch)


def read_job(run_dir: Path) -> dict[str, Any]:
    """What the supervisor recorded of the job's process (empty when nothing usable)."""
    return checked(supervise.read_json(run_dir / supervise.JOB), JOB_FIELDS) or {}


def read_supervisor(run_dir: Path) -> dict[str, Any]:
    """What the executor recorded of the supervisor's process (empty when nothing usable)."""
    return checked(supervise.read_json(run_dir / supervise.SUPERVISOR), SUPERVISOR_FIELDS) or {}


def read_stop(run_dir: Path) -> dict[str, Any]:
    """The stop request (empty when none, or none usable)."""
    return checked(supervise.read_json(run_dir / supervise.STOP), STOP_FIELDS) or {}


EXIT_REQUIRED = ("exit_code",)
"""What an exit record must have to say that the run exited: its ``exit_code`` (``null``
when none was seen: a run lost with its supervisor). Every writer of one records it."""


def read_exit(run_dir: Path) -> dict[str, Any] | None:
    """The recorded exit, or None when there is none or it is damaged (a field of the wrong
    type, or no ``exit_code``: :data:`EXIT_REQUIRED`; an empty ``{}`` says nothing of how the
    run ended): the exit is then worked out again as for a run that recorded none."""
    data = supervise.read_json(run_dir / supervise.EXIT)
    if data is None:
        return None
    kept = {k: v for k, v in data.items() if k in EXIT_FIELDS}
    if not all(EXIT_FIELDS[k](v) for k, v in kept.items()):
        return None
    return kept if all(k in kept for k in EXIT_REQUIRED) else None


LOG_TAIL_BYTES = 64 * 1024
"""How much of the end of a run's log is searched for out-of-memory markers."""


def _open_log(path: str | Path) -> int | None:
    """A descriptor of the log at ``path`` open for reading, or None when it does not exist
    or is no regular file of one name (:func:`~danlu.executors.supervise.open_regular`: a
    link is not followed, a hard link not read; then logged). Other errors are raised."""
    try:
        opened = supervise.open_regular(path)
    except FileNotFoundError:
        return None
    if isinstance(opened, str):
        log.warning("log %s %s: read as no log", path, opened)
        return None
    return opened


def read_log(path: str | Path, offset: int, limit: int) -> tuple[bytes, int]:
    """Up to ``limit`` bytes of the log at ``path`` from ``offset``, and the offset to ask
    next (nothing yet when the file does not exist; nothing, and ``offset`` again, from an
    offset at or past its end: no seek there, which past the file system's largest file
    size is an ``EINVAL``).

    The log is in a directory the job can write to, and what is read here is served to API
    users: a symbolic link at ``path`` is not followed and only a regular file is read
    (:func:`_open_log`); a link, a FIFO, a directory, a file with other hard links (another
    file of the same user linked there) or any other file reads as no log (nothing, and
    ``offset`` again), with a warning logged."""
    fd = _open_log(path)
    if fd is None:
        return b"", offset
    with open(fd, "rb") as f:
        if offset >= os.fstat(f.fileno()).st_size:
            return b"", offset
        f.seek(offset)
        data = f.read(limit)
    return data, offset + len(data)


def log_size(path: str | Path) -> int:
    """The bytes of the log at ``path`` (0 when the file does not exist). As for
    :func:`read_log`, a symbolic link at ``path`` is not followed (``lstat``) and a file that
    is not regular, or has other hard links, has no size: 0, with a warning logged."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return 0
    if (why := supervise.not_regular(st)) is not None:
        log.warning("log %s %s: read as no log", path, why)
        return 0
    return st.st_size


def log_tail(path: str | Path, start: int = 0) -> str:
    """The end of the log at ``path`` written since byte ``start`` (this run's part), at
    most :data:`LOG_TAIL_BYTES` of it; empty when it cannot be read. A log shorter than
    ``start`` was truncated since the run began (``truncate``, logrotate's ``copytruncate``),
    and the run went on writing from its start: its end is read then. As for
    :func:`read_log`, a symbolic link at ``path`` is not followed and only a regular file
    of one name is read: any other reads as empty, with a warning logged."""
    try:
        fd = _open_log(path)
        if fd is None:
            return ""
        with open(fd, "rb") as f:
            end = f.seek(0, os.SEEK_END)
            start = 0 if start > end else start
            f.seek(max(start, end - LOG_TAIL_BYTES))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""
