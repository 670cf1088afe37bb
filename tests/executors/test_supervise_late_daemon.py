"""A daemon of the job's (a session of its own) that its scan of the job's processes missed:
forked by another of them after the supervisor read /proc, at the job's end (a server the
job started as it exited, its workers starting). The supervisor SIGKILLed what the scan
saw once, then waited for its children to be gone: the one it missed, re-parented to it,
was waited for a second, then left running when the supervisor exited, on the GPUs of a
run recorded as ended. What is left is now SIGKILLed again until it is gone."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path

import pytest

from danlu.executors import supervise

DAEMON_THEN_EXIT = (
    "import os, pathlib, sys, time\n"
    "if os.fork() == 0:\n"
    "    os.setsid()\n"
    "    if os.fork() == 0:\n"
    "        pathlib.Path(sys.argv[1]).write_text(str(os.getpid()))\n"
    "        time.sleep(30)\n"
    "    os._exit(0)\n"
    "while not pathlib.Path(sys.argv[1]).read_text():\n"
    "    time.sleep(0.01)\n"
)


def test_a_daemon_the_last_scan_missed_is_killed_all_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pid_file = tmp_path / "daemon"
    pid_file.write_text("")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    command = [sys.executable, "-c", DAEMON_THEN_EXIT, str(pid_file)]
    supervise.write_json(run_dir / supervise.LAUNCH, {"command": command})
    real = supervise.descendant_processes
    missed: list[int] = []

    def first_scan_misses_the_daemon(root: int) -> list[tuple[int, int]]:
        found = real(root)
        if missed or not pid_file.read_text():
            return found
        missed.append(int(pid_file.read_text()))  # (as if forked just after the scan)
        return [(pid, start) for pid, start in found if pid != missed[0]]

    monkeypatch.setattr(supervise, "descendant_processes", first_scan_misses_the_daemon)
    try:
        assert supervise.main(["supervise", str(run_dir)]) == 0
        done = supervise.read_json(run_dir / supervise.EXIT)
        assert done is not None and done["exit_code"] == 0
        assert missed, "the scan never saw the daemon"
        assert supervise.proc_start_time(missed[0]) is None, "the daemon outlived its job"
    finally:
        for pid in missed:  # (re-parented to this process while it was the subreaper)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
