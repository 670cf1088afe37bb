"""The per-job supervisor: ``python -m danlu.executors.supervise RUN_DIR``.

The local executor starts this tiny process (in a new session, so it outlives a control plane
killed with SIGKILL) instead of the job itself. It reads ``RUN_DIR/launch.json``, starts the
job's argv in a new process group with its own stdout/stderr (the job's log file) and the
environment it was given, records the job's pid and start time in ``RUN_DIR/job.json``, waits
for it, kills whatever is left of its process group, and writes the exit status to
``RUN_DIR/exit.json``, with the OOM kills its memory cgroup (the job's) counted meanwhile
(``oom_kills``: :mod:`~danlu.executors.oom_kills`, left out where the count cannot be read),
the evidence of a job the kernel's OOM killer ended. Any executor instance can read those
files: a child of a dead parent cannot be waited for, but its exit code is on disk.

Stopping: the executor writes ``RUN_DIR/stop.json`` (``{"reason": ..., "grace": seconds}``) and
sends SIGTERM to the supervisor (once it handles the signal: :data:`HANDLING`; a stop recorded
before then is read by the supervisor itself), which forwards SIGTERM to the job's process group
and sends SIGKILL to the group once the grace period has passed. When the job's own process
exits first, the rest of its group is given the rest of the grace too: a ``/bin/sh -c`` wrapper
(``shell: true``, ``bash run.sh``) dies of the SIGTERM at once while the program it started is
still writing its checkpoint. A later stop (a cancel of a run being preempted) rewrites the
record and brings the SIGKILL forward when its grace ends sooner, never back. A stop that could
not be recorded (a full disk) gets the longer of the launch record's ``cancel_grace`` and
``preempt_grace``: it may be a preemption, whose job must have the time to checkpoint.

Signs of life: while the job's processes may run, the supervisor touches
``RUN_DIR/heartbeat`` (:data:`HEARTBEAT`) every ``heartbeat`` seconds of the launch record
(:data:`HEARTBEAT_SECONDS` without one), and once more when the last of them has ended. A run
whose supervisor was lost without recording an exit (killed together with its job, or with the
host) ended when it was last known alive, which the file's time says: not when a control plane
that came back hours later noticed it.

Processes that leave the job's process group (a daemon double-forks into a session of its
own) are the job's too: on Linux the supervisor is their *child subreaper*
(``PR_SET_CHILD_SUBREAPER``), so they stay its descendants when their parents exit, get the
group's signals, and are killed with the group's stragglers when the job ends. A daemon that
setsid'ed would otherwise outlive its job, holding the job's GPUs.

A launch record with a ``user`` (``{"uid", "gid", "groups"}``: ``DANLU_RUN_AS=user``) starts
the job as that account, with umask 022, entering the record's ``workdir`` as the account
(else starting in the supervisor's directory: the account's home); the supervisor itself
stays the control plane's
(root), so the job can neither read its records nor stop it. The supervisor is then started
with a bare environment and reads the job's from its stdin (a JSON object): the job's
``LD_PRELOAD`` and the like must not act in a process run as root, and its token stays off
disk. (The bare environment holds the job's GPU pinning, danlu's values, which this process
does not read: the executor reads them back from it for a run whose launch record is lost.)

Standard library only, so it also runs as a plain script under ``python -I`` (isolated from the
job's PYTHONPATH and friends); run so, it loads its process helpers (:mod:`~danlu.executors.procs`,
whose names it re-exports) from their file next to it (:func:`sibling`).
"""

from __future__ import annotations

import contextlib
import errno
import importlib.util
import json
import logging
import math
import os
import select
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType, ModuleType
from typing import TYPE_CHECKING, Any, BinaryIO


