"""A process that a /proc scan saw below a guard or supervisor and that exited before its
signal is not signalled through its pid once another process has it: the
descendant scans of ``orphan_guard``, the supervisor and the Ray actor, and the local
executor's ``kill_marked``, sent ``kill(pid)`` to whatever process had the pid by then (an
unrelated one, another run's, the control plane's). Each process is now signalled through a
pidfd only while its start time is still the one the scan saw
(``supervise.signal_process``)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from danlu.executors import orphan_guard, supervise


@pytest.fixture
def stranger() -> Iterator[int]:
    """The pid of a process that is no descendant of this one (its parent exited at once)."""
    out = subprocess.run(
        ["sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $!"],
        check=True,
        capture_output=True,
        text=True,
        start_new_session=True,
    ).stdout
    pid = int(out)
    yield pid
    if supervise.proc_start_time(pid) is not None:
        os.kill(pid, signal.SIGKILL)


def test_a_pid_taken_by_another_process_since_the_scan_is_not_signalled(
    stranger: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scan reads ``stranger``'s pid as this process's child of another start time (the
    child that had the pid, exited since); the signal then finds ``stranger`` there."""
    guard_procs = orphan_guard.supervise.procs  # the guard's own copy (loaded by path)
    real = guard_procs._stat
    target = Path(f"/proc/{stranger}/stat")
    seen: list[Path] = []

    def scanned(path: Path) -> list[bytes] | None:
        fields = real(path)
        if path != target or fields is None or target in seen:
            return fields
        seen.append(target)  # the scan's read only: the child that had the pid
        fields = list(fields)
        fields[1] = str(os.getpid()).encode()
        fields[19] = str(int(fields[19]) + 1).encode()
        return fields

    monkeypatch.setattr(guard_procs, "_stat", scanned)
    orphan_guard.signal_descendants(signal.SIGKILL)
    assert seen == [target]  # the scan saw it as a descendant
    time.sleep(0.2)
    assert supervise.proc_start_time(stranger) is not None  # not killed


def test_signal_process_reaches_the_process_it_names(stranger: int) -> None:
    start = supervise.proc_start_time(stranger)
    assert start is not None
    assert not supervise.signal_process(stranger, start + 1, signal.SIGKILL)
    assert supervise.proc_start_time(stranger) == start
    assert supervise.signal_process(stranger, start, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while supervise.proc_start_time(stranger) is not None:
        assert time.monotonic() < deadline, "not killed"
        time.sleep(0.05)


def test_without_pidfds_the_start_time_is_checked_before_the_kill(
    stranger: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where pidfds are refused (a seccomp filter's EPERM, an old kernel's ENOSYS) the
    process is still signalled, by its pid, once its start time is checked."""

    def refused(pid: int, flags: int = 0) -> int:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "pidfd_open", refused)
    start = supervise.proc_start_time(stranger)
    assert start is not None
    assert not supervise.signal_process(stranger, start + 1, signal.SIGKILL)
    assert supervise.signal_process(stranger, start, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while supervise.proc_start_time(stranger) is not None:
        assert time.monotonic() < deadline, "not killed"
        time.sleep(0.05)
