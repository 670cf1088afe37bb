"""The local executor: each job a process group on this host, supervised, adoptable.

Every run is started through :mod:`danlu.executors.supervise` (in a new session, so it outlives
the control plane), which starts the job's argv (never a shell unless the launch asks for one)
in its own process group and records pid, start time and exit status as small JSON files under
``STATE_DIR/runs/JOB_ID/``. A new :class:`LocalExecutor` on the same state directory re-attaches
to every run an earlier instance started (:meth:`LocalExecutor.adopt`) and later sees its exit
code. Pids are always checked together with their start time (``/proc/PID/stat``), so a reused
pid is never signalled, and neither is one recorded before the host last booted (the launch
record's ``boot``: :func:`~danlu.executors.supervise.boot_id`).

A run whose supervisor is gone without a recorded exit is lost: what is left of it is killed,
and it ended when it was last known alive (:func:`last_alive`: the supervisor's heartbeat, the
log's last write), or now when something of it still ran, never when a control plane that was
down meanwhile came back. A run of an earlier boot was lost with the host: it is reported as
lost with its node (``node_lost``), which the control plane re-queues as a preemption.

A run that died of SIGKILL while the OOM kill count of its memory cgroup rose (its supervisor
counts them: :mod:`~danlu.executors.oom_kills`) ran out of the host's memory: an OOM with
``host_memory`` (:func:`~danlu.executors.base.host_oom`), not a bare failure, and so did a
torchrun job whose agent exited 1 reporting a worker's SIGKILL (``exitcode : -9``) while the
count rose. A SIGKILL (of the run or of a worker) with no such count up stays a failure.

Logs: stdout and stderr of the job go to ``LOG_DIR/JOB_ID.log`` (appended across restarts).
File names come only from validated job ids, and every path is resolved and checked to stay in
its directory.

GPU pinning: ``CUDA_VISIBLE_DEVICES`` lists the host device indices of the allocation (with
``CUDA_DEVICE_ORDER=PCI_BUS_ID`` so CUDA numbers GPUs as NVML does); a job without GPUs gets an
empty ``CUDA_VISIBLE_DEVICES``. The job environment of DESIGN.md is set on top of the job's env.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from danlu.core.cluster import Cluster
from danlu.core.errors import ConfigError
from danlu.executors import oom_kills, records, supervise
from danlu.executors.accounts import Account, os_account
from danlu.executors.base import (
    KILLED_EXIT_CODE,
    ExecStatus,
    GpuSharingExecutor,
    Handle,
    HeldGpus,
    JobLaunch,
    Outcome,
    RunState,
    StopReason,
    check_slots,
    classify_exit,
    host_oom,
    job_environment,
)
from danlu.executors.errors import (
    InvalidLaunchError,
    LaunchError,
    NodeLaunchError,
    is_node_fault,
)
from danlu.executors.rundirs import RunDirExecutor, check_log_max_bytes

log = logging.getLogger(__name__)

START_TIMEOUT = 30.0
"""Seconds a run may take to record its supervisor before it counts as lost."""
RUN_MARK = "DANLU_RUN_MARK"
"""The environment variable holding a run's random mark (its launch record's ``mark``), by
which the processes of a run whose supervisor died are found (:func:`kill_marked`)."""
LAUNCH_FIELDS: Mapping[str, records.Check] = {
    **records.LAUNCH_FIELDS,
    "mark": lambda v: isinstance(v, str) and re.fullmatch(r"[0-9a-f]{16}", v) is not None,
    "boot": lambda v: isinstance(v, str) and re.fullmatch(r"[0-9a-f-]{1,64}", v) is not None,
    "log_dir": lambda v: isinstance(v, str) and v.startswith("/") and "\0" not in v,
    "log_max_bytes": lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
}
"""The local executor's launch record: the common fields, the run's ``mark``, the id of
the host's boot it was launched in (``boot``), the directory of the job's log when the
launch named its own (``log_dir``, resolved): a later instance, after a restart, reads the
log there (:meth:`~danlu.executors.rundirs.RunDirExecutor._job_log`), and the cap on the
log's size its supervisor keeps (``log_max_bytes``: :mod:`~danlu.executors.logcap`)."""
SUPERVISOR_LOST = "supervisor lost"
"""The error of a run whose supervisor is gone without a recorded exit."""
HOST_LOST = "supervisor lost with the host, which rebooted since the run was launched"
"""The error of a run of an earlier boot of the host that recorded no exit."""
SUPERVISOR = Path(supervise.__file__).resolve()
SUPERVISOR_ENV: Mapping[str, str] = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C.UTF-8"}
"""The environment of a supervisor run as root for a job of another account, but for the
run's :data:`PINNING`."""
PINNING = ("CUDA_VISIBLE_DEVICES", "DANLU_GPU_MEMORY_LIMIT")
"""The variables of a job's environment, set by danlu, that say which GPUs it holds and
whether as a share; its supervisor's environment keeps them, the bare one of a job run as
another account too (:func:`_supervisor_env`), for :meth:`LocalExecutor._unread_gpus`."""


