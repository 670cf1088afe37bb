"""Processes as /proc shows them, for the local executor's supervisor and the guards of the
Slurm and Ray executors (:mod:`~danlu.executors.supervise`,
:mod:`~danlu.executors.orphan_guard`): a process named by its pid *and* start time (a pid alone
may be another process's by the time it is signalled), its process group's members, its
descendants, signals sent only to the process a scan saw (a pidfd), the host's boot, and the
*child subreaper* flag that keeps a job's daemons its supervisor's descendants.

Standard library only: the supervisor and the guards run as plain scripts under ``python -I``
and load this file by its path (:func:`~danlu.executors.supervise.sibling`).
"""

from __future__ import annotations

import ctypes
import os
import signal
from pathlib import Path


def proc_start_time(pid: int) -> int | None:
    """The start time of process ``pid`` (clock ticks since boot, /proc/PID/stat field 22), or
    None when no such live process exists (a zombie counts as dead). Together with the pid it
    identifies a process even after the pid is reused."""
    fields = _stat(Path(f"/proc/{pid}/stat"))
    return None if fields is None else int(fields[19])


def _stat(path: Path) -> list[bytes] | None:
    """The fields of a /proc/PID/stat after the command name (state first, then the parent's
    pid, ...), or None when the process is gone or a zombie."""
    try:
        raw = path.read_bytes()
    except OSError:
        return None
    fields = raw[raw.rindex(b")") + 2 :].split()
    return None if fields[0] in (b"Z", b"X") else fields


def alive(pid: int | None, start: int | None) -> bool:
    """True when process ``pid`` runs and is the one that started at ``start`` (of this
    boot: after a reboot the same pid may start at the same tick, see :func:`boot_id`)."""
    return pid is not None and start is not None and proc_start_time(pid) == start


def group_members(pgid: int) -> list[int]:
    """The pids of the live (not zombie) processes of process group ``pgid`` (from /proc)."""
    return [
        int(entry.name)
        for entry in os.scandir("/proc")
        if entry.name.isdigit()
        and (fields := _stat(Path(entry.path, "stat"))) is not None
        and int(fields[2]) == pgid
    ]


def boot_id() -> str | None:
    """The kernel's random id of the current boot (``/proc/sys/kernel/random/boot_id``), or
    None where it cannot be read: pids and start ticks recorded under another boot id name
    other processes now, or none."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def boot_time() -> float | None:
    """When this host booted, in wall-clock seconds (``btime`` of ``/proc/stat``), or None
    where it cannot be read."""
    try:
        lines = Path("/proc/stat").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        name, _, value = line.partition(" ")
        if name == "btime" and value.strip().isdigit():
            return float(value)
    return None


PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER = 36, 37
"""prctl(2) options (Linux >= 3.4): orphaned descendants are re-parented to this process."""


def _prctl(option: int, arg: int | ctypes.c_int) -> bool:
    """prctl(2) with one argument; False where it fails or there is none (not Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        value = ctypes.byref(arg) if isinstance(arg, ctypes.c_int) else arg
        return int(libc.prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def set_subreaper(on: bool = True) -> bool:
    """Make this process the child subreaper of its descendants (or no longer, ``on`` false);
    False where the system cannot (not Linux)."""
    return _prctl(PR_SET_CHILD_SUBREAPER, int(on))


def is_subreaper() -> bool:
    """Whether this process is a child subreaper already (False where it cannot tell)."""
    flag = ctypes.c_int(0)
    return _prctl(PR_GET_CHILD_SUBREAPER, flag) and flag.value != 0


def descendants(root: int) -> list[int]:
    """The pids of the live processes below ``root`` (from /proc), parents first."""
    return [pid for pid, _ in descendant_processes(root)]


def descendant_processes(root: int) -> list[tuple[int, int]]:
    """The live processes below ``root`` (from /proc), parents first, each as its pid and
    start time (:func:`proc_start_time`), to be signalled by :func:`signal_process`."""
    children: dict[int, list[tuple[int, int]]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and (fields := _stat(Path(entry.path, "stat"))) is not None:
            children.setdefault(int(fields[1]), []).append((int(entry.name), int(fields[19])))
    out: list[tuple[int, int]] = []
    todo = list(children.get(root, ()))
    while todo:
        pid, start = todo.pop()
        out.append((pid, start))
        todo.extend(children.get(pid, ()))
    return out


def signal_process(pid: int, start: int, sig: int) -> bool:
    """Send ``sig`` to process ``pid`` only while it is the process that started at ``start``
    (as a scan of /proc saw it). Between a scan and its ``kill`` the process may exit and be
    reaped, and its pid be another's, unrelated (another run's, the control plane's): the
    signal goes through a pidfd (``pidfd_open``: that one process, whatever its pid names
    later) opened before its start time is checked again. Where there are no pidfds (Linux
    before 5.3, a seccomp filter refusing them) the check comes just before a plain
    ``kill``. Returns whether it was sent; a process gone or not this one's to signal is no
    error."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    except (OSError, AttributeError):  # no pidfds here (ENOSYS; EPERM: a seccomp filter)
        return _kill_checked(pid, start, sig)
    try:
        if proc_start_time(pid) != start:  # the pidfd's process is another than the scan's
            return False
        signal.pidfd_send_signal(fd, sig)
        return True
    except ProcessLookupError:
        return False
    except OSError:  # refused (EPERM: not this user's, or a seccomp filter): as kill says
        return _kill_checked(pid, start, sig)
    finally:
        os.close(fd)


def _kill_checked(pid: int, start: int, sig: int) -> bool:
    """``kill(pid, sig)`` right after checking that ``pid`` is still the process that started
    at ``start`` (:func:`signal_process` without a pidfd); whether it was sent."""
    if proc_start_time(pid) != start:
        return False
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True
