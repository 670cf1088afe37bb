"""The process that runs one node's part of a job on a Ray cluster.

:class:`NodeRun` is plain Python; :mod:`danlu.executors.ray_executor` makes it a detached Ray
actor (one per node of a run, pinned to that node) and calls its methods remotely. It starts
the job's command (an argv list, never a shell unless the launch asked for one) in a session of
its own with the environment it is given, under :mod:`~danlu.executors.orphan_guard` (which
ends it should this actor die), keeps the command's output in a file on its node,
and hands it out in whole lines (:meth:`NodeRun.status`; an exited command's last line as it
is, with or without a newline), so that the control plane can append the output of every node
to the job's log without cutting a line in two. :meth:`NodeRun.stop`
sends SIGTERM to the command's process group (which the guard forwards to the command's
processes out of it) and SIGKILL after a grace (a later stop whose grace ends sooner, a cancel
of a run being preempted, brings the SIGKILL forward). A thread waits for the command: it stamps
the time it exited (``finished_at``, by which the control plane orders the nodes' exits to find
a run's first failure) and SIGKILLs what the command left.

Every SIGKILL reaches every process of the run, not only the command's process group: a
process the command started in a session of its own (a daemon: ``setsid``) would outlive the
run on its GPUs, which danlu counts free. The guard is the subreaper of the command's processes
and ends its descendants itself; the actor SIGKILLs the guard's descendants while it lives, and
every process carrying the run's mark in its environment (``DANLU_RUN_MARK``, the local
executor's mechanism: :data:`~danlu.executors.local.RUN_MARK`), which reaches a daemon after its
guard was killed.

A command the kernel's OOM killer ended (the node's memory, or its cgroup's limit, ran out)
is told from one that died of a bare SIGKILL as the local executor's supervisor tells it: the
actor reads the OOM kill count of its memory cgroup, which the command's processes inherit,
before it starts the command and once it has exited
(:class:`~danlu.executors.oom_kills.OomKills`), and reports the kills counted meanwhile
(``oom_kills`` in :meth:`NodeRun.status`), which the poll's result classifies the exit with
(:func:`~danlu.executors.ray_results.exit_result`). Imports nothing of Ray, so it is tested
without a cluster.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from danlu.executors import supervise
from danlu.executors.base import check_grace
from danlu.executors.local import RUN_MARK, kill_marked
from danlu.executors.oom_kills import OomKills

CHUNK = 1 << 20
"""The most output one :meth:`NodeRun.status` call hands out."""
GUARD = Path(__file__).with_name("orphan_guard.py").resolve()
VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"


def node_visible_devices(given: str | None, node_visible: str | None) -> str | None:
    """The ``CUDA_VISIBLE_DEVICES`` of a run's command on a node whose Ray worker (the actor's
    process, as its raylet) was started with ``CUDA_VISIBLE_DEVICES=node_visible``: danlu's
    GPU indices ``given`` (``"0,1"``: Ray's GPU slots, as many as the node's ``GPU``
    resource) are positions in that list, as Ray maps a task's GPU ids (slot 1 of a raylet
    started with ``2,3`` is device ``3``), not devices of the machine. ``given`` as it is
    when the node names none (unset or empty: every device is the node's), or when ``given``
    is None. A ``ValueError`` naming the variable when an index is past the node's list (a
    node started with more ``--num-gpus`` than it makes visible): run there, the command
    would take another's GPU."""
    if given is None or node_visible is None or not node_visible.strip():
        return given
    listed = [device.strip() for device in node_visible.split(",") if device.strip()]
    mapped = []
    for index in (part.strip() for part in given.split(",") if part.strip()):
        if not index.isdigit() or int(index) >= len(listed):
            raise ValueError(
                f"GPU {index} of the run is not one of the {len(listed)} this node's Ray makes "
                f"visible ({VISIBLE_DEVICES}={node_visible}); start the node's Ray with "
                f"--num-gpus at most {len(listed)}, or with {VISIBLE_DEVICES} naming each GPU"
            )
        mapped.append(listed[int(index)])
    return ",".join(mapped)