class LocalExecutor(RunDirExecutor, GpuSharingExecutor):
    """Runs jobs as supervised process groups on this host.

    ``cluster`` is what the executor may place on (normally
    ``danlu.devices.discover().cluster()`` or a fake inventory's); ``devices`` maps
    ``(node, gpu)`` to the value for ``CUDA_VISIBLE_DEVICES`` (default: the flat GPU number,
    ``cluster.gpu_offset(node) + gpu``). ``base_env`` is the environment jobs start from (the
    caller passes ``os.environ`` or a curated mapping; this module reads no environment).
    ``cancel_grace`` is the SIGTERM-to-SIGKILL delay of a :meth:`cancel` given no grace.
    ``heartbeat`` is how often (seconds) each run's supervisor touches its sign of life
    (:data:`~danlu.executors.supervise.HEARTBEAT`): a run lost with its supervisor is charged
    up to that much less than it ran. ``log_max_bytes`` caps each job's log (0: no cap):
    past it, its supervisor moves the log's newest part to ``JOB_ID.log.1`` at a heartbeat
    and starts the log anew (:class:`~danlu.executors.logcap.LogCap`).
    """

    launch_fields = LAUNCH_FIELDS

    def __init__(
        self,
        cluster: Cluster,
        state_dir: str | Path,
        *,
        log_dir: str | Path | None = None,
        base_env: Mapping[str, str] | None = None,
        api_url: str | None = None,
        devices: Mapping[tuple[int, int], str] | None = None,
        cancel_grace: float = 5.0,
        python: str = sys.executable,
        max_jobs_per_gpu: int = 16,
        heartbeat: float = supervise.HEARTBEAT_SECONDS,
        log_max_bytes: int = 0,
    ) -> None:
        if isinstance(heartbeat, bool) or not (
            isinstance(heartbeat, int | float) and 0 < heartbeat < math.inf
        ):
            raise ConfigError(f"heartbeat: {heartbeat!r} is not a positive number of seconds")
        self._log_max_bytes = check_log_max_bytes(log_max_bytes)
        self._cluster = cluster
        self._init_runs(state_dir, log_dir, cancel_grace)
        self._base_env = {k: v for k, v in (base_env or {}).items() if not k.startswith("DANLU_")}
        self._api_url = api_url
        self._devices = dict(devices) if devices is not None else None
        self._python = python
        self._max_jobs_per_gpu = max_jobs_per_gpu
        self._children: dict[str, subprocess.Popen[bytes]] = {}
        self._heartbeat = float(heartbeat)
        self._boot = supervise.boot_id()  # the same while this process runs
        self._seen: dict[str, tuple[int, float]] = {}
        """By job id: the attempt of its run this instance last saw running, and when (a
        sign of life of a supervisor that keeps none: one started by an older danlu)."""

    # -- capabilities -------------------------------------------------------------------------

    def inventory(self) -> Cluster:
        """The cluster given at construction."""
        return self._cluster

    def max_jobs_per_gpu(self) -> int:
        """The most jobs that may share one GPU (a constructor setting)."""
        return self._max_jobs_per_gpu

    @property
    def log_max_bytes(self) -> int:
        """The cap on each job's log, in bytes (0: none; a constructor setting)."""
        return self._log_max_bytes

    # -- environment --------------------------------------------------------------------------

    def visible_devices(self, job: JobLaunch) -> str:
        """The ``CUDA_VISIBLE_DEVICES`` value for ``job``'s allocation. Raises
        :class:`InvalidLaunchError` for a GPU not in the executor's cluster, and
        :class:`NodeLaunchError` for one the ``devices`` map given at construction has no
        device index for (the host's inventory lacks it: no launch there can be pinned)."""
        check_slots(self._cluster, job.gpus)
        out = []
        for slot in job.gpus:
            if (device := self._device(slot.node, slot.gpu)) is not None:
                out.append(device)
            else:
                node = self._cluster.nodes[slot.node].name
                raise NodeLaunchError(
                    f"GPU {slot.node}/{slot.gpu} (node/gpu) of job {job.job_id} has no device "
                    "index in the executor's devices map; give LocalExecutor(devices=...) an "
                    "entry for every GPU of its cluster (danlu.devices' device_map())",
                    nodes=(node,),
                )
        return ",".join(out)

    def _device(self, node: int, gpu: int) -> str | None:
        """The ``CUDA_VISIBLE_DEVICES`` entry of GPU ``gpu`` of node ``node`` (None: the
        ``devices`` map has none for it)."""
        if self._devices is None:
            return str(self._cluster.gpu_offset(node) + gpu)
        device = self._devices.get((node, gpu))
        return None if device is None else str(device)

    def child_env(self, job: JobLaunch, account: Account | None = None) -> dict[str, str]:
        """The job's environment: ``base_env`` (without inherited ``DANLU_*``), the job's own
        ``env``, then the danlu job environment and GPU pinning, which win; run as
        ``account``, its ``HOME``, ``USER`` and ``LOGNAME`` too."""
        env = job_environment(self._base_env, job, self._api_url)
        env["CUDA_VISIBLE_DEVICES"] = self.visible_devices(job)
        if account is not None:
            env.update(HOME=account.home, USER=account.name, LOGNAME=account.name)
        return env

    # -- lifecycle ----------------------------------------------------------------------------

    def submit(self, job: JobLaunch) -> Handle:
        """Start ``job`` under a supervisor; raises :class:`JobAlreadyRunningError` while an
        earlier run of the same job id still runs (or one was launched into the same state
        directory while this launch was being made: its records are left alone),
        :class:`GpusBusyError` while a run of another job still holds one of its GPUs (see
        :func:`busy_gpus`), :class:`InvalidLaunchError` (field ``workdir``) for a ``workdir``
        that is not a directory of this host, :class:`LaunchError` when it cannot start (a
        file it cannot write: its ``log_dir`` a file, or not this user's),
        :class:`NodeLaunchError` when the host cannot (a full disk). Either way no run is
        left recorded (by this launch)."""
        account = self._account(job)
        run_dir = self._clear_for(job, self._cluster)
        if job.workdir is not None and account is None and not Path(job.workdir).is_dir():
            # (run as an account, the job finds out as that account: whether a path the
            # account cannot reach exists is none of its business)
            # (this executor's one host: it will not appear by itself, so no restart helps)
            raise InvalidLaunchError(
                "workdir",
                f"{job.workdir!r} of job {job.job_id} is not a directory on this host; "
                "create it, or submit the job again with a workdir that exists",
            )
        try:
            return self._start(job, run_dir, account)
        except OSError as exc:  # (the run directory, if this launch made it, is removed)
            if not is_node_fault(exc):  # (a bare OSError here was no DanluError)
                raise LaunchError(f"cannot launch job {job.job_id}: {exc}") from exc
            raise NodeLaunchError(str(exc)) from exc

    def _account(self, job: JobLaunch) -> Account | None:
        """The OS account ``job`` runs as (None: this process's user). Raises
        :class:`InvalidLaunchError` for an account that is not there or is root's, and
        :class:`LaunchError` when this process cannot start jobs as another account."""
        if job.run_as is None:
            return None
        account = os_account(job.run_as)
        if os.geteuid() != 0:
            raise LaunchError(
                f"job {job.job_id} runs as {account.name!r}, and only a control plane run as "
                "root starts jobs as another account (DANLU_RUN_AS=user)"
            )
        return account

    @staticmethod
    def _workdir(account: Account | None) -> str | None:
        """Where the supervisor starts: run as ``account``, that account's home (``/``
        without one), not the control plane's directory; else the control plane's. The
        job's own ``workdir`` the supervisor enters for the job
        (:mod:`danlu.executors.supervise`)."""
        if account is None:
            return None
        return account.home if Path(account.home).is_dir() else "/"

    def _start(self, job: JobLaunch, run_dir: Path, account: Account | None = None) -> Handle:
        """Write the run's launch record and start its supervisor; an :class:`OSError` of
        the node's (a full disk) leaves no process behind."""
        log_dir = Path(job.log_dir) if job.log_dir is not None else self._log_dir
        mark = secrets.token_hex(8)  # finds the job's daemons (kill_marked)
        # (before anything is recorded: a run recorded but never started would look as if
        # it ran, and block the job's next launch, until it counted as lost)
        env = self.child_env(job, account)
        env[RUN_MARK] = mark
        # one open of the log, for its length and the supervisor's output: a second could
        # find another file there, put by the job since the first
        log_path, log = self._log_file(log_dir, job.job_id)
        with log, self._new_run_dir(run_dir, job.job_id):
            offset = log.seek(0, os.SEEK_END)
            record = self._launch_record(job, log_path, offset)
            if log_path.parent != self._log_dir.resolve():  # the launch's own log_dir
                record["log_dir"] = str(log_path.parent)
            if job.workdir is not None:
                record["workdir"] = job.workdir
            if account is not None:
                record["user"] = {
                    "uid": account.uid,
                    "gid": account.gid,
                    "groups": list(account.groups),
                }
            record["mark"] = mark
            record["heartbeat"] = self._heartbeat
            if self._log_max_bytes:
                record["log_max_bytes"] = self._log_max_bytes
            if self._boot is not None:
                record["boot"] = self._boot
            supervise.write_json(run_dir / supervise.LAUNCH, record)
            try:
                proc = subprocess.Popen(
                    [self._python, "-I", str(SUPERVISOR), str(run_dir)],
                    stdin=subprocess.DEVNULL if account is None else subprocess.PIPE,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    # run as root for another account, the supervisor gets a bare
                    # environment (and the job's PINNING) and the job's on its stdin
                    # (supervise's docstring)
                    env=_supervisor_env(env, account),
                    cwd=self._workdir(account),
                    start_new_session=True,
                    close_fds=True,
                )
            except (OSError, ValueError, TypeError, subprocess.SubprocessError) as exc:
                # ValueError: an environment variable Popen refuses (a NUL byte in it)
                if isinstance(exc, OSError) and is_node_fault(exc):
                    raise
                shutil.rmtree(run_dir, ignore_errors=True)
                raise LaunchError(
                    f"cannot start the supervisor of job {job.job_id}: {exc}"
                ) from exc
            if proc.stdin is not None:
                try:
                    with proc.stdin:
                        proc.stdin.write(json.dumps(env).encode())
                except OSError as exc:  # the supervisor died before it read: nothing started
                    proc.kill()
                    proc.wait()
                    shutil.rmtree(run_dir, ignore_errors=True)
                    raise LaunchError(
                        f"cannot hand job {job.job_id}'s environment to its supervisor: {exc}"
                    ) from exc
            try:
                supervise.write_json(
                    run_dir / supervise.SUPERVISOR,
                    {"pid": proc.pid, "start": supervise.proc_start_time(proc.pid)},
                )
            except OSError:  # not recorded, so no later instance could find it: stop it now
                self._stop_unrecorded(proc, run_dir)
                raise
            self._children[job.job_id] = proc
            self._started(run_dir, record)
            return Handle(job.job_id, job.run_attempt)

    def _stop_unrecorded(self, proc: subprocess.Popen[bytes], run_dir: Path) -> None:
        """Stop a supervisor just started whose record could not be written: SIGTERM, which
        stops its job as a cancel does, then SIGKILL for both if it is not gone after the
        cancel grace."""
        proc.terminate()
        try:
            proc.wait(self._cancel_grace + 5.0)
        except subprocess.TimeoutExpired:
            job = records.read_job(run_dir)
            for pgid in (job.get("pgid"), proc.pid):
                if pgid:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(int(pgid), signal.SIGKILL)
            proc.wait()

    def poll(self, handle: Handle) -> ExecStatus:
        """The run's status from its files; reaps the supervisor if this instance started it."""
        run_dir, launch = self._load(handle)
        return self._status(run_dir, launch)

    def _dropped(self, run_dir: Path, launch: dict[str, Any] | None) -> None:
        self._children.pop(run_dir.name, None)
        self._seen.pop(run_dir.name, None)

    def _still_runs(self, run_dir: Path) -> str | None:
        """The supervisor of the run in ``run_dir`` when it still runs without a readable
        launch record (the job deleted or rewrote it): its pid, as ``job.json`` or
        ``supervisor.json`` records it, of a live process that is this run's supervisor
        (its command line names the supervisor and ``run_dir``, so a pid the job wrote
        there names no other process to kill). None when there is none, or the run
        recorded its exit."""
        pid = self._live_supervisor(run_dir)
        if pid is None:
            return None
        return f"its supervisor (pid {pid}) still runs; stop it (kill {pid})"

    def _live_supervisor(self, run_dir: Path) -> int | None:
        """The pid of the live supervisor of the run in ``run_dir`` (:meth:`_still_runs`),
        or None."""
        if records.read_exit(run_dir) is not None:
            return None
        job = records.read_job(run_dir)
        sup = records.read_supervisor(run_dir)
        for pid, start in (
            (job.get("supervisor_pid"), job.get("supervisor_start")),
            (sup.get("pid"), sup.get("start")),
        ):
            if pid is not None and supervise.alive(pid, start) and _supervises(int(pid), run_dir):
                return int(pid)
        return None

    def _unread_gpus(self, run_dir: Path) -> HeldGpus | None:
        """The GPUs of the run in ``run_dir``, running without a readable launch record, as
        its live supervisor's environment names them (``CUDA_VISIBLE_DEVICES``, which the
        launch set from the run's GPUs, mapped back through the ``devices`` map; an empty
        one: none), held whole unless it has the memory limit of shares
        (``DANLU_GPU_MEMORY_LIMIT``). The supervisor is danlu's, started with the job's
        environment, and its environment is what it was started with, whatever the job
        rewrote in the run directory (the supervisor of a job run as another account,
        whose environment is bare, has the job's :data:`PINNING`). None when it cannot be
        read, lacks the variable (a supervisor started by an earlier version for another
        account) or names a device of no GPU of the inventory: the run's GPUs are not known
        then."""
        pid = self._live_supervisor(run_dir)
        if pid is None:
            return None
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            return None
        env = dict(e.split(b"=", 1) for e in environ if b"=" in e)
        visible = env.get(b"CUDA_VISIBLE_DEVICES")
        if visible is None or pid != self._live_supervisor(run_dir):  # (its pid reused)
            return None
        devices: dict[str | None, list[tuple[int, int]]] = {}
        for n, node in enumerate(self._cluster.nodes):
            for gpu in range(node.gpus):  # (a map may give GPUs one device: all are held)
                devices.setdefault(self._device(n, gpu), []).append((n, gpu))
        gpus = []
        for entry in filter(None, visible.decode("utf-8", "replace").split(",")):
            if (slots := devices.get(entry.strip())) is None:
                return None
            gpus.extend(slots)
        shared = b"DANLU_GPU_MEMORY_LIMIT" in env
        stopping = (run_dir / supervise.STOP).exists()
        return HeldGpus(run_dir.name, gpus, shared, stopping)

    def close(self) -> None:
        """Reap supervisors that have exited; running jobs keep running."""
        for proc in self._children.values():
            proc.poll()

    # -- internals ----------------------------------------------------------------------------

    def _status(self, run_dir: Path, launch: dict[str, Any]) -> ExecStatus:
        child = self._children.get(launch["job_id"])
        if child is not None:
            child.poll()  # reap our own supervisor so it does not linger as a zombie
        job = records.read_job(run_dir)
        stop = records.read_stop(run_dir)
        reason = StopReason(stop["reason"]) if "reason" in stop else None
        started = job.get("started_at", launch.get("launched_at"))
        done = records.read_exit(run_dir)
        if done is None:
            rebooted = self._rebooted(launch)
            sup = records.read_supervisor(run_dir)
            pid = job.get("supervisor_pid", sup.get("pid"))
            start = job.get("supervisor_start", sup.get("start"))
            if not rebooted and supervise.alive(pid, start):
                self._seen[launch["job_id"]] = (launch["attempt"], time.time())
                return ExecStatus(RunState.RUNNING, stop_reason=reason, started_at=started)
            done = records.read_exit(run_dir)  # it may just have finished
            if done is None:
                starting = time.time() - launch["launched_at"] < START_TIMEOUT
                if pid is None and starting and not rebooted:
                    return ExecStatus(RunState.RUNNING, stop_reason=reason, started_at=started)
                done = self._lost(run_dir, launch, job, child, rebooted)
        code = done.get("exit_code")
        node_lost = done.get("node_lost") is True
        message = str(done.get("error", ""))
        host_memory = False
        if node_lost:
            outcome = Outcome.PREEMPTED  # as a preemption that could not checkpoint
        elif done.get("error") == SUPERVISOR_LOST:
            outcome = Outcome.PREEMPTED if reason is StopReason.PREEMPT else Outcome.FAILED
        else:
            tail = self._log_tail(run_dir, launch)
            killed = done.get("oom_kills", 0) > 0  # its cgroup's OOM kills while it ran
            outcome = classify_exit(code, tail, reason, oom_killed=killed)
            host_memory = outcome is Outcome.OOM and host_oom(code, tail, killed)
            if host_memory and killed and not message:
                worker = code != KILLED_EXIT_CODE  # torchrun's agent reported a worker's
                message = oom_kills.killed_message(done["oom_kills"], worker)
        return ExecStatus(
            RunState.EXITED,
            outcome=outcome,
            exit_code=code,
            signal=done.get("signal"),
            stop_reason=reason,
            started_at=started,
            finished_at=done.get("finished_at"),
            message=message,
            node_lost=node_lost,
            host_memory=host_memory,
        )

    def _rebooted(self, launch: Mapping[str, Any]) -> bool:
        """Whether the run of ``launch`` was launched in an earlier boot of this host (not
        known for a launch record without ``boot``, from before it was recorded)."""
        boot = launch.get("boot")
        return boot is not None and self._boot is not None and boot != self._boot

    def _lost(
        self,
        run_dir: Path,
        launch: dict[str, Any],
        job: dict[str, Any],
        child: subprocess.Popen[bytes] | None,
        rebooted: bool,
    ) -> dict[str, Any]:
        """The supervisor is gone without a recorded exit: kill what is left (the job's
        process group, and the processes of the run's ``mark`` that left it: daemons) and
        record it lost, unless it is this instance's child and exited 0, which it does only
        when the job did and the disk had no room for the record
        (:data:`~danlu.executors.supervise.EXIT_RECORD_SECONDS`). It ended now when a
        process of it still ran, else when it was last known alive (:func:`last_alive`;
        this instance's last poll that saw it running is one sign).
        A run of an earlier boot (``rebooted``) was lost with the host (``node_lost``):
        nothing of it runs, and the pids it recorded may be other processes' now."""
        now = time.time()
        ran_on = False
        if not rebooted:
            ran_on = _kill_group(job)
            ran_on = kill_marked(launch.get("mark")) or ran_on
        started = float(job.get("started_at", launch["launched_at"]))
        attempt, seen = self._seen.get(launch["job_id"], (None, started))
        signs = [seen] if attempt == launch["attempt"] else []
        log_file = self._job_log(run_dir.name, launch)
        end = now if ran_on else last_alive(run_dir, log_file, started, now, rebooted, signs)
        done: dict[str, Any] = {"exit_code": None, "signal": None, "finished_at": end}
        if rebooted:
            done.update(error=HOST_LOST, node_lost=True)
        elif child is not None and child.returncode == 0:
            done["exit_code"] = 0
        else:
            done["error"] = SUPERVISOR_LOST
        with contextlib.suppress(OSError):  # still full: worked out again at the next poll
            supervise.write_json(run_dir / supervise.EXIT, done)
        return done

    def _signal(
        self,
        handle: Handle,
        run_dir: Path,
        launch: dict[str, Any],
        reason: StopReason,
        grace: float,
    ) -> None:
        """SIGTERM the supervisor, which SIGTERMs the job's group and SIGKILLs it after the
        recorded grace (the launch's when none could be recorded). A supervisor still
        starting up (no :data:`~danlu.executors.supervise.HANDLING` yet) is not signalled,
        which would kill it: it reads the stop recorded (unless none could be)."""
        job = records.read_job(run_dir)
        sup = records.read_supervisor(run_dir)
        pid = job.get("supervisor_pid", sup.get("pid"))
        starting = not job and not (run_dir / supervise.HANDLING).exists()
        if starting and (run_dir / supervise.STOP).exists():
            return
        start = job.get("supervisor_start", sup.get("start"))
        # through a pidfd (signal_process), only while it is the recorded process: the
        # supervisor may exit and its pid be another's between a check and a plain kill
        if (
            pid is not None
            and start is not None
            and supervise.signal_process(int(pid), int(start), signal.SIGTERM)
        ):
            return
        if not supervise.alive(pid, start):  # no supervisor (gone since): no grace
            _kill_group(job)
            kill_marked(launch.get("mark"))


