"""The supervisor signals the job's process group by its id only while that id is
still the job's: before the job's process (the group's leader) is reaped."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from danlu.executors import supervise

PY = sys.executable


def _run_dir(tmp_path: Path, code: str) -> Path:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    supervise.write_json(run_dir / supervise.LAUNCH, {"command": [PY, "-c", code]})
    return run_dir


def _held(pid: int) -> bool:
    """Whether ``pid`` is still an unreaped child of this process (running or a zombie): its
    number cannot be another process's then."""
    try:
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    return True


def _watch_killpg(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, bool]]:
    """Every ``os.killpg`` of a real signal: (group, signal, whether the group's id was
    still its leader's, unreaped)."""
    sent: list[tuple[int, int, bool]] = []
    real = os.killpg

    def killpg(pgid: int, sig: int) -> None:
        if sig != 0:
            sent.append((pgid, sig, _held(pgid)))
        real(pgid, sig)

    monkeypatch.setattr(os, "killpg", killpg)
    return sent


@pytest.mark.parametrize("pidfd", [True, False])
def test_the_group_is_not_signalled_by_the_id_of_a_reaped_leader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pidfd: bool
) -> None:
    """The supervisor reaped the job's process (``child.wait()``), then SIGKILLed its group
    by the job's pid: free by then, it could be another process's, the leader of a group of
    its own (another run's job), whose group got the SIGKILL. (Without a pidfd, as on Linux
    before 5.3, the job's exit is polled for.)"""
    if not pidfd:

        def no_pidfd(pid: int, flags: int = 0) -> int:
            raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))

        monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    sent = _watch_killpg(monkeypatch)
    run_dir = _run_dir(tmp_path, "raise SystemExit(3)")
    assert supervise.main(["supervise", str(run_dir)]) == 0
    done = supervise.read_json(run_dir / supervise.EXIT)
    assert done is not None and done["exit_code"] == 3
    assert sent, "the job's group got no SIGKILL"
    assert all(held for _, _, held in sent), sent


def test_a_stop_after_the_job_was_reaped_signals_no_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stop that reached the supervisor while it was recording the exit (a full disk
    makes it try for minutes) SIGTERMed the group by the reaped job's pid."""
    sent = _watch_killpg(monkeypatch)
    run_dir = _run_dir(tmp_path, "raise SystemExit(4)")
    real = supervise.write_json
    full = [1]

    def write_json(path: Path, data: dict[str, Any]) -> None:
        if path.name == supervise.EXIT and full[0] > 0:
            full[0] -= 1
            os.kill(os.getpid(), signal.SIGTERM)  # handled by the supervisor's on_stop
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(path, data)

    monkeypatch.setattr(supervise, "write_json", write_json)
    assert supervise.main(["supervise", str(run_dir)]) == 0
    done = supervise.read_json(run_dir / supervise.EXIT)
    assert done is not None and done["exit_code"] == 4
    assert all(held for _, _, held in sent), sent
    assert all(sig != signal.SIGTERM for _, sig, _ in sent), sent


def test_a_zombie_leader_does_not_keep_its_group_alive(tmp_path: Path) -> None:
    """With the leader left unreaped until its group's last signal, the group counts as
    alive only while a live process is in it (the kernel counts the zombie in it): else a
    stopped job whose group was empty would be held for the whole grace of its stop."""
    alone = subprocess.Popen([PY, "-c", "pass"], start_new_session=True)
    assert supervise.exited(alone.pid, block=True) == 0
    assert _held(alone.pid)
    assert not supervise._group_alive(alone.pid)
    alone.wait()
    pid_file = tmp_path / "pid"
    line = f"sleep 30 & echo $! > {pid_file}; exit 5"
    leader = subprocess.Popen(["/bin/sh", "-c", line], start_new_session=True)
    try:
        assert supervise.exited(leader.pid, block=True) == 5
        assert supervise._group_alive(leader.pid)  # the sleep, in the leader's group
        os.kill(int(pid_file.read_text()), signal.SIGKILL)
        while supervise._group_alive(leader.pid):  # the sleep is reaped by init, not us
            time.sleep(0.01)
        assert _held(leader.pid)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(leader.pid, signal.SIGKILL)
        leader.wait()
