"""Runs a command and ends it when the process that started this one dies.

``python -I orphan_guard.py PARENT_PID COMMAND...``: started by a Ray actor
(:class:`~danlu.executors.ray_actor.NodeRun`) as the leader of a new process group, it starts
``COMMAND`` in that group and waits for it. If ``PARENT_PID`` stops being its parent (the actor
died and this process was left behind), it SIGKILLs the whole group, the command and itself,
so that a job whose actor is gone does not keep running on its GPUs. When this process is
killed first (Ray SIGKILLs a dead worker's children), the kernel SIGKILLs the command
(``PR_SET_PDEATHSIG``); processes the command started in a session of their own are not
reached then. SIGTERM to the group reaches the command directly; this process ignores it and
waits, for the command and then for the rest of the group: a ``/bin/sh -c`` wrapper dies of
the SIGTERM at once while the program it started still writes its checkpoint, and the actor
SIGKILLs the group once this process has exited (or when the stop's grace ends). Its exit
status is the command's (``128 + N`` after signal N). Standard library only: it is started
by path.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time

CHECK_SECONDS = 0.5
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL it when this (single-threaded) guard dies."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def main(argv: list[str]) -> int:
    """Run ``argv[2:]`` while ``argv[1]`` is this process's parent; return its status."""
    if len(argv) < 3 or not argv[1].isdigit():
        print("usage: orphan_guard.py PARENT_PID COMMAND...", file=sys.stderr)
        return 2
    parent = int(argv[1])
    stopped: list[int] = []

    def note(signum: int, _frame: object) -> None:  # a handler, reset in the child at exec
        stopped.append(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, note)
    try:
        child = subprocess.Popen(argv[2:], preexec_fn=_die_with_parent)
    except OSError as exc:
        print(f"danlu: cannot start {argv[2]!r}: {exc}", file=sys.stderr, flush=True)
        return 127
    while True:
        try:
            code = child.wait(CHECK_SECONDS)
            break
        except subprocess.TimeoutExpired:
            if os.getppid() != parent:
                os.killpg(os.getpgid(0), signal.SIGKILL)
    while stopped and others_in_group():  # being stopped: the rest may be checkpointing
        if os.getppid() != parent:
            os.killpg(os.getpgid(0), signal.SIGKILL)
        time.sleep(0.05)
    return code if code >= 0 else 128 - code


def others_in_group() -> bool:
    """Whether a live process other than this one is in this process's group (/proc)."""
    me, group = os.getpid(), os.getpgid(0)
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            with open(os.path.join(entry.path, "stat"), "rb") as stat:
                raw = stat.read()
        except OSError:
            continue
        fields = raw[raw.rindex(b")") + 2 :].split()  # state, ppid, pgrp, ...
        if fields[0] not in (b"Z", b"X") and int(fields[2]) == group:
            return True
    return False


if __name__ == "__main__":
    sys.exit(main(sys.argv))