def last_alive(
    run_dir: Path,
    log_file: Path | None,
    started: float,
    now: float,
    rebooted: bool,
    seen: Iterable[float] = (),
) -> float:
    """When the run recorded in ``run_dir`` (started at ``started``) was last known alive,
    its supervisor lost: the latest of its start, its supervisor's last heartbeat
    (:data:`~danlu.executors.supervise.HEARTBEAT`), the last write to its job's log
    ``log_file`` (None: none known) and the times
    it was ``seen`` running, never after ``now``, nor after the host's boot for a run of an
    earlier boot (``rebooted``: the clock was set back since), and never before its start.
    The job can make links in both places: a symbolic link's own time is taken, and a file
    with other hard links (another file of this user, written all the time) is no sign."""
    signs = [started, *seen]
    for path in (run_dir / supervise.HEARTBEAT, *([log_file] if log_file else [])):
        with contextlib.suppress(OSError):
            st = os.lstat(path)
            if supervise.not_regular(st) != supervise.HARD_LINK:
                signs.append(st.st_mtime)
    latest = min(max(signs), now)
    boot = supervise.boot_time() if rebooted else None
    return max(started, latest if boot is None else min(latest, boot))


def _supervisor_env(env: Mapping[str, str], account: Account | None) -> dict[str, str]:
    """The environment of the supervisor of a job of environment ``env``: ``env`` itself,
    run as this process's user; run as root for ``account``, :data:`SUPERVISOR_ENV` and the
    job's :data:`PINNING` (danlu's values, inert for the supervisor: no variable the job
    chose acts in a process run as root), the job's whole environment coming on its
    stdin."""
    if account is None:
        return dict(env)
    return {**SUPERVISOR_ENV, **{key: env[key] for key in PINNING if key in env}}


