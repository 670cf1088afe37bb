"""The Slurm executor: each run of a job is one Slurm batch job, placed where danlu chose.

danlu stays the scheduler: it owns the GPUs of a Slurm partition and tells Slurm where each
run goes. A run is submitted with ``sbatch`` to the nodes of its allocation (``--nodelist``,
one task per node, ``--oversubscribe`` so that jobs sharing a node or a GPU can be placed
together) and asks Slurm for no GPUs; its task on each node
(:mod:`danlu.executors.slurm_task`, started by ``srun``) sets ``CUDA_VISIBLE_DEVICES`` to that
node's GPUs of the allocation and torchrun's ``PET_*`` settings for the job's nodes. The
partition should be danlu's alone: a job Slurm places there by itself is not seen by danlu.

Files: the state directory (``runs/JOB_ID/``: the launch record, the task description, the
batch script, a stop request, the final result; ``work/JOB_ID/``: the working directory of a
job without ``workdir``) and the logs (``JOB_ID.log``, appended across runs) must be on a
filesystem the nodes share, as Slurm clusters' home directories are.

- **Working directory.** A job runs in its ``workdir``; one without runs in
  ``STATE_DIR/work/JOB_ID/``, made at its first launch and kept across its runs (what it
  writes there, a checkpoint, a results file, is there at its next run after a preemption or
  a failure), apart from the executor's records (``runs/JOB_ID/``, emptied at each launch),
  and deleted with the job's log when the job is discarded (:meth:`SlurmExecutor.discard`).

- **Environment.** The job's environment is ``base_env`` and the job's own ``env`` (without
  ``SLURM_*``, ``SBATCH_*``, ``SRUN_*`` or ``SALLOC_*`` variables, which would change the
  submission: another partition, other nodes), the danlu job environment on top (DESIGN.md,
  "Job environment"). It reaches the nodes in the run's task file
  (:mod:`~danlu.executors.slurm_task`), not through ``sbatch``, which runs on the control
  plane's host with the commands' own environment; only the job's token, kept off disk, is
  exported through it (``--export=DANLU_TOKEN``), and Slurm keeps it with the job.
- **Stopping.** A preemption or a cancel sends SIGTERM to the job's processes
  (``scancel --signal=TERM``, the steps only: a SIGTERM to ``srun`` itself would kill the
  tasks) and, when it has not exited after the grace, SIGKILL (``--signal=KILL --full``).
  A SIGTERM that could not be sent (the controller unreachable, the job suspended) is sent
  again at the next polls until it is, the grace still counted from the request; to a job
  seen suspended, only once it has been seen running again for
  :data:`~danlu.executors.slurm_stops.RESUME_SETTLE` seconds (its step resumes on the node
  after the controller reports it running, and drops a SIGTERM before); so is one Slurm
  reports resumed just before (``SuspendTime``), though no poll saw it suspended. A run Slurm
  has not started yet is cancelled at once.
- **Pending.** A run Slurm keeps ``PENDING`` (its partition down, the job held) is
  reported running with Slurm's reason in its message and no start time; one not started
  ``pending_limit`` seconds after its submission is cancelled and ends as a failed launch.
  So is one held after a requeue (``REQUEUE_HOLD``, ``SPECIAL_EXIT``, ``RESV_DEL_HOLD``:
  it runs again only once released) ``pending_limit`` seconds after it was first seen held,
  and one requeued after it ran (``PENDING`` again) ``pending_limit`` seconds after it was
  first seen so (:mod:`~danlu.executors.slurm_waiting`); a stop of a waiting run cancels it.
  A state danlu does not know (empty, or one a newer Slurm adds) is taken as running, with a
  warning: only :data:`~danlu.executors.slurmctl.ENDED_STATES` end a run.
- **Paths.** The log's path is a filename pattern to Slurm (``--output``): its ``%`` are
  escaped (:func:`slurm_pattern`); a log directory with a backslash is refused. The batch
  script is written into the run directory (the job's to write) under a fresh name and
  renamed over ``batch.sh`` (:func:`~danlu.executors.supervise.write_file`), and ``sbatch``
  reads it on its standard input: a link a job puts there is neither written through nor
  read. A job Slurm
  could not launch (``JobLaunchFailure``: its log could not be opened on the node) fails
  saying so.
- **Gang.** ``srun --kill-on-bad-exit`` ends the run on every node when one node's task
  fails. A task whose command checkpointed (exit 75) exits 0 to ``srun`` (its record keeps
  the 75), so the other nodes finish their checkpoints within the stop's grace. When one
  node checkpointed with no stop danlu asked for (its host sent SIGTERM to that node alone),
  the executor stops the others once, as a preemption, with the job's grace
  (:func:`~danlu.executors.slurm_stops.gang_stop`).
- **Exit.** The exit the nodes' tasks recorded in the run directory
  (:func:`~danlu.executors.slurm_exits.recorded_exit`: the first failure in time that is not
  a checkpoint, as soon as one is recorded, else 75 or 0 once every node recorded its exit),
  else the batch job's exit code (``scontrol show job``: ``ExitCode``; none for a job
  cancelled before it started), classifies the run as
  :func:`~danlu.executors.base.classify_exit` does;
  ``OUT_OF_MEMORY`` is OOM and ``NODE_FAIL`` or ``BOOT_FAIL`` a preemption (re-queued to
  resume from its checkpoint), unless every node recorded its exit (and for an OOM, a
  success or a checkpoint each): those exits decide then
  (:func:`~danlu.executors.slurm_exits.exits_decide`). The recorded exits also serve when
  Slurm has forgotten the job (its ``MinJobAge`` passed while the control plane was away).
  After a requeue only those written since the run started again count
  (:mod:`~danlu.executors.slurm_exits`).
- **Submission.** An ``sbatch`` that timed out may have been taken all the same (a busy
  controller handles a request its client gave up on): the run is kept and tracked by its
  job name (``danlu.JOB_ID.ATTEMPT``), never submitted again; of several jobs of that name
  the first is the run's and the others are cancelled (:meth:`SlurmExecutor._unconfirmed`).
- **Nodes.** A launch onto a node Slurm reports down, drained or failing raises
  :class:`~danlu.executors.errors.NodeLaunchError`, which the control plane counts against
  the node (and cordons it after a few). While Slurm reports the partition itself ``DOWN``,
  ``DRAIN`` or ``INACTIVE``, every node of it is closed (:meth:`SlurmExecutor.closed_nodes`),
  and an ``sbatch`` Slurm refuses for it is a
  :class:`~danlu.executors.errors.PartitionClosedError` naming the partition and the state
  Slurm reports of it then (:func:`~danlu.executors.slurm_batch.refused`): the job waits, no
  restart counted, no node blamed.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from danlu.core.cluster import GPU_TYPES, Cluster, GpuType
from danlu.executors import (
    records,
    slurm_exits,
    slurm_names,
    slurm_stops,
    slurm_task,
    slurm_waiting,
    supervise,
)
from danlu.executors.base import (
    ExecStatus,
    GpuSharingExecutor,
    Handle,
    HeldGpus,
    JobLaunch,
    StopReason,
    job_environment,
    master_port,
    node_devices,
    validate_job_id,
)
from danlu.executors.errors import (
    ExecutorError,
    NodeLaunchError,
)
from danlu.executors.records import save_launch
from danlu.executors.rundirs import DEFAULT_PREEMPT_GRACE, check_log_max_bytes
from danlu.executors.slurm_batch import BATCH as BATCH
from danlu.executors.slurm_batch import TASK_SCRIPT as TASK_SCRIPT
from danlu.executors.slurm_batch import (
    batch_script,
    closes,
    refused,
    sbatch_options,
    unsent,
)
from danlu.executors.slurm_batch import slurm_pattern as slurm_pattern
from danlu.executors.slurm_inventory import SlurmInventory
from danlu.executors.slurm_names import run_name
from danlu.executors.slurm_polls import SlurmPolls
from danlu.executors.slurm_stops import KILL_BATCH_AFTER as KILL_BATCH_AFTER
from danlu.executors.slurmctl import (
    SbatchUnreadError,
    SlurmCommands,
    SlurmError,
    SlurmJob,
    SlurmNode,
    SlurmUnavailableError,
)

log = logging.getLogger(__name__)

PENDING_LIMIT = 300.0
"""Seconds a run may stay ``PENDING`` in Slurm after its submission before the executor
gives it up (cancels it; it ends as a failed launch): danlu chose its nodes as free, so
Slurm should start it within a scheduling cycle or two. A run held, or requeued after it
ran, has as long from when it was first seen so (:mod:`~danlu.executors.slurm_waiting`)."""
_PRIVATE_PREFIXES = ("SLURM_", "SBATCH_", "SRUN_", "SALLOC_")


def _launch_fields() -> dict[str, records.Check]:
    fields = dict(records.LAUNCH_FIELDS)
    fields["slurm_id"] = lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0
    fields["nodes"] = lambda v: isinstance(v, list) and all(map(slurm_task.is_plain_name, v))
    number = records.STOP_FIELDS["grace"]
    fields["gang_stopped_at"] = number  # when the executor stopped the nodes (gang_stop)
    fields["gang_grace"] = number  # and with what grace
    # the requested_at of the stop (danlu's, or the gang stop's) whose SIGTERM is not sent yet
    fields["term_due"] = number
    fields["suspended_at"] = number  # when its job was last seen SUSPENDED (slurm_stops)
    fields["resumed_at"] = number  # and first seen RUNNING since
    fields["slurm_resumed_at"] = number  # Slurm's time of a resume no poll saw, waited for
    fields["gave_up_at"] = number  # when the executor cancelled the run Slurm kept waiting
    fields["pending_reason"] = lambda v: isinstance(v, str)  # Slurm's reason then
    fields["pending_state"] = lambda v: isinstance(v, str)  # and its state (slurm_waiting)
    fields["pending_limit"] = number  # the limit the run's wait passed
    fields["held_at"] = number  # when the executor first saw it held (slurm_waiting)
    fields["ran_at"] = number  # when it first saw it run
    fields["requeued_at"] = number  # when it first saw it PENDING again after that
    fields["sbatch_failed_at"] = number  # when sbatch failed as the controller unanswering
    fields["sbatch_error"] = lambda v: isinstance(v, str)  # what it said (_unconfirmed)
    fields.update(slurm_exits.LAUNCH_FIELDS)  # exits_since, slurm_started_at
    return fields


LAUNCH_FIELDS = _launch_fields()
"""The Slurm executor's launch record: the local one's, its Slurm job id and node names."""


class SlurmExecutor(SlurmPolls, SlurmInventory, GpuSharingExecutor):
    """Runs each job as a Slurm batch job on the nodes danlu placed it on.

    ``commands`` runs Slurm's client commands (with the cluster's ``SLURM_CONF``);
    ``partition`` is danlu's partition (None: Slurm's default one, and every node listed);
    ``gpu_type`` is the type of GPUs whose ``Gres`` names none or one danlu does not know,
    and the size of a model it names without one (``a100``: :func:`listed_gpu_type`).
    ``state_dir`` and ``log_dir`` must be on a filesystem the nodes share. ``sbatch_options``
    are added to every submission (an account, a QoS, memory per CPU), before the run's own,
    which win where they overlap. ``python`` is the interpreter the nodes run the per-node
    task with. ``preempt_grace`` is the grace of a job whose spec has none when the executor
    stops its nodes itself, as a preemption, because one of them checkpointed alone
    (:func:`~danlu.executors.slurm_stops.gang_stop`). ``pending_limit`` is how long Slurm may
    keep a run ``PENDING`` after its submission (after it was requeued, from when it was
    first seen so), or held after a requeue from when it was first seen held, before it is
    cancelled and ends as a failed launch (None: as long as Slurm keeps it;
    :mod:`~danlu.executors.slurm_waiting`). ``log_max_bytes`` caps each job's log (0: no
    cap), kept by the task of the run's first node (:func:`~danlu.executors.slurm_task.log_cap`).
    Raises :class:`ExecutorError` for a log directory Slurm cannot name (a backslash in it),
    :class:`ConfigError` for a ``log_max_bytes`` that is no whole number of bytes.
    """

    launch_fields = LAUNCH_FIELDS

    def __init__(
        self,
        commands: SlurmCommands,
        state_dir: str | Path,
        *,
        partition: str | None = None,
        gpu_type: GpuType = GPU_TYPES["generic"],
        log_dir: str | Path | None = None,
        base_env: Mapping[str, str] | None = None,
        api_url: str | None = None,
        cancel_grace: float = 5.0,
        preempt_grace: float = DEFAULT_PREEMPT_GRACE,
        python: str = sys.executable,
        sbatch_options: Sequence[str] = (),
        max_jobs_per_gpu: int = 16,
        poll_interval: float = 1.0,
        pending_limit: float | None = PENDING_LIMIT,
        clock: Callable[[], float] = time.time,
        log_max_bytes: int = 0,
    ) -> None:
        self._log_max_bytes = check_log_max_bytes(log_max_bytes)
        self._commands = commands
        self._partition = partition
        self._gpu_type = gpu_type
        self._init_runs(state_dir, log_dir, cancel_grace, clock)
        self._work = self._runs.parent / "work"
        try:
            slurm_pattern(str(self._log_dir.resolve()))
        except ExecutorError as exc:
            raise ExecutorError(f"the log directory cannot be given to Slurm: {exc}") from None
        self._pending_limit = pending_limit
        self._base_env = _public(base_env or {})
        self._api_url = api_url
        self._python = python
        self._preempt_grace = preempt_grace
        self._sbatch_options = tuple(sbatch_options)
        self._max_jobs_per_gpu = max_jobs_per_gpu
        self._poll_interval = poll_interval
        self._nodes: list[SlurmNode] | None = None
        self._partition_state = ""  # Slurm's of the partition (sinfo's %a): "" unknown
        self._cluster: Cluster | None = None
        self._states: dict[int, SlurmJob] = {}
        self._states_at = -float("inf")
        self._node_states: dict[str, str] = {}
        self._node_states_at = -float("inf")

    # -- capabilities -------------------------------------------------------------------------

    def max_jobs_per_gpu(self) -> int:
        """The most jobs that may share one GPU (a constructor setting)."""
        return self._max_jobs_per_gpu

    # -- environment --------------------------------------------------------------------------

    def job_env(self, job: JobLaunch) -> dict[str, str]:
        """The job's environment: ``base_env`` (without inherited ``DANLU_*``) and the job's
        ``env`` (Slurm's own variables dropped; its ``DANLU_*`` ones kept, a sweep trial's
        ``DANLU_HPARAMS`` among them), the danlu job environment on top, which wins; each
        task adds Slurm's ``SLURM*`` variables of its node (``SLURM_CONF`` among them). It
        reaches the nodes in the run's task file, never through ``sbatch``'s environment
        (``sbatch`` runs on the control plane's host, where the job's ``LD_PRELOAD`` or
        ``PATH`` must not act), except ``DANLU_TOKEN``, which is kept off disk and exported
        alone."""
        return job_environment(self._base_env, job, self._api_url, _PRIVATE_PREFIXES)

    # -- lifecycle ----------------------------------------------------------------------------

    def submit(self, job: JobLaunch) -> Handle:
        """Submit ``job`` to Slurm on its allocation's nodes. Raises
        :class:`JobAlreadyRunningError` while an earlier run still runs (or another executor on
        the state directory launched the job meanwhile),
        :class:`GpusBusyError` while another job's run holds one of its GPUs,
        :class:`NodeLaunchError` when Slurm reports one of its nodes down or drained,
        :class:`ExecutorUnavailableError` when Slurm's controller cannot be reached (nothing
        was submitted), and :class:`LaunchError` when ``sbatch`` refuses it (a
        :class:`PartitionClosedError`, naming the partition's state, when the partition takes
        no job: drained or inactive in Slurm, or gone;
        :func:`~danlu.executors.slurm_batch.refused`). An ``sbatch``
        that timed out (Slurm may have taken the job) returns the run's handle, tracked by
        its job name (:meth:`_unconfirmed`)."""
        cluster = self.inventory()
        run_dir = self._clear_for(job, cluster)
        names = [cluster.nodes[i].name for i in job.nodes]
        self._check_nodes(names)
        try:
            return self._submit(job, run_dir, names)
        except OSError as exc:  # (the run directory, if this launch made it, is removed)
            raise NodeLaunchError(
                f"cannot write the run files of job {job.job_id}: {exc}", nodes=()
            ) from exc

    def _submit(self, job: JobLaunch, run_dir: Path, names: list[str]) -> Handle:
        log_path, offset = self._open_log(self._log_dir, job.job_id)
        with self._new_run_dir(run_dir, job.job_id):
            return self._sbatch_run(job, run_dir, names, log_path, offset)

    def _sbatch_run(
        self, job: JobLaunch, run_dir: Path, names: list[str], log_path: Path, offset: int
    ) -> Handle:
        """Write the records of ``job``'s run into ``run_dir``, made for it, and submit it to
        Slurm, its output appended to ``log_path`` from ``offset``."""
        workdir = job.workdir
        if workdir is None:
            self._work.mkdir(exist_ok=True, mode=0o700)
            work = self._work_dir(job.job_id)
            work.mkdir(exist_ok=True, mode=0o700)
            workdir = str(work)
        addresses = {n.name: n.address for n in self._nodes or ()}
        devices = node_devices(job, self.inventory())
        env = self.job_env(job)
        token = env.pop("DANLU_TOKEN", None)
        task = {
            "command": job.command,
            "env": env,
            "workdir": workdir,
            "devices": {name: ",".join(found) for name, found in devices.items()},
            "nodes": names,
            "master_addr": addresses.get(names[0], names[0]) if names else "127.0.0.1",
            "master_port": master_port(job),
            "log_path": str(log_path),
        }
        if self._log_max_bytes:
            task["log_max_bytes"] = self._log_max_bytes
        supervise.write_json(run_dir / slurm_task.TASK, task)
        srun = self._commands.program("srun")
        script = batch_script(srun, self._python, run_dir, max(1, len(names)), workdir)
        # the run directory is the job's to write: a link put at batch.sh is replaced, never
        # written through (write_file), and sbatch reads the script it is given, not the file
        supervise.write_file(run_dir / BATCH, script, 0o700)
        record = self._launch_record(job, log_path, offset)
        record["nodes"] = names
        supervise.write_json(run_dir / supervise.LAUNCH, record)
        name = run_name(job.job_id, job.run_attempt)
        options = sbatch_options(
            self._sbatch_options, name, names, log_path, workdir, self._partition, token is not None
        )
        try:
            submission = self._commands.env or {}
            if token is not None:
                submission["DANLU_TOKEN"] = token
            slurm_id = self._commands.sbatch(options, script, submission)
        except SlurmUnavailableError as exc:
            if unsent(exc):
                shutil.rmtree(run_dir, ignore_errors=True)
                raise
            return self._unconfirmed(job, run_dir, record, exc)
        except SbatchUnreadError as exc:  # Slurm took it: deleting its run would orphan it
            return self._unconfirmed(job, run_dir, record, exc)
        except SlurmError as exc:  # the partition closed: a PartitionClosedError, no restart
            shutil.rmtree(run_dir, ignore_errors=True)
            state = self._refusing_state(exc)
            raise refused(job.job_id, exc, self._partition, self._sbatch_options, state) from exc
        record["slurm_id"] = slurm_id
        try:
            supervise.write_json(run_dir / supervise.LAUNCH, record)
        except OSError:  # not recorded: no instance could find its Slurm job id; stop it
            self._commands.cancel(slurm_id)
            raise
        self._states[slurm_id] = SlurmJob(slurm_id, "PENDING")
        self._started(run_dir, record)
        return Handle(job.job_id, job.run_attempt)

    def _refusing_state(self, exc: SlurmError) -> str | None:
        """What Slurm reports of danlu's partition after it refused an ``sbatch`` (``exc``)
        as the partition takes no job (:func:`~danlu.executors.slurm_batch.closes`), named in
        the launch's error: ``DRAIN``, ``INACTIVE``...; ``""`` when ``sinfo`` lists no such
        partition. None when the refusal is another, Slurm's default partition is used (its
        name is not known), or Slurm cannot say now."""
        if self._partition is None or not closes(exc):
            return None
        try:
            return self._commands.partition_state(self._partition)
        except SlurmError as read:
            log.warning("cannot read partition %s's state: %s", self._partition, read)
            return None

    def _unconfirmed(
        self, job: JobLaunch, run_dir: Path, record: dict[str, Any], exc: SlurmError
    ) -> Handle:
        """``sbatch`` failed as a controller that did not answer in time (``Socket timed
        out``, the commands' own timeout): a busy controller still takes a request whose
        client gave up, so the job may be in Slurm, and submitting the run again (the control
        plane's next pass) would run it twice; or it succeeded but printed no job id danlu
        can read (:class:`SbatchUnreadError`), and the job is in Slurm. The run is kept
        instead, tracked by its job name: the job Slurm lists under it, now or at a later
        poll, is the run's (:meth:`_slurm_id`); one that Slurm does not list within
        :data:`~danlu.executors.slurm_polls.START_TIMEOUT` seconds of the failure was not
        submitted, and the run ends re-queued (:meth:`_status`)."""
        log.warning("sbatch of job %s failed, tracked by its name: %s", job.job_id, exc)
        record["sbatch_failed_at"] = self._clock()
        record["sbatch_error"] = str(exc)
        save_launch(run_dir, record)
        self._started(run_dir, record)
        with contextlib.suppress(SlurmError):  # still unanswered: looked up at the polls
            self._slurm_id(run_dir, record)
        return Handle(job.job_id, job.run_attempt)

    def discard(self, job_id: str) -> None:
        """Delete the run records, this executor's log and the working directory
        (``STATE_DIR/work/JOB_ID/``, of a job launched without ``workdir``) of the finished job
        ``job_id``; a ``workdir`` the job was given is its owner's and stays."""
        super().discard(job_id)
        work = self._work_dir(job_id)
        if work.is_symlink():  # the job's doing: the link goes, not what it points to
            work.unlink(missing_ok=True)
        else:
            shutil.rmtree(work, ignore_errors=True)

    def _work_dir(self, job_id: str) -> Path:
        """The working directory of job ``job_id`` when it has no ``workdir``: on the state
        directory's filesystem, which the nodes share, apart from the run's records (which
        the next launch deletes) and kept across the job's runs. Not resolved (the job may
        have put a link in its place); ``job_id`` is checked to be a plain name."""
        return self._work / validate_job_id(job_id)

    def poll(self, handle: Handle) -> ExecStatus:
        """The run's status from Slurm (all live runs are asked in one ``squeue`` at most
        once per ``poll_interval``)."""
        run_dir, launch = self._load(handle)
        return self._status(run_dir, launch)

    # -- internals ----------------------------------------------------------------------------

    def _still_runs(self, run_dir: Path) -> str | None:
        """The Slurm jobs of the run in ``run_dir`` that still run without a readable launch
        record, and how to stop them (:func:`~danlu.executors.slurm_names.still_runs`)."""
        return slurm_names.still_runs(self._commands, run_dir)

    def _unread_gpus(self, run_dir: Path) -> HeldGpus | None:
        """The GPUs of the nodes of the run in ``run_dir``, which still runs without a
        readable launch record (:func:`~danlu.executors.slurm_names.unread_gpus`)."""
        return slurm_names.unread_gpus(self._commands, self.inventory, run_dir)

    def _signal(
        self,
        handle: Handle,
        run_dir: Path,
        launch: dict[str, Any],
        reason: StopReason,
        grace: float,
    ) -> None:
        """SIGTERM the job's steps (SIGKILL when ``grace`` <= 0; cancelled outright while
        Slurm keeps it waiting, not started or held); the SIGKILL after the grace comes from
        :func:`~danlu.executors.slurm_stops.enforce_stop` at the polls, and so does the
        SIGTERM when it cannot be sent now (the controller unreachable: the error is raised,
        and the SIGTERM sent again at the next polls until Slurm takes it; the job suspended,
        :data:`~danlu.executors.slurm_stops.SUSPENDED`, or just resumed: sent once Slurm
        runs it again, and its step surely too, :func:`~danlu.executors.slurm_stops.send_term`)."""
        slurm_id, state = self._run_state(run_dir, launch)
        if slurm_id is None:  # not in Slurm yet: cancelled or signalled by the poll finding it
            if grace > 0:
                slurm_stops.term_due(run_dir, launch)
            return
        if state is None:  # ended and forgotten by Slurm: its id may be another job's now
            return
        if slurm_waiting.waiting(state):
            self._commands.cancel(slurm_id)
        elif grace <= 0:
            self._commands.cancel(slurm_id, "KILL")
        else:
            now = self._clock()
            slurm_stops.note_suspension(run_dir, launch, state, now)
            slurm_stops.term_due(run_dir, launch)
            if state.state != slurm_stops.SUSPENDED:  # else sent at the polls (refused now)
                slurm_stops.send_term(self._commands, run_dir, launch, slurm_id, now)


def _public(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without danlu's and Slurm's own variables (those set the job's submission)."""
    return {k: v for k, v in env.items() if not k.startswith(("DANLU_", *_PRIVATE_PREFIXES))}