class NodeRun:
    """One node's part of a run: the job's command as a child process group.

    ``log_dir`` is where the output is kept on the node (a temporary directory when None).
    The command's environment is ``env`` with the run's mark (:data:`RUN_MARK`) added, its
    ``CUDA_VISIBLE_DEVICES`` (danlu's GPU indices, :meth:`placement`) read through the
    node's own, ``node_visible`` (:func:`node_visible_devices`; the Ray actor's class,
    :class:`~danlu.executors.ray_executor.NodeRunOnNode`, passes its process's).
    ``node`` is the danlu name of the node the actor was placed on (None: a run without GPUs,
    anywhere in the cluster), which :meth:`placement` hands out. ``proc_root``: where
    ``/proc`` is, in which the OOM kill count of this process's memory cgroup is found
    (:class:`~danlu.executors.oom_kills.OomKills`; another in tests).
    """

    def __init__(
        self,
        command: Sequence[str],
        env: Mapping[str, str],
        workdir: str | None = None,
        log_dir: str | None = None,
        node: str | None = None,
        node_visible: str | None = None,
        proc_root: Path = Path("/proc"),
    ) -> None:
        self._lock = threading.Lock()
        self._placement: dict[str, Any] = {
            "node": node,
            "visible": env.get(VISIBLE_DEVICES),
            "shared": "DANLU_GPU_MEMORY_LIMIT" in env,
        }
        devices = node_visible_devices(env.get(VISIBLE_DEVICES), node_visible)
        env = env if devices is None else {**env, VISIBLE_DEVICES: devices}
        folder = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix="danlu-run-"))
        folder.mkdir(parents=True, exist_ok=True)
        self._temp_dir = None if log_dir else folder
        """The temporary folder this run made for its output (removed by :meth:`close`)."""
        self._log_path = folder / "output.log"
        self._stop: tuple[str, float] | None = None
        self._error = ""
        self.started_at = time.time()
        self.finished_at: float | None = None
        self._oom_kills: int | None = None
        """The OOM kills its memory cgroup counted while the command ran, once it has
        exited (None before, or when the count cannot be read)."""
        self._killer: threading.Timer | None = None
        self._kill_at: float | None = None
        """When the command's group is due its SIGKILL (``time.monotonic``)."""
        self._mark = secrets.token_hex(8)
        """The run's mark, in the environment of each of its processes (:meth:`_kill_all`)."""
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_fd: int | None = None
        """The output file, open for as long as the run is kept: its output is read through
        it, never again by its path, which the command can replace (a link to another
        file of the node's user, a removed file) while it runs."""
        opened = supervise.open_regular(self._log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND)
        if isinstance(opened, str):  # a named log_dir another run left a link in
            self._error = f"cannot keep the output in {self._log_path}: it {opened}"
            self.finished_at = time.time()
            return
        self._log_fd = opened
        kills = OomKills(proc_root=proc_root)  # of the cgroup the command inherits: from now on
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", str(GUARD), str(os.getpid()), *command],
                stdin=subprocess.DEVNULL,
                stdout=opened,
                stderr=subprocess.STDOUT,
                env={**env, RUN_MARK: self._mark},
                cwd=workdir,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            self._error = f"cannot start {command[0]!r}: {exc}"
            self.finished_at = time.time()
            os.write(opened, f"danlu: {self._error}\n".encode())
        if self._proc is not None:
            threading.Thread(target=self._wait, args=(self._proc, kills), daemon=True).start()

    def placement(self) -> dict[str, Any]:
        """Where the run is, as the control plane started it (whatever the command rewrote
        since): ``{"node", "visible", "shared"}``, the node's danlu name (None: not given),
        the ``CUDA_VISIBLE_DEVICES`` the command was given (None: none), and whether it
        holds memory shares of those GPUs (its environment has ``DANLU_GPU_MEMORY_LIMIT``).
        What the control plane holds for a run whose launch record it cannot read."""
        return dict(self._placement)

    def pid(self) -> int | None:
        """The command's process id (None when it could not be started)."""
        return self._proc.pid if self._proc is not None else None

    def exit_code(self) -> int | None:
        """The command's exit status once it has exited (``128 + N`` after signal N; 127
        when it could not be started); None while it runs (until :meth:`_wait` has seen it
        exit)."""
        if self._proc is None:
            return 127
        code = self._proc.returncode
        if self.finished_at is None or code is None:
            return None
        return code if code >= 0 else 128 - code

    def _wait(self, proc: subprocess.Popen[bytes], kills: OomKills) -> None:
        """Wait for the command (a thread of its own), then stamp when it exited: the time
        it did, not when someone first asked, so that the nodes of a run are ordered by
        their exits, and count the OOM kills of its memory cgroup since it started
        (``kills``: the evidence that a SIGKILL was the kernel's OOM killer's). What the
        command left in its group (``sleep &``) or in a session of its own (``setsid daemon
        &``) would outlive it on its GPUs: it is SIGKILLed, while the guard, exited but not
        yet reaped, still holds its pid (the group's id), and only then is the guard reaped
        (:meth:`_kill_all`)."""
        with contextlib.suppress(ChildProcessError):  # (reaped elsewhere: wait() says how)
            os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
        finished = time.time()
        killed = kills.since()
        with self._lock:
            if self._killer is not None:
                self._killer.cancel()
            self._kill_all()
            proc.wait()
            self._oom_kills = killed
            self.finished_at = finished

    def status(self, offset: int = 0) -> dict[str, Any]:
        """The run's state and its output from byte ``offset``, in whole lines (all of it
        once the command has exited), at most :data:`CHUNK`: ``{"exit_code", "started_at",
        "finished_at", "output", "offset", "more", "error", "stop", "oom_kills"}``.
        ``offset`` in the answer is where to ask from next; the caller keeps it, so an answer
        that was lost on the way is asked for again. ``exit_code`` is None while the command
        runs. ``oom_kills``: the OOM kills its memory cgroup counted while the command ran,
        once it has exited (None before, or when the count cannot be read; an actor of an
        earlier danlu leaves the field out)."""
        with self._lock:
            code = self.exit_code()
            output = self._read(max(0, offset), final=code is not None)
            after = max(0, offset) + len(output)
            return {
                "exit_code": code,
                "started_at": self.started_at,
                "finished_at": self.finished_at,
                "output": output,
                "offset": after,
                "more": code is not None and after < self._size(after),
                "error": self._error,
                "stop": self._stop[0] if self._stop else None,
                "oom_kills": self._oom_kills if code is not None else None,
            }

    def stop(self, reason: str, grace: float) -> None:
        """SIGTERM the command's process group now and SIGKILL it after ``grace`` seconds
        (at once when ``grace`` <= 0), or sooner when an earlier stop's SIGKILL is due sooner:
        a later stop brings the SIGKILL forward, never back. The stop reported
        (:meth:`status`) is the latest one made while the command ran. A no-op once it has
        exited (but for the reason, when none was given before).

        An endless ``grace`` (``inf``) is :data:`~danlu.executors.supervise.MAX_GRACE_SECONDS`,
        as the local executor's supervisor takes it, which the SIGKILL timer can wait (an
        infinite wait raised ``OverflowError`` in the timer's thread, which died). Raises
        :class:`InvalidLaunchError` naming ``grace``, before anything is signalled, when it
        is not a number of seconds (``nan``, a string), as every executor's stop does
        (:func:`~danlu.executors.base.check_grace`)."""
        grace = check_grace(grace, "grace")
        with self._lock:
            running = self._proc is not None and self.exit_code() is None
            if self._stop is None or running:
                self._stop = (reason, grace)
            if not running:
                return
            deadline = time.monotonic() + grace
            if self._kill_at is not None and self._kill_at <= deadline:
                self._signal(signal.SIGTERM)  # the earlier stop's SIGKILL comes sooner
                return
            self._kill_at = deadline
            if self._killer is not None:
                self._killer.cancel()
                self._killer = None
            if grace <= 0:
                self._signal(signal.SIGKILL)
                return
            self._signal(signal.SIGTERM)
            self._killer = threading.Timer(grace, self._kill_due)
            self._killer.daemon = True
            self._killer.start()

    def close(self) -> None:
        """The end of the run once its output has been collected: SIGKILL what is left of
        the run (:meth:`_kill_all`) and remove the temporary folder it was given (a
        ``log_dir`` named by the caller is left alone). Called before the actor is killed,
        so that no node keeps a folder per run for good."""
        self.stop("ended", 0.0)
        with self._lock:
            self._kill_all()
            if self._log_fd is not None:
                os.close(self._log_fd)
                self._log_fd = None
            if self._temp_dir is not None:
                shutil.rmtree(self._temp_dir, ignore_errors=True)
                self._temp_dir = None

    def _kill_due(self) -> None:
        """The stop's SIGKILL, when its grace has passed (the timer's thread)."""
        with self._lock:
            self._signal(signal.SIGKILL)

    def _signal(self, sig: int) -> None:
        """``sig`` to the command's process group while the guard runs (the guard forwards a
        SIGTERM to the command's processes out of the group); a SIGKILL to every process of
        the run (:meth:`_kill_all`)."""
        if self._proc is None or self._proc.returncode is not None:  # reaped by _wait
            return
        if sig == signal.SIGKILL:
            self._kill_all()
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, sig)

    def _kill_all(self) -> None:
        """SIGKILL every process of the run: the guard's descendants while the guard runs
        (as their subreaper, it has the command's daemons among them, even one that replaced
        its environment), the command's process group (the guard with it), then every process
        carrying the run's mark: a daemon whose guard is gone is nobody's descendant of the
        run's any longer. The group only while the guard is not reaped (:meth:`_wait` reaps
        it once this has run): after that its pid, the group's id, is free, and another
        process may have it, as the leader of a group of its own (another run's guard on
        this node: its whole group would be SIGKILLed). Called with ``_lock`` held."""
        if self._proc is None:
            return
        if self._proc.returncode is None:  # not reaped: the pid is still the guard's
            for pid, start in supervise.descendant_processes(self._proc.pid):
                supervise.signal_process(pid, start, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._proc.pid, signal.SIGKILL)
        kill_marked(self._mark)

    def _size(self, default: int) -> int:
        if self._log_fd is None:
            return default
        try:
            return os.fstat(self._log_fd).st_size
        except OSError:
            return default

    def _read(self, offset: int, final: bool) -> bytes:
        """At most :data:`CHUNK` bytes of the output from ``offset``, up to the end of its
        last whole line; all that is left once the command has exited (``final``), its last
        line with or without a newline. A line longer than :data:`CHUNK` comes in pieces."""
        if self._log_fd is None:
            return b""
        try:
            read = os.pread(self._log_fd, CHUNK + 1, offset)
        except OSError:
            return b""
        data, at_end = read[:CHUNK], len(read) <= CHUNK
        if not data or (final and at_end):
            return data
        cut = data.rfind(b"\n")
        if cut >= 0:
            return data[: cut + 1]
        return data if len(data) == CHUNK else b""  # else half a line: wait for the rest
