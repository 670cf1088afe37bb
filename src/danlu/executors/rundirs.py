"""What the local, Slurm and Ray executors share: a directory of records per job's run.

:class:`RunDirExecutor` keeps ``STATE_DIR/runs/JOB_ID/`` for the last run of each job (its
launch record ``launch.json``, a stop request ``stop.json``, and whatever the executor adds)
and the job's log ``LOG_DIR/JOB_ID.log`` (appended across runs; read through any of the
job's handles, also once a failed launch took the last run's record). It implements the
parts of :class:`~danlu.executors.base.Executor` that only read and write those files:
adoption, logs, forgetting and discarding runs, preemption and cancellation (through
:meth:`RunDirExecutor._stop`), the checks before a launch (an earlier run still running,
GPUs another job's live run holds) and the list of live runs behind the latter. A subclass
says how a run's status is learned (:meth:`RunDirExecutor._status`) and how it is stopped.

File names come only from validated job ids, and every path is resolved and checked to stay
in its directory (:func:`safe_child`); a job's log is then opened without following a link
in its name, and only as a regular file (:mod:`~danlu.executors.records`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from abc import abstractmethod
from collections.abc import Callable, Iterator, Mapping
from io import BufferedWriter
from pathlib import Path
from typing import Any

from danlu.core.cluster import Cluster
from danlu.core.errors import ConfigError
from danlu.executors import records, supervise
from danlu.executors.base import (
    ExecStatus,
    Executor,
    Handle,
    HeldGpus,
    JobLaunch,
    Outcome,
    RunStart,
    RunState,
    StopReason,
    busy_gpus,
    check_grace,
    check_log_range,
    check_slots,
    reindexed,
    validate_job_id,
)
from danlu.executors.errors import (
    ExecutorError,
    InvalidLaunchError,
    JobAlreadyRunningError,
    LaunchError,
    UnknownHandleError,
)

log = logging.getLogger(__name__)

DEFAULT_PREEMPT_GRACE = 30.0
"""The preemption grace of a job whose spec has none when a multi-node executor stops its
nodes itself because one checkpointed alone, unless the executor is given another (the
control plane passes its ``DANLU_PREEMPT_GRACE``)."""
RUNS_DIR = "runs"
"""The directory of the executor's state directory holding one directory of records per
job (``runs/JOB_ID``)."""
RESULT = "result.json"
"""The run's result, recorded by the executor once it knows how the run ended (the Slurm and
Ray executors; the local one's supervisor writes ``exit.json`` itself)."""
_OUTCOMES = frozenset(o.value for o in Outcome)
RESULT_FIELDS: Mapping[str, records.Check] = {
    **records.EXIT_FIELDS,
    # (a string first: a list or an object is no set member, it raised TypeError)
    "outcome": lambda v: isinstance(v, str) and v in _OUTCOMES,
    "started_at": records.optional_number,
    "host_memory": lambda v: isinstance(v, bool),  # ExecStatus.host_memory
}