def sibling(name: str) -> ModuleType:
    """The module ``name`` of this file's folder, loaded from its file: this script runs
    under ``python -I``, where danlu need not be importable (and may be another copy)."""
    spec = importlib.util.spec_from_file_location(
        f"_danlu_supervise_{name}", Path(__file__).with_name(f"{name}.py")
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {name}.py next to {__file__}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if TYPE_CHECKING or __package__:  # imported as danlu.executors.supervise
    from danlu.executors import logcap, oom_kills, procs
else:  # run as a script (python -I), or loaded by its path (the guards): no package
    procs = sibling("procs")
    logcap = sibling("logcap")
    oom_kills = sibling("oom_kills")

# The process helpers, split out to procs.py, under their names here too (their callers')
proc_start_time = procs.proc_start_time
alive = procs.alive
group_members = procs.group_members
boot_id = procs.boot_id
boot_time = procs.boot_time
PR_SET_CHILD_SUBREAPER = procs.PR_SET_CHILD_SUBREAPER
PR_GET_CHILD_SUBREAPER = procs.PR_GET_CHILD_SUBREAPER
set_subreaper = procs.set_subreaper
is_subreaper = procs.is_subreaper
descendants = procs.descendants
descendant_processes = procs.descendant_processes
signal_process = procs.signal_process


_log = logging.getLogger(__name__)

LAUNCH = "launch.json"
JOB = "job.json"
EXIT = "exit.json"
STOP = "stop.json"
SUPERVISOR = "supervisor.json"
"""Written by the executor that started the supervisor: its pid and start time."""
HANDLING = "handling"
"""Made by the supervisor once its stop handlers are installed: a SIGTERM before then would
kill it (a Python process starting up dies of one), and no job would run nor exit be recorded.
Until it exists the executor records a stop without signalling; the supervisor reads the
stop record after it made this file (the executor writes the record before it looks for
this file, so one of the two sees the other)."""
SPAWN_FAILED_EXIT_CODE = 127
"""Exit code recorded when the job's program could not be started (as a shell reports it)."""
HEARTBEAT = "heartbeat"
"""Touched by the supervisor while the job runs: its time is when the run was last known
alive (see the module docstring)."""
HEARTBEAT_SECONDS = 5.0
"""How often the supervisor touches :data:`HEARTBEAT` unless the launch record says
(``heartbeat``): a lost run is charged up to this much less than it ran."""
EXIT_RECORD_SECONDS = 600.0
"""How long the supervisor keeps trying to record the job's exit while the disk is full
(the run still looks running meanwhile; a stop signalled then, or the run directory gone,
ends the tries: :func:`_record_exit`). If it never can, the supervisor's own exit status
is 0 exactly when the job's was, for the executor that started it to read."""


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` as JSON atomically, mode 0600 (:func:`write_file`)."""
    write_file(path, json.dumps(data))


def write_file(path: Path, text: str, mode: int = 0o600) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (:func:`atomic_file`), with ``mode``
    exactly (whatever the umask)."""
    with atomic_file(path, mode) as f:
        f.write(text.encode("utf-8"))


@contextlib.contextmanager
def atomic_file(path: Path, mode: int = 0o600, sync: bool = True) -> Iterator[BinaryIO]:
    """A new file, open for the block to write, that replaces ``path`` once the block ends
    (flushed, fsync'ed unless not ``sync``, renamed there), with ``mode`` exactly (whatever
    the umask); an exception in the block (a full disk) leaves ``path`` as it was and no
    temporary file.

    The run's directory is the job's to write (a Slurm job's is on the shared filesystem,
    the job run as the control plane's user): the temporary file is made anew, under a name
    no one can foresee, and exclusively (``O_EXCL``: a name that exists, a symbolic link
    the job put there included, is never opened), so that no link makes this write into the
    file it names, on the control plane's host. The rename replaces a link at ``path``
    itself, never the file it names."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(8).hex()}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(fd, mode)  # the descriptor's file: no name to follow
            yield f
            f.flush()
            if sync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:  # a full disk: no half-written temporary file left behind
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


LINK = "is a symbolic link; not followed"
NOT_REGULAR = "is not a regular file"
HARD_LINK = "has other hard links"


def not_regular(st: os.stat_result) -> str | None:
    """Why a file of status ``st`` (an ``lstat``'s) is not read as a run's file:
    :data:`LINK`, :data:`NOT_REGULAR` or :data:`HARD_LINK` (see :func:`open_regular`); None
    for a regular file of one name."""
    if stat.S_ISLNK(st.st_mode):
        return LINK
    if not stat.S_ISREG(st.st_mode):
        return NOT_REGULAR
    return HARD_LINK if st.st_nlink > 1 else None


def open_regular(path: str | Path, flags: int = os.O_RDONLY, mode: int = 0o600) -> int | str:
    """A descriptor of the regular file at ``path`` opened with ``flags`` (made with
    ``mode`` under ``O_CREAT``), or, for a symbolic link, a file that is not regular (a FIFO,
    a socket, a directory) or one with other hard links, why it was not opened
    (:data:`LINK`, :data:`NOT_REGULAR`, :data:`HARD_LINK`).
    A run's directory, records and log are the job's to write: it can put a link there (to
    the control plane's secrets, another job's log), or a FIFO that would block the reader.
    So a link in the last component is never followed (``O_NOFOLLOW``) and a FIFO does not
    block the open (``O_NONBLOCK``). A hard link the job made there, in place of the file,
    to another file of the same user (the server's database, another job's log) is that
    file itself: one whose count of names (``st_nlink``) is above 1 is neither read nor
    written (a file just made has one). Other errors (a missing file) are raised."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return LINK
        # a socket; a FIFO that none reads, or a directory, opened for writing
        if exc.errno in (errno.ENXIO, errno.EISDIR):
            return NOT_REGULAR
        raise
    try:
        why = not_regular(os.fstat(fd))
    except BaseException:
        os.close(fd)
        raise
    if why is None:
        return fd
    os.close(fd)
    return why


MAX_RECORD_BYTES = 64 * 1024**2
"""The largest record :func:`read_json` reads (a task record holds the job's environment,
which the kernel caps far below this at ``exec``)."""


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``, or None when it is missing or unreadable. The records
    are in a run directory the job can write to: only a regular file is read
    (:func:`open_regular`); a link, a file with other hard links or any other reads as
    missing, with a warning logged. So does one of more than :data:`MAX_RECORD_BYTES` (read
    whole, a record the job filled with gigabytes would take the reader's memory) and one
    nested too deeply for the parser (``[[[[...``: a ``RecursionError``, not a
    ``ValueError``, which ended the control plane's pass over every run)."""
    try:
        opened = open_regular(path)
        if isinstance(opened, str):
            _log.warning("record %s %s: read as missing", path, opened)
            return None
        with open(opened, "rb") as f:
            raw = f.read(MAX_RECORD_BYTES + 1)
        if len(raw) > MAX_RECORD_BYTES:
            _log.warning("record %s is over %d bytes: read as missing", path, MAX_RECORD_BYTES)
            return None
        data = json.loads(raw)
    except RecursionError:
        _log.warning("record %s is nested too deeply: read as missing", path)
        return None
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class Heartbeat:
    """The run's sign of life: :data:`HEARTBEAT` in the run directory, touched by
    :meth:`beat` (a failure, such as a full disk, is ignored: the sign is then older); each
    beat checks the job's log against its cap too (``log_cap``:
    :class:`~danlu.executors.logcap.LogCap`)."""

    def __init__(self, path: Path, every: float, log_cap: logcap.LogCap | None = None) -> None:
        self.path = path
        self.every = every
        self.log_cap = log_cap
        self._last = -math.inf

    def beat(self) -> None:
        """Touch the file now (and cap the log)."""
        self._last = time.monotonic()
        with contextlib.suppress(OSError):
            self.path.touch(mode=0o600)
        if self.log_cap is not None:
            self.log_cap.check()

    def beat_if_due(self) -> float:
        """Touch the file if the last touch is ``every`` seconds old; the seconds until the
        next is due."""
        if time.monotonic() - self._last >= self.every:
            self.beat()
        return max(self._last + self.every - time.monotonic(), 0.0)


def heartbeat_seconds(spec: dict[str, Any]) -> float:
    """The launch record's ``heartbeat`` (at least 0.05 s), else :data:`HEARTBEAT_SECONDS`."""
    value = spec.get("heartbeat")
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < math.inf:
        return max(float(value), 0.05)
    return HEARTBEAT_SECONDS


def wait_beating(child: subprocess.Popen[bytes], heartbeat: Heartbeat) -> int:
    """The return code of ``child`` once it has exited, read without reaping it
    (:func:`exited`), touching ``heartbeat`` every ``heartbeat.every`` seconds meanwhile:
    woken by the child's exit through a pidfd (Linux 5.3 and later), else by polling for it
    between the beats. Its pid, the id of the process group it led, stays its own (a
    zombie's) until ``child.wait()``, so that the group can still be signalled by that id
    (once reaped, the pid is free, and another process may have it as the leader of a group
    of its own)."""
    try:
        pidfd: int | None = os.pidfd_open(child.pid)
    except (AttributeError, OSError):
        pidfd = None
    try:
        while True:
            timeout = heartbeat.beat_if_due()
            if pidfd is not None:
                ready = select.select([pidfd], [], [], timeout)[0]
                if ready and (code := _exited_or_wait(child, block=True)) is not None:
                    return code
                continue
            deadline = time.monotonic() + timeout
            while (code := _exited_or_wait(child, block=False)) is None:
                if time.monotonic() >= deadline:
                    break
                time.sleep(min(0.05, max(deadline - time.monotonic(), 0.0)))
            else:
                return code
    finally:
        if pidfd is not None:
            os.close(pidfd)


def exited(pid: int, block: bool) -> int | None:
    """The return code (Popen's: ``-N`` after signal N) of child ``pid`` once it has exited,
    left unreaped (``WNOWAIT``: a zombie whose pid no other process can have); None while it
    runs (``block`` false: else this waits for its exit). Raises ``ChildProcessError`` when
    ``pid`` is no child of this process (reaped already)."""
    flags = os.WEXITED | os.WNOWAIT | (0 if block else os.WNOHANG)
    info = os.waitid(os.P_PID, pid, flags)
    if info is None:
        return None
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


def _exited_or_wait(child: subprocess.Popen[bytes], block: bool) -> int | None:
    """:func:`exited` for ``child``; its ``wait()`` (which knows how it ended) when it was
    reaped already."""
    try:
        return exited(child.pid, block)
    except ChildProcessError:
        return child.wait()


def exit_code_of(returncode: int) -> int:
    """Popen's return code in the shell convention (128 + N for death by signal N)."""
    return returncode if returncode >= 0 else 128 - returncode


def main(argv: list[str]) -> int:
    """Supervise one run; see the module docstring. Returns the supervisor's exit status."""
    if len(argv) != 2:
        print("usage: python -m danlu.executors.supervise RUN_DIR", file=sys.stderr)
        return 2
    run_dir = Path(argv[1])
    spec = read_json(run_dir / LAUNCH)
    if spec is None:
        print(f"danlu supervisor: no readable {run_dir / LAUNCH}", file=sys.stderr)
        return 2
    problem = launch_problem(spec)
    if problem is not None:  # nothing to start: the run failed, saying why
        _warn(f"danlu supervisor: {run_dir / LAUNCH}: {problem}")
        _record_unstarted(run_dir, f"{LAUNCH}: {problem}")
        return 0
    # Left as they were when it returns (a caller in-process, as tests are: a SIGCHLD
    # handler left behind would reap the caller's own children).
    handled = (signal.SIGTERM, signal.SIGINT, signal.SIGALRM, signal.SIGCHLD)
    previous = {sig: signal.getsignal(sig) for sig in handled}
    was_subreaper = is_subreaper()
    subreaper = set_subreaper()
    try:
        return _supervise(run_dir, spec, subreaper)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        for sig, handler in previous.items():
            if handler is not None:  # None: not installed from Python, left alone
                signal.signal(sig, handler)
        if subreaper and not was_subreaper:
            set_subreaper(False)


def _os_id(value: Any) -> bool:
    """A user or group id: a whole number (not a bool) that fits an ``id_t``."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**32


def is_account(value: Any) -> bool:
    """Whether ``value`` is a launch record's ``user``: ``{"uid", "gid", "groups"}``, ids
    that :func:`_os_id` accepts (anything else would reach ``Popen`` as an account name to
    look up, or overflow)."""
    return (
        isinstance(value, dict)
        and all(_os_id(value.get(k)) for k in ("uid", "gid"))
        and isinstance(value.get("groups"), list)
        and all(_os_id(g) for g in value["groups"])
    )


def launch_problem(spec: dict[str, Any]) -> str | None:
    """What in the launch record ``spec`` keeps its job from being started (a record damaged
    or written by hand): a ``command`` that is not a non-empty list of strings, a ``user`` that
    is not an account (:func:`is_account`), a ``workdir`` that is not a string; None when
    there is nothing."""
    command = spec.get("command")
    if not (isinstance(command, list) and command and all(isinstance(a, str) for a in command)):
        return (
            f"command: {command!r} is not the job's command; it must be a non-empty list of "
            "strings (the argv), as the executor writes it: launch the job again"
        )
    user = spec.get("user")
    if user and not is_account(user):
        return (
            f"user: {user!r} is not the account to run the job as; it must be an object of "
            "uid, gid (whole numbers) and groups (a list of them): launch the job again"
        )
    workdir = spec.get("workdir")
    if workdir is not None and not isinstance(workdir, str):
        return f"workdir: {workdir!r} is not a path; launch the job again"
    return None


def _record_unstarted(run_dir: Path, error: str) -> None:
    """Record that the job could not be started (exit :data:`SPAWN_FAILED_EXIT_CODE`), and
    ``error``, why."""
    write_json(
        run_dir / EXIT,
        {
            "exit_code": SPAWN_FAILED_EXIT_CODE,
            "signal": None,
            "finished_at": time.time(),
            "error": error,
        },
    )


def _entering(workdir: str) -> Callable[[], None]:
    """A ``preexec_fn`` entering ``workdir`` in the job's process, after it became the job's
    account: it says on the job's stderr (its log) why it cannot."""

    def enter() -> None:
        try:
            os.chdir(workdir)
        except OSError as exc:
            os.write(2, f"danlu: cannot enter the workdir {workdir!r}: {exc.strerror}\n".encode())
            raise

    return enter


def _supervise(run_dir: Path, spec: dict[str, Any], subreaper: bool) -> int:
    """Start the job of ``spec``, wait for it, record its exit (:func:`main`'s work, with its
    signal handlers installed here)."""
    child: subprocess.Popen[bytes] | None = None
    kill_at: float | None = None  # when the job's group is due its SIGKILL (time.monotonic)
    reaped = False  # the job's process was reaped: its pid, the group's id, is free
    stops = 0  # the stops signalled so far (one after the job ended ends the exit's retries)

    def kill_group(sig: int) -> None:
        """``sig`` to the job's process group and to the job's processes that left it; none
        once the job's process was reaped (its pid may be another process's then)."""
        if child is None or reaped:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, sig)
        for pid, start in descendant_processes(os.getpid()) if subreaper else ():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if os.getpgid(pid) != child.pid:
                    signal_process(pid, start, sig)

    def on_stop(signum: int, frame: FrameType | None) -> None:
        """SIGTERM the job's group; SIGKILL it after the stop's grace, or sooner when an
        earlier stop's SIGKILL is due sooner."""
        nonlocal kill_at, stops
        stops += 1
        grace = _stop_grace(read_json(run_dir / STOP) or {}, spec)
        deadline = time.monotonic() + grace
        if kill_at is None or deadline < kill_at:
            kill_at = deadline
            signal.setitimer(signal.ITIMER_REAL, max(grace, 0.001))
        kill_group(signal.SIGTERM)

    def on_alarm(signum: int, frame: FrameType | None) -> None:
        kill_group(signal.SIGKILL)  # none yet (being started): sent once it is, see below

    def on_child(signum: int, frame: FrameType | None) -> None:
        """Reap the job's orphans as they exit (re-parented to us, they would stay zombies
        until the job ends); the job's own process is left to ``child.wait()``."""
        while child is not None:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if info is None or info.si_pid == child.pid:
                return
            with contextlib.suppress(ChildProcessError):
                os.waitpid(info.si_pid, 0)

    # Python-level handlers (unlike SIG_IGN) are reset to the default in the exec'ed job.
    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    signal.signal(signal.SIGALRM, on_alarm)
    if subreaper:
        signal.signal(signal.SIGCHLD, on_child)
    try:
        (run_dir / HANDLING).touch(mode=0o600)
    except OSError as exc:  # the executor then signals as soon as the stop is recorded
        _warn(f"danlu supervisor: cannot mark the stops handled: {exc}")
    if (run_dir / STOP).exists():  # a stop recorded before the handlers were there
        on_stop(signal.SIGTERM, None)
    log_cap = logcap.LogCap.of(spec, lambda path: atomic_file(path, sync=False))
    heartbeat = Heartbeat(run_dir / HEARTBEAT, heartbeat_seconds(spec), log_cap)
    heartbeat.beat()
    started = time.time()
    kills = oom_kills.OomKills()  # of the cgroup the job inherits: counted from its start
    account: dict[str, Any] = spec.get("user") or {}
    workdir = spec.get("workdir")
    try:
        # Run as another account, the job's environment comes on stdin (see the docstring).
        env = _read_env(sys.stdin) if account else None
        child = subprocess.Popen(
            spec["command"],
            env=env,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
            # run as the job's OS account (DANLU_RUN_AS=user), with a usual umask
            user=account.get("uid"),
            group=account.get("gid"),
            extra_groups=account.get("groups"),
            umask=0o022 if account else -1,
            # run as an account, the workdir is entered once the process is the account's
            # (Popen's cwd is entered before, as root)
            cwd=workdir if not account else None,
            preexec_fn=_entering(str(workdir)) if account and workdir else None,
        )
    except (OSError, ValueError, TypeError, subprocess.SubprocessError) as exc:
        # an account record Popen refuses, a workdir the account cannot enter
        _warn(f"danlu: cannot start {spec['command'][0]!r}: {exc}")  # (the log may be full)
        _record_unstarted(run_dir, str(exc))
        return 0
    me = os.getpid()
    job = {
        "pid": child.pid,
        "pgid": child.pid,
        "start": proc_start_time(child.pid),
        "supervisor_pid": me,
        "supervisor_start": proc_start_time(me),
        "started_at": started,
    }
    try:
        write_json(run_dir / JOB, job)
    except OSError as exc:  # a full disk: supervise it all the same (stops come through us)
        _warn(f"danlu supervisor: cannot record the job's pid: {exc}")
    if kill_at is not None:  # a stop arrived before the job existed
        if time.monotonic() < kill_at:
            kill_group(signal.SIGTERM)  # the timer runs on: its SIGKILL now finds the job
        else:  # the grace ended while the job was being started: that SIGKILL found none
            kill_group(signal.SIGKILL)
    # The job's process is left unreaped (a zombie) until its group has had its last signal:
    # its pid is the group's id, which, once reaped, another process could have (the leader of
    # a group of its own: another run's job), and that group would get the signals.
    returncode = wait_beating(child, heartbeat)
    if kill_at is not None:  # being stopped: the rest of the group may be checkpointing
        while time.monotonic() < kill_at and _group_alive(child.pid):
            heartbeat.beat_if_due()
            time.sleep(0.05)
    signal.setitimer(signal.ITIMER_REAL, 0)
    kill_group(signal.SIGKILL)  # stragglers of the job's process group, and its daemons
    reaped = True  # no signal to the group from now on: a later stop finds none to stop
    child.wait()
    _reap()
    heartbeat.beat()  # the run's last sign of life, should its exit go unrecorded
    code = exit_code_of(returncode)
    done = {
        "exit_code": code,
        "signal": -returncode if returncode < 0 else None,
        "finished_at": time.time(),
    }
    if (killed := kills.since()) is not None:  # the evidence of an OOM kill (host_oom)
        done["oom_kills"] = killed
    return _record_exit(run_dir, done, lambda: stops)


def _record_exit(run_dir: Path, done: dict[str, Any], stops: Callable[[], int]) -> int:
    """Record the job's exit ``done`` in ``run_dir``; the supervisor's exit status. While the
    disk is full it tries again every second for :data:`EXIT_RECORD_SECONDS`, but gives up
    at once when the run directory is gone (the state directory was removed: no one can read
    the record) and after one more try when a stop is signalled meanwhile (``stops``: the
    count of stops signalled so far): a supervisor kept waiting so could only be killed.
    Given up, its status is 0 exactly when the job's was."""
    code = done["exit_code"]
    stopped = stops()
    last_try = False
    deadline = time.monotonic() + EXIT_RECORD_SECONDS
    while True:
        try:
            write_json(run_dir / EXIT, done)
            return 0
        except OSError as exc:
            why = exc
        gone = not run_dir.is_dir()
        if gone or last_try or time.monotonic() >= deadline:
            where = f"{run_dir} is gone" if gone else str(why)
            _warn(f"danlu supervisor: cannot record the job's exit ({code}): {where}")
            return 0 if code == 0 else 1
        retry_at = min(time.monotonic() + 1.0, deadline)
        while stops() == stopped and time.monotonic() < retry_at:
            time.sleep(0.05)  # (a stop's handler runs between these, not in a long sleep)
        last_try = stops() > stopped


def _group_alive(pgid: int) -> bool:
    """Whether a process of process group ``pgid`` other than a zombie still runs
    (:func:`group_members`: the group's leader, left unreaped, is a zombie that the kernel
    still counts in the group, so ``killpg(pgid, 0)`` cannot tell). The job's orphans that
    exited meanwhile (re-parented to us as subreaper) are zombies that do not count either;
    :func:`_reap` collects them once the group had its last signal."""
    return bool(group_members(pgid))


MAX_GRACE_SECONDS = 10.0**9
"""The longest grace a stop gets (some 31 years): a longer one (``Infinity`` in a stop
record) is this, which the interval timer can still be set to."""


def grace_seconds(value: Any) -> float | None:
    """``value`` as a grace in seconds (0 to :data:`MAX_GRACE_SECONDS`), or None when it is
    not a number (a damaged record: a string, ``null``, ``NaN``)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        return None
    return min(max(float(value), 0.0), MAX_GRACE_SECONDS)


def _stop_grace(stop: dict[str, Any], spec: dict[str, Any]) -> float:
    """The grace of the stop recorded as ``stop``: its ``grace``, else (none, or not a
    number) the grace of a stop with no readable record (:func:`_unrecorded_grace`). Never
    an exception: raised in the stop's signal handler, it would end the supervisor, and the
    job would get no SIGTERM, nor its exit be recorded."""
    grace = grace_seconds(stop.get("grace"))
    return _unrecorded_grace(spec) if grace is None else grace


def _unrecorded_grace(spec: dict[str, Any]) -> float:
    """The grace of a stop with no readable stop record: the longer of the launch record's
    ``cancel_grace`` (5 s when absent) and ``preempt_grace`` (the stop may be a preemption,
    whose job must have the time it asked for to checkpoint)."""
    grace = grace_seconds(spec.get("cancel_grace"))
    grace = 5.0 if grace is None else grace
    own = grace_seconds(spec.get("preempt_grace"))
    return grace if own is None else max(grace, own)


def _read_env(stream: Any) -> dict[str, str]:
    """The job's environment, a JSON object of strings, from ``stream`` (read to its end)."""
    data = json.loads(stream.read())
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in data.items()
    ):
        raise ValueError("the job's environment on stdin is not an object of strings")
    return data


def _reap(wait_s: float = 1.0) -> None:
    """Collect the exit of the descendants killed (re-parented to us as subreaper), for up
    to ``wait_s`` seconds: they are gone, not zombies, once the run is recorded as over.
    Those still there are SIGKILLed again meanwhile: a process one of them forked after the
    last scan of /proc (a daemon's worker, out of the job's group, starting as the job
    ended) got no signal, and would run on once this process has exited. (Every live
    descendant is the job's: the job's own process is reaped by now.)"""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return  # no children left
        if pid == 0:
            if time.monotonic() >= deadline:
                return
            for left, start in descendant_processes(os.getpid()):
                signal_process(left, start, signal.SIGKILL)
            time.sleep(0.01)


def _warn(text: str) -> None:
    """One line on stderr (the job's log), if even that can be written."""
    with contextlib.suppress(OSError):
        print(text, file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