def _supervises(pid: int, run_dir: Path) -> bool:
    """Whether process ``pid`` is a supervisor of ``run_dir`` (its command line, as
    :meth:`LocalExecutor._start` starts it, ends with the supervisor and the run
    directory)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    want = [os.fsencode(str(SUPERVISOR)), os.fsencode(str(run_dir)), b""]
    return argv[-3:] == want


def kill_marked(mark: str | None) -> bool:
    """SIGKILL every process whose environment holds the run's ``mark`` (:data:`RUN_MARK`):
    what the job started in a session of its own (a daemon) is out of its process group,
    and only its supervisor, their subreaper, ends it; with the supervisor gone it would
    run on, on the GPUs of a run reported ended. A process that replaced its environment
    (``env -i``) or runs as an account this one may not read escapes. Returns whether it
    found one (a zombie has no environment to find)."""
    if not mark:
        return False
    needle = f"{RUN_MARK}={mark}".encode()
    me = os.getpid()
    found = False
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        # its start time before its environment: the process whose environment was read is
        # the one signalled, not another that took its pid since (supervise.signal_process)
        start = supervise.proc_start_time(int(entry.name))
        try:
            environ = Path(entry.path, "environ").read_bytes()
        except OSError:
            continue
        if start is not None and needle in environ.split(b"\0"):
            found = True
            supervise.signal_process(int(entry.name), start, signal.SIGKILL)
    return found


def _kill_group(job: Mapping[str, Any]) -> bool:
    """SIGKILL the job's process group (``pgid`` of its record) while its leader runs, and
    after the leader has exited too: what the leader started (a shell wrapper's program)
    runs on in the group. Not when the leader's pid is another process's now: the group is
    gone then (a group keeps its leader's pid from reuse while it has a process), and the id
    may name another's group. Nor when the leader is gone and the group has no live process
    left: nothing of the job is there to kill, and the id, free then, could be taken by a new
    process's group between the look and the signal (only a process in it keeps a group's id
    from reuse). Returns whether a live (not zombie) process of the group was there to
    kill."""
    pgid = job.get("pgid")
    if pgid is None or int(pgid) <= 0:  # 0 is the caller's own group, not the job's
        return False
    group = int(pgid)
    leader = supervise.alive(job.get("pid"), job.get("start"))
    if not leader and supervise.proc_start_time(group) is not None:
        return False
    ran = bool(supervise.group_members(group))
    if not (leader or ran):
        return False
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signal.SIGKILL)
    return ran