def check_log_max_bytes(value: object) -> int:
    """An executor's ``log_max_bytes`` (the cap on each job's log, ``DANLU_LOG_MAX_MB``, in
    bytes; 0: none) as given; a :class:`ConfigError` naming it when it is no whole number of
    bytes at least 0."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(
            f"log_max_bytes: {value!r} is not a size in bytes; give a whole number "
            "of bytes, or 0 for no cap"
        )
    return value


def safe_child(base: Path, name: str, *, follow: bool = True) -> Path:
    """``base / name``, resolved, refusing anything that would leave ``base``.

    ``name`` must be a single file-name component; the resolved path (symlinks followed) must
    have ``base`` (resolved) as its parent, else :class:`InvalidLaunchError`. With ``follow``
    false the path returned is ``name`` in ``base`` resolved, a link there not followed: a
    job's log, which the job can replace with a link to another file of the directory, is
    then read as the link it is (:func:`~danlu.executors.records.read_log` refuses it).
    """
    root = base.resolve()
    if not name or name in {".", ".."} or "/" in name or "\0" in name:
        raise InvalidLaunchError("job_id", f"{name!r} is not a plain file name")
    path = (root / name).resolve()
    if path.parent != root:
        raise InvalidLaunchError("job_id", f"{name!r} escapes {root}")
    return path if follow else root / name


class RunDirExecutor(Executor):
    """An executor that records each job's last run in a directory of its own.

    Subclasses call :meth:`_init_runs` in their constructor and implement :meth:`_status`
    and :meth:`_stop`; :attr:`launch_fields` and :attr:`launch_required` say how their launch
    records are read (:func:`danlu.executors.records.checked`).
    """

    launch_fields: Mapping[str, records.Check] = records.LAUNCH_FIELDS
    result_fields: Mapping[str, records.Check] = RESULT_FIELDS
    """The fields of a run's recorded result (``result.json``) this executor reads back."""
    launch_required: tuple[str, ...] = records.LAUNCH_REQUIRED
    _runs: Path
    _log_dir: Path
    _cancel_grace: float
    _clock: Callable[[], float]
    _live: dict[Path, dict[str, Any] | None] | None
    _log_elsewhere: dict[str, Path]
    _unread_warned: set[Path]
    _earlier_runs: dict[str, list[list[Any]]]

    def _init_runs(
        self,
        state_dir: str | Path,
        log_dir: str | Path | None,
        cancel_grace: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Set up ``state_dir/runs`` (mode 0700) and the log directory (default
        ``state_dir/logs``); ``clock`` stamps stop requests and results."""
        self._clock = clock
        self._runs = Path(state_dir).resolve() / RUNS_DIR
        self._runs.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._log_dir = Path(log_dir) if log_dir is not None else self._runs.parent / "logs"
        self._cancel_grace = cancel_grace
        self._log_elsewhere = {}
        """By job id: the log this instance opened for a launch that named a ``log_dir`` of
        its own (:meth:`_open_log`), outside ``LOG_DIR``."""
        self._live = None
        """Run directories of the runs that may still run, with their launch records (None:
        not read yet; the first launch scans the state directory once, for runs started
        before this instance, e.g. by a control plane that restarted)."""
        self._unread_warned = set()
        """Run directories without a readable launch record whose run was found still
        running (:meth:`_held_unread`), as warned about."""
        self._earlier_runs = {}
        """By job id: the job's runs before the one being launched, as a launch record's
        ``log_runs`` (:func:`_runs_of`), taken from the record of its previous run that the
        launch deletes (:meth:`_clear_for`), until the new run's record holds them
        (:meth:`_started`); :meth:`log_runs` reads them here while the job has no record (a
        launch that failed after deleting it)."""

    # -- what a subclass says -----------------------------------------------------------------

    @abstractmethod
    def _status(self, run_dir: Path, launch: dict[str, Any]) -> ExecStatus:
        """The status of the run recorded in ``run_dir``."""

    @abstractmethod
    def _signal(
        self,
        handle: Handle,
        run_dir: Path,
        launch: dict[str, Any],
        reason: StopReason,
        grace: float,
    ) -> None:
        """Make the running run stop (its stop request is recorded): SIGTERM now, SIGKILL
        after ``grace`` seconds."""

    def _ended(self, run_dir: Path, launch: dict[str, Any]) -> bool:
        """Whether the run is known to have exited, for the launch check (default: its
        status says so)."""
        return not self._status(run_dir, launch).running

    def _dropped(self, run_dir: Path, launch: dict[str, Any] | None) -> None:
        """Hook: the records of the exited run in ``run_dir`` are about to be deleted."""

    def _still_runs(self, run_dir: Path) -> str | None:
        """Hook: what of the run in ``run_dir``, whose launch record is missing or cannot be
        read (damaged, or rewritten by its job), is still seen running, and how to stop it;
        None when nothing is (default: nothing this executor could find without the record).
        Its records are not deleted while something runs: its supervisor would go on
        writing them into the next run's directory, and hold its GPUs unseen."""
        return None

    def _unread_gpus(self, run_dir: Path) -> HeldGpus | None:
        """Hook: the GPUs held by the run in ``run_dir``, which still runs without a readable
        launch record, as this executor can learn them without the record (its processes,
        its backend); None when it cannot (default), and every GPU is then taken as held
        (:meth:`_held_unread`)."""
        return None

    def _refuse_unreadable(self, run_dir: Path, job_id: str, doing: str) -> None:
        """Raise :class:`JobAlreadyRunningError` when the run in ``run_dir`` has no readable
        launch record and still runs (:meth:`_still_runs`): ``doing`` (launching it again,
        discarding it) would delete the records of a run that goes on."""
        running = self._still_runs(run_dir)
        if running is not None:
            raise JobAlreadyRunningError(
                f"job {job_id} still runs, though its launch record "
                f"{run_dir / supervise.LAUNCH} is missing or damaged, so danlu cannot stop "
                f"it: {running}; then try {doing} again"
            )

    # -- the shared parts ---------------------------------------------------------------------

    def _stop(self, handle: Handle, reason: StopReason, grace: float, *, own: bool) -> None:
        """Record the stop request (``stop.json``: why, the grace, when) and signal the run;
        nothing for a run that has exited. ``own``: the grace is the run's own when its
        launch record has one (the spec's ``preempt_grace``: a preemption, a cancel of its
        job by the control plane), else ``grace``. A request that cannot be
        written (a full disk) still stops the run. An endless ``grace`` (``inf``) is
        :data:`~danlu.executors.supervise.MAX_GRACE_SECONDS` (a record holds no
        ``Infinity``: one the checks drop loses the stop); one that is not a number of
        seconds (``nan``) is refused with :class:`InvalidLaunchError` before anything is
        recorded or signalled."""
        grace = check_grace(grace)
        run_dir, launch = self._load(handle)
        if not self._status(run_dir, launch).running:
            return
        if own:
            grace = self._stop_grace(launch, grace)
        stop = {"reason": reason.value, "grace": max(0.0, grace), "requested_at": self._clock()}
        try:
            supervise.write_json(run_dir / supervise.STOP, stop)
        except OSError as exc:
            log.warning("cannot record the stop of %s (%s): %s", handle, reason.value, exc)
        self._signal(handle, run_dir, launch, reason, grace)

    @staticmethod
    def _stop_grace(launch: Mapping[str, Any], grace: float) -> float:
        """The grace of a stop of the run of ``launch`` that gives the job time to
        checkpoint (a preemption, a cancel of its job): the run's own when its launch record
        has one (the spec's ``preempt_grace``), else ``grace``."""
        own = launch.get("preempt_grace")
        return float(own) if own is not None else grace

    def _recorded(self, run_dir: Path, reason: StopReason | None) -> ExecStatus | None:
        """The run's recorded result as a status, or None when none is recorded."""
        result = records.checked(supervise.read_json(run_dir / RESULT), self.result_fields)
        if result is None or "outcome" not in result:
            return None
        return self._status_of(result, reason)

    def _status_of(self, result: Mapping[str, Any], reason: StopReason | None) -> ExecStatus:
        """The status of a run that ended as ``result`` (its recorded result) says."""
        return exited(result, reason)

    def _record(
        self, run_dir: Path, result: dict[str, Any], reason: StopReason | None
    ) -> ExecStatus:
        """Record how the run ended (``outcome``, ``exit_code``, ``signal``, ``started_at``,
        ``finished_at`` (default: now), ``error``) and return it as a status."""
        result.setdefault("finished_at", self._clock())
        with contextlib.suppress(OSError):  # worked out again at the next poll
            supervise.write_json(run_dir / RESULT, result)
        return self._status_of(result, reason)

    def preempt(self, handle: Handle, grace_seconds: float) -> None:
        """SIGTERM the job's processes now, SIGKILL them after the run's own grace (its
        launch's ``preempt_grace``) or else ``grace_seconds``."""
        self._stop(handle, StopReason.PREEMPT, grace_seconds, own=True)

    def cancel(self, handle: Handle, grace_seconds: float | None = None) -> None:
        """SIGTERM the job's processes now, SIGKILL them after the run's own grace (its
        launch's ``preempt_grace``) or else ``grace_seconds``; with ``grace_seconds`` None,
        after the executor's short cancel grace."""
        if grace_seconds is None:
            self._stop(handle, StopReason.CANCEL, self._cancel_grace, own=False)
        else:
            self._stop(handle, StopReason.CANCEL, grace_seconds, own=True)

    def adopt(self) -> list[Handle]:
        """Every run recorded in the state directory and not forgotten, running or exited."""
        handles = []
        for run_dir in sorted(self._runs.iterdir()):
            launch = self._read_launch(run_dir)
            if launch is not None:
                handles.append(Handle(run_dir.name, int(launch["attempt"])))
        return handles

    def logs(self, handle: Handle, offset: int = 0, limit: int = 1 << 20) -> tuple[bytes, int]:
        """Bytes of the job's log (all its runs) from ``offset`` (:meth:`_log_path`)."""
        path = self._log_path(handle)
        check_log_range(offset, limit)
        return records.read_log(path, offset, limit)

    def log_size(self, handle: Handle) -> int:
        """The size of the job's log file (0 before it exists; :meth:`_log_path`)."""
        return records.log_size(self._log_path(handle))

    def log_runs(self, handle: Handle) -> list[RunStart]:
        """Where each run of the job recorded here began in its log: the runs its last run's
        launch record names (its own ``log_offset`` and the ``log_runs`` before it, at most
        :data:`~danlu.executors.records.LOG_RUNS_KEPT` of those), oldest first; the ones
        taken for a launch that failed since, when the record is gone. A start past the
        log's end, or before an earlier run's (a log truncated since: its cap, a job that
        opened it again with ``"w"``), is left out. :class:`UnknownHandleError` as
        :meth:`logs` raises it."""
        path = self._log_path(handle)
        launch = self._read_launch(safe_child(self._runs, handle.job_id, follow=False))
        runs = _runs_of(launch) if launch is not None else []
        runs = runs or self._earlier_runs.get(handle.job_id, [])
        size = records.log_size(path)
        out: list[RunStart] = []
        for attempt, offset, started_at in runs:
            if offset <= size and (not out or offset >= out[-1].offset):
                out.append(RunStart(int(attempt), int(offset), float(started_at)))
        return out

    def _log_path(self, handle: Handle) -> Path:
        """Where the log of ``handle``'s job is: the log of all the job's runs
        (:meth:`_job_log`, never the path a run's record names), whichever run the attempt is
        (the attempt need not be ``handle``'s): readable while a record of one of the job's
        runs is there (before the run wrote anything too), or the log file is. A launch
        deletes the record of the job's previous run before it can still fail (its working
        directory gone, a node fault), and the output of the runs that ran must stay readable
        then (the control plane reads the log through the job's current attempt, which never
        ran). :class:`UnknownHandleError` when there is neither: the job never had a run
        here, or it was discarded, or its log is a link out of its directory."""
        validate_job_id(handle.job_id)
        launch = self._read_launch(safe_child(self._runs, handle.job_id, follow=False))
        path = self._job_log(handle.job_id, launch)
        if path is None or not (launch is not None or path.is_file()):
            raise UnknownHandleError(f"no run {handle.key} in {self._runs}, nor its log")
        return path

    def _job_log(self, job_id: str, launch: Mapping[str, Any] | None = None) -> Path | None:
        """The log of job ``job_id`` as this executor places it: ``LOG_DIR/JOB_ID.log``, or
        where this instance opened it for a launch that named its own ``log_dir``
        (:meth:`_open_log`), or where the launch record ``launch`` of the job's run says an
        earlier instance opened it (its ``log_dir``: ``JOB_ID.log`` there). Only executors
        whose :attr:`launch_fields` name ``log_dir`` keep it: the local one, whose records
        only a job run as the control plane's own user on its host can rewrite, and such a
        job can read any file it would name there itself. Never the ``log_path`` of a run's
        record: a job can rewrite its records (it runs as the same user, a Slurm job on
        another host too, where the control plane's files are out of its reach), and a
        record pointing at another file would have :meth:`logs` read that file, the output
        appended to it, its tail classified. None when the log is a link out of its
        directory (not the job's log); a link in it is returned as the link (not followed),
        which :mod:`~danlu.executors.records` reads as no log."""
        name = f"{job_id}.log"
        try:
            if (path := self._log_elsewhere.get(job_id)) is not None:
                return path
            if launch is not None and "log_dir" in launch:
                return safe_child(Path(launch["log_dir"]), name, follow=False)
            return safe_child(self._log_dir, name, follow=False)
        except InvalidLaunchError:
            return None

    def _log_tail(self, run_dir: Path, launch: Mapping[str, Any]) -> str:
        """The end of the log written by the run recorded in ``run_dir`` (from its launch
        record's ``log_offset``), at most :data:`~danlu.executors.records.LOG_TAIL_BYTES` of
        it, read from its job's log (:meth:`_job_log`); empty when there is none."""
        path = self._job_log(run_dir.name, launch)
        return "" if path is None else records.log_tail(path, int(launch.get("log_offset", 0)))

    def forget(self, handle: Handle) -> None:
        """Delete the records of an exited run (the log stays)."""
        run_dir, launch = self._load(handle)
        if self._status(run_dir, launch).running:
            raise ExecutorError(f"job {handle.job_id} still runs; stop it before forgetting it")
        self._drop(run_dir, launch)

    def discard(self, job_id: str) -> None:
        """Delete the run records and this executor's log of the finished job ``job_id`` (a
        log that a launch put elsewhere, ``JobLaunch.log_dir``, is its caller's; the path in
        the run's record is not trusted, the job could have rewritten it). A link the job put
        at its log (to another job's log) is removed, never the file it names."""
        validate_job_id(job_id)
        run_dir = safe_child(self._runs, job_id, follow=False)
        launch = self._read_launch(run_dir) if run_dir.is_dir() else None
        if launch is not None and self._status(run_dir, launch).running:
            raise ExecutorError(f"job {job_id} still runs; stop it before discarding it")
        if launch is None and run_dir.is_dir() and not run_dir.is_symlink():
            self._refuse_unreadable(run_dir, job_id, "discarding it")
        self._drop(run_dir, launch)
        self._log_elsewhere.pop(job_id, None)
        self._earlier_runs.pop(job_id, None)
        # (the name alone: a link there, in the directory or out of it, is removed itself;
        # and the older part of a capped log: danlu.executors.logcap)
        for name in (f"{job_id}.log", f"{job_id}.log.1"):
            (self._log_dir.resolve() / name).unlink(missing_ok=True)

    def _drop(self, run_dir: Path, launch: dict[str, Any] | None) -> None:
        """Forget the run in ``run_dir`` and delete its records. A link the job put in its
        run directory's place (``runs/JOB_ID``) is removed, not what it points to."""
        self._dropped(run_dir, launch)
        self._unread_warned.discard(run_dir)
        if self._live is not None:
            self._live.pop(run_dir, None)
        if run_dir.is_symlink():
            run_dir.unlink(missing_ok=True)
        else:
            shutil.rmtree(run_dir, ignore_errors=True)

    def _read_launch(self, run_dir: Path) -> dict[str, Any] | None:
        """The run's launch record, or None when it is missing, lacks what identifies the
        run, or names another job than the one whose directory it is in (``runs/JOB_ID``): a
        record rewritten so would have this run's polls, stops and clean-up act on the other
        job's processes, Slurm jobs, actors."""
        launch = records.read_launch(run_dir, self.launch_fields, self.launch_required)
        return launch if launch is not None and launch["job_id"] == run_dir.name else None

    def _load(self, handle: Handle) -> tuple[Path, dict[str, Any]]:
        validate_job_id(handle.job_id)
        run_dir = safe_child(self._runs, handle.job_id, follow=False)
        launch = self._read_launch(run_dir)
        if launch is None or launch["attempt"] != handle.attempt:
            raise UnknownHandleError(f"no run {handle.key} in {self._runs}")
        return run_dir, launch

    def _clear_for(self, job: JobLaunch, cluster: Cluster) -> Path:
        """The checks before launching ``job``, and its run directory, emptied: raises
        :class:`InvalidLaunchError` for GPUs not in ``cluster`` or whole GPUs mixed with
        memory shares, :class:`JobAlreadyRunningError` while an earlier run of the job still
        runs, :class:`GpusBusyError` while another job's live run holds one of its GPUs."""
        check_slots(cluster, job.gpus)
        if any(s.memory is None for s in job.gpus) and job.memory_limit is not None:
            raise InvalidLaunchError("gpus", "mix of whole GPUs and memory shares in one job")
        run_dir = safe_child(self._runs, job.job_id, follow=False)
        if (run_dir / supervise.LAUNCH).exists():
            old = self._read_launch(run_dir)
            if old is not None and self._status(run_dir, old).running:
                raise JobAlreadyRunningError(
                    f"job {job.job_id} still runs (attempt {old['attempt']})"
                )
            if old is None and not run_dir.is_symlink():
                self._refuse_unreadable(run_dir, job.job_id, "the launch")
            if old is not None:  # where its runs began in the log, for the next record
                self._earlier_runs[job.job_id] = _runs_of(old)
            self._drop(run_dir, old)
        elif run_dir.is_symlink():  # a link in the run directory's place: the job's doing
            run_dir.unlink()
        elif run_dir.exists():
            # A submit that died (control plane killed) between creating the directory and
            # writing the launch record: nothing was started from it. Or a run whose job
            # deleted its launch record: not removed while its supervisor runs.
            self._refuse_unreadable(run_dir, job.job_id, "the launch")
            shutil.rmtree(run_dir)
        busy_gpus(job, self._held())
        return run_dir

    def _make_run_dir(self, run_dir: Path, job_id: str) -> None:
        """Make the run directory ``run_dir`` of a launch of job ``job_id`` (mode 0700), which
        :meth:`_clear_for` found free. Raises :class:`JobAlreadyRunningError` when it is there
        again: another executor on the same state directory launched the job meanwhile. That
        is no failure of this launch's, whose clean-up (removing the run directory it made)
        would delete the records of the other's run, running on unseen."""
        try:
            run_dir.mkdir(mode=0o700)
        except FileExistsError:
            raise JobAlreadyRunningError(
                f"job {job_id} was launched by another executor on {self._runs} while this "
                "launch was being made; its run is that one"
            ) from None

    @contextlib.contextmanager
    def _new_run_dir(self, run_dir: Path, job_id: str) -> Iterator[None]:
        """Make the run directory of a launch (:meth:`_make_run_dir`) for the block, which
        writes the run's records and starts it: an :class:`OSError` raised in it (a full
        disk) removes the directory, which this launch made, before it goes on. One raised
        before, while the launch opened its log, removes nothing: the directory may be
        another launch's of the same job, made meanwhile."""
        self._make_run_dir(run_dir, job_id)
        try:
            yield
        except OSError:
            shutil.rmtree(run_dir, ignore_errors=True)
            raise

    def _started(self, run_dir: Path, record: dict[str, Any]) -> None:
        """A run was launched from ``run_dir``: it is live (and its record holds the runs
        before it: :attr:`_earlier_runs`)."""
        self._earlier_runs.pop(run_dir.name, None)
        if self._live is not None:
            self._live[run_dir] = record

    def _held(self) -> Iterator[HeldGpus]:
        """The GPUs of each run not known to have exited (runs launched before the launch
        record had ``gpus`` hold none as far as this knows; those from before it had
        ``shared`` count as memory shares, the reading that refuses fewer launches), and of
        each run without a readable launch record that still runs (:meth:`_held_unread`).
        Raises what :meth:`_still_runs` raises (its backend cannot be asked)."""
        if self._live is None:
            self._live = {d: self._read_launch(d) for d in self._runs.iterdir()}
        for run_dir, launch in sorted(self._live.items()):
            if launch is None:
                unread = self._held_unread(run_dir)
                if unread is not None:
                    yield unread
                    continue
                self._unread_warned.discard(run_dir)
                del self._live[run_dir]
            elif self._ended(run_dir, launch):
                del self._live[run_dir]  # exited (a later run of its job is added anew)
            elif launch.get("gpus"):
                stopping = (run_dir / supervise.STOP).exists()
                shared = bool(launch.get("shared", True))
                yield HeldGpus(launch["job_id"], self._gpus_now(launch), shared, stopping)

    def _held_unread(self, run_dir: Path) -> HeldGpus | None:
        """The GPUs held by the run in ``run_dir``, whose launch record (naming its GPUs) is
        missing or damaged, while it still runs (:meth:`_still_runs`; a warning says what
        runs and how to stop it): those the executor finds another way
        (:meth:`_unread_gpus`), else every GPU of the inventory, held whole (which it holds
        is not known, and a launch onto them would share them with it unseen). None when
        nothing of it runs."""
        running = self._still_runs(run_dir)
        if running is None:
            return None
        held = self._unread_gpus(run_dir)
        if run_dir not in self._unread_warned:
            self._unread_warned.add(run_dir)
            if held is None:
                holds = "no other job is launched until it has exited, as its GPUs are not known"
            else:
                named = ", ".join(f"{node}/{gpu}" for node, gpu in held.gpus) or "none"
                holds = f"it holds GPU(s) {named} (node/gpu) until it has exited"
            log.warning(
                "job %s still runs, though its launch record %s is missing or damaged: %s; %s",
                run_dir.name,
                run_dir / supervise.LAUNCH,
                running,
                holds,
            )
        if held is not None:
            return held
        nodes = self.inventory().nodes
        gpus = [(n, gpu) for n, node in enumerate(nodes) for gpu in range(node.gpus)]
        return HeldGpus(run_dir.name, gpus, shared=False, stopping=False)

    def _gpus_now(self, launch: Mapping[str, Any]) -> list[tuple[int, int]]:
        """A run's GPUs as ``(node, gpu)`` of the inventory as it is now. Its launch record
        has the indices of the inventory it was launched on; a record that names its nodes
        (``nodes``, as the cluster executors write it) is re-indexed by name
        (:func:`~danlu.executors.base.reindexed`; see
        :meth:`~danlu.executors.base.Executor.refresh_inventory`). Others are taken as they
        are (the local executor's single host never changes)."""
        gpus = [(int(node), int(gpu)) for node, gpu in launch["gpus"]]
        names = launch.get("nodes")
        moved = reindexed(gpus, names, self.inventory()) if isinstance(names, list) else None
        return gpus if moved is None else moved

    def _open_log(self, log_dir: Path, job_id: str) -> tuple[Path, int]:
        """The job's log ``log_dir/JOB_ID.log`` (made if missing) and its length: where the
        output of the run being launched starts (:meth:`_log_file`)."""
        path, log = self._log_file(log_dir, job_id)
        with log:
            return path, log.seek(0, os.SEEK_END)

    def _log_file(self, log_dir: Path, job_id: str) -> tuple[Path, BufferedWriter]:
        """The job's log ``log_dir/JOB_ID.log`` (made if missing) and the file open to append
        to it, for the caller to close. One outside the executor's ``LOG_DIR`` is remembered
        for :meth:`_job_log` while this instance lives (an executor that keeps a launch
        record's ``log_dir`` records it there for later instances). A log that is a symbolic
        link, not a regular file or one with other hard links (the job's doing:
        :func:`~danlu.executors.supervise.open_regular`) is a :class:`LaunchError`."""
        log_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = safe_child(log_dir, f"{job_id}.log", follow=False)
        # 0600 whatever the umask: the output of a job is its owner's (and the admins'),
        # and the control plane keeps the usual umask, which its jobs inherit. A link the
        # job left at its log (to another job's log) is not followed, nor a FIFO opened,
        # nor a hard link the job made there (to another file of this user) written to.
        opened = supervise.open_regular(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        if isinstance(opened, str):
            raise LaunchError(f"log {path} of job {job_id} {opened}")
        log = open(opened, "ab")  # noqa: SIM115 (the caller's to close)
        if path.parent == self._log_dir.resolve():
            self._log_elsewhere.pop(job_id, None)
        else:
            self._log_elsewhere[job_id] = path
        return path, log

    def _launch_record(self, job: JobLaunch, log_path: Path, offset: int) -> dict[str, Any]:
        """The fields of a launch record every executor writes (:data:`records.LAUNCH_FIELDS`);
        each adds its own."""
        return {
            "job_id": job.job_id,
            "attempt": job.run_attempt,
            "command": job.command,
            "log_path": str(log_path),
            "log_offset": offset,
            # where the job's earlier runs began in the log (danlu logs tells them apart)
            "log_runs": self._earlier_runs.get(job.job_id, [])[-records.LOG_RUNS_KEPT :],
            "cancel_grace": self._cancel_grace,
            "launched_at": self._clock(),
            "gpus": [[slot.node, slot.gpu] for slot in job.gpus],
            "shared": all(slot.memory is not None for slot in job.gpus),
        } | ({} if job.preempt_grace is None else {"preempt_grace": job.preempt_grace})


def _runs_of(launch: Mapping[str, Any]) -> list[list[Any]]:
    """The runs a launch record names, each ``[attempt, offset, started_at]``, oldest first:
    the earlier ones it keeps (``log_runs``) and its own, the newest
    :data:`~danlu.executors.records.LOG_RUNS_KEPT` plus one."""
    own = [launch["attempt"], launch.get("log_offset", 0), launch["launched_at"]]
    return [*launch.get("log_runs", ()), own]


def exited(result: Mapping[str, Any], reason: StopReason | None) -> ExecStatus:
    """The status of an ended run from its recorded result."""
    code = result.get("exit_code")
    sig = result.get("signal")
    return ExecStatus(
        RunState.EXITED,
        outcome=Outcome(result["outcome"]),
        exit_code=code if isinstance(code, int) else None,
        signal=sig if isinstance(sig, int) else None,
        stop_reason=reason,
        started_at=result.get("started_at"),
        finished_at=result.get("finished_at"),
        message=str(result.get("error", "")),
        node_lost=result.get("node_lost") is True,
        host_memory=result.get("host_memory") is True,
    )
