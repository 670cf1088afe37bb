"""Runs a command and ends it when the process that started this one dies.

``python -I orphan_guard.py PARENT_PID COMMAND...``: started by a Ray actor
(:class:`~danlu.executors.ray_actor.NodeRun`) as the leader of a new process group, it starts
``COMMAND`` in that group and waits for it. It is the *child subreaper* of what the command
starts (``PR_SET_CHILD_SUBREAPER``, as the local executor's supervisor,
:mod:`~danlu.executors.supervise`): a process the command started in a session of its own (a
daemon: ``setsid``) stays its descendant when its parent exits. Signals to the group
(the actor's stop) are forwarded to those descendants out of the group, and once the command
has exited every descendant left is SIGKILLed, so that no daemon of the job's outlives it on its
GPUs. If ``PARENT_PID`` stops being its parent (the actor died and this process was left
behind), it SIGKILLs its descendants and the whole group, the command and itself, so that a job
whose actor is gone does not keep running. When this process is killed first (Ray SIGKILLs a
dead worker's children), the kernel SIGKILLs the command (``PR_SET_PDEATHSIG``); processes the
command started in a session of their own are not reached then (the actor, while it lives, finds
them by the run's mark in their environment). SIGTERM to the group reaches the command directly;
this process forwards it and waits, for the command and then for the rest of the group: a
``/bin/sh -c`` wrapper dies of the SIGTERM at once while the program it started still writes its
checkpoint, and the actor SIGKILLs the group once this process has exited (or when the stop's
grace ends). Its exit status is the command's (``128 + N`` after signal N). Standard library
only: it is started by path, and loads :mod:`~danlu.executors.supervise` (standard library only
too) from its own folder.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType, ModuleType
from typing import TYPE_CHECKING

CHECK_SECONDS = 0.5
PR_SET_PDEATHSIG = 1
REAP_SECONDS = 1.0
"""How long the guard waits, before it exits, for the descendants it SIGKILLed to exit."""


def _sibling(name: str) -> ModuleType:
    """The module ``name`` of this file's folder, loaded from its file: this script runs
    under ``python -I``, where danlu need not be importable (and may be another copy)."""
    spec = importlib.util.spec_from_file_location(
        f"_danlu_guard_{name}", Path(__file__).with_name(f"{name}.py")
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {name}.py next to {__file__}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if TYPE_CHECKING:
    from danlu.executors import supervise
else:
    supervise = _sibling("supervise")


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL it when this (single-threaded) guard dies."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def main(argv: list[str]) -> int:
    """Run ``argv[2:]`` while ``argv[1]`` is this process's parent; return its status."""
    if len(argv) < 3 or not (argv[1].isascii() and argv[1].isdigit()):  # int() refuses "²"
        print("usage: orphan_guard.py PARENT_PID COMMAND...", file=sys.stderr)
        return 2
    parent = int(argv[1])
    stopped: list[int] = []
    subreaper = supervise.set_subreaper()

    def note(signum: int, _frame: FrameType | None) -> None:  # reset in the child at exec
        """A stop: the command's group has the signal; its processes out of the group too."""
        stopped.append(signum)
        signal_descendants(signum, outside_group=True)

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
                _orphaned()
            if subreaper:
                reap(but=child.pid)
    while stopped and others_in_group():  # being stopped: the rest may be checkpointing
        if os.getppid() != parent:
            _orphaned()
        reap()
        time.sleep(0.05)
    end_descendants(subreaper)
    return code if code >= 0 else 128 - code


def end_descendants(subreaper: bool) -> None:
    """SIGKILL what the command left, in this process's group and out of it (its daemons,
    whose parent exited, are this process's descendants when it is their ``subreaper``), and
    wait up to :data:`REAP_SECONDS` for them to be gone."""
    deadline = time.monotonic() + REAP_SECONDS
    while True:
        signal_descendants(signal.SIGKILL)
        reap()
        if not subreaper or not supervise.descendants(os.getpid()):
            return
        if time.monotonic() >= deadline:
            return
        time.sleep(0.01)


def _orphaned() -> None:
    """The actor is gone: SIGKILL every process of the run, this one last."""
    signal_descendants(signal.SIGKILL)
    os.killpg(os.getpgid(0), signal.SIGKILL)


def signal_descendants(sig: int, outside_group: bool = False) -> None:
    """``sig`` to this process's live descendants (those in its process group too unless
    ``outside_group``): as their subreaper, they include what the command started in a
    session of its own, whose parent exited."""
    group = os.getpgid(0)
    # (each by its pid and start time: one that exited since the scan, its pid another
    # process's now, is not signalled)
    for pid, start in supervise.descendant_processes(os.getpid()):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if not outside_group or os.getpgid(pid) != group:
                supervise.signal_process(pid, start, sig)


def reap(but: int | None = None) -> None:
    """Collect the exit of the children that have exited (the command's orphans, re-parented
    to this process, would stay zombies), but for process ``but``, left to ``Popen``."""
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if info is None or info.si_pid == but:
            return
        with contextlib.suppress(ChildProcessError):
            os.waitpid(info.si_pid, 0)


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
