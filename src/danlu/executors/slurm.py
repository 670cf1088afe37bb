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

from danlu.core.cluster import GPU_TYPES, Cluster, GpuType, Node, listed_gpu_type
from danlu.core.errors import UnknownNameError
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
    MultiNodeExecutor,
    RunState,
    StopReason,
    job_environment,
    master_port,
    node_devices,
    refreshed_cluster,
    validate_job_id,
)
from danlu.executors.errors import (
    ExecutorError,
    NodeLaunchError,
)
from danlu.executors.records import save_launch
from danlu.executors.rundirs import DEFAULT_PREEMPT_GRACE, RunDirExecutor
from danlu.executors.slurm_batch import BATCH as BATCH
from danlu.executors.slurm_batch import TASK_SCRIPT as TASK_SCRIPT
from danlu.executors.slurm_batch import (
    batch_script,
    closes,
    refused,
    sbatch_options,
    unsent,
    unsubmitted,
)
from danlu.executors.slurm_batch import slurm_pattern as slurm_pattern
from danlu.executors.slurm_exits import node_exits
from danlu.executors.slurm_names import run_name
from danlu.executors.slurm_stops import KILL_BATCH_AFTER as KILL_BATCH_AFTER
from danlu.executors.slurmctl import (
    SbatchUnreadError,
    SlurmCommands,
    SlurmError,
    SlurmJob,
    SlurmNode,
    SlurmUnavailableError,
    node_closed,
)

log = logging.getLogger(__name__)

START_TIMEOUT = 30.0
"""Seconds a launch record may stand without a Slurm job id before the run counts as lost
(another instance may be submitting it)."""
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


class SlurmExecutor(RunDirExecutor, MultiNodeExecutor, GpuSharingExecutor):
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
    :mod:`~danlu.executors.slurm_waiting`). Raises :class:`ExecutorError` for a log
    directory Slurm cannot name (a backslash in it).
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
    ) -> None:
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

    def inventory(self) -> Cluster:
        """The partition's nodes and their GPUs (``Gres=gpu:...``), as Slurm listed them
        first or at the last :meth:`refresh_inventory`."""
        if self._cluster is None:
            self._cluster = self._read_inventory()
        return self._cluster

    def refresh_inventory(self) -> Cluster:
        """The partition's nodes read from Slurm again: nodes added to or taken out of the
        partition (``scontrol update PartitionName=...``), or given other GPUs. A node Slurm
        reports down or drained stays (:meth:`closed_nodes` names it, and a launch there
        fails as the node's fault); a partition listed with no nodes is refused, keeping the
        inventory as it was (an :class:`ExecutorError`)."""
        self._cluster = self._read_inventory()
        return self._cluster

    def _read_inventory(self) -> Cluster:
        nodes = partition_nodes(self._commands, self._partition)
        cluster = refreshed_cluster(self._cluster, [self._node(n) for n in nodes], "slurm")
        partition = self._commands.partition_state(self._partition) if self._partition else ""
        self._nodes, self._partition_state = nodes, partition
        # what the launches' node check reads, fresh now (see _check_nodes)
        self._node_states = {n.name: n.state for n in nodes}
        self._node_states_at = self._clock()
        return cluster

    def closed_nodes(self) -> dict[str, str]:
        """The partition's nodes Slurm reports down, drained, failing or not responding (as
        read at the last inventory reading; :func:`~danlu.executors.slurmctl.node_closed`),
        with Slurm's state and reason; and all of them while Slurm reports the partition
        itself other than ``UP`` (``scontrol update PartitionName=gpu State=DOWN``, as an
        admin does before a maintenance: Slurm starts none of its jobs, or with ``DRAIN``
        and ``INACTIVE`` takes none), where a run placed would wait until the pending limit
        failed it, or be refused. A node Slurm's power saving powered off
        (``IDLE+POWERED_DOWN``) is open: the controller boots it for a job given to it."""
        closed: dict[str, str] = {}
        shut = self._partition_state not in ("", "UP")
        held = (
            f"Slurm reports partition {self._partition} {self._partition_state}: no run "
            f"starts there until scontrol update PartitionName={self._partition} State=UP"
        )
        for node in self._nodes or ():
            if node_closed(node.state):
                why = f": {node.reason}" if node.reason else ""
                closed[node.name] = f"Slurm reports it {node.state}{why}"
                if shut:
                    closed[node.name] += f"; {held}"
            elif shut:
                closed[node.name] = held
        return closed

    def _node(self, node: SlurmNode) -> Node:
        kind = self._gpu_type
        if node.gpu_type is not None:
            with contextlib.suppress(UnknownNameError):
                kind = listed_gpu_type(node.gpu_type, self._gpu_type)
        return Node(node.name, node.gpus, kind, cpu_milli=node.cpus * 1000, memory=node.memory)

    def max_nodes_per_job(self) -> int:
        """Every node of the partition."""
        return len(self.inventory().nodes)

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
        }
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
        :data:`START_TIMEOUT` seconds of the failure was not submitted, and the run ends
        re-queued (:meth:`_status`)."""
        log.warning("sbatch of job %s failed, tracked by its name: %s", job.job_id, exc)
        record["sbatch_failed_at"] = self._clock()
        record["sbatch_error"] = str(exc)
        save_launch(run_dir, record)
        self._started(run_dir, record)
        with contextlib.suppress(SlurmError):  # still unanswered: looked up at the polls
            self._slurm_id(run_dir, record)
        return Handle(job.job_id, job.run_attempt)

    def _check_nodes(self, names: Sequence[str]) -> None:
        """Raise :class:`NodeLaunchError` when Slurm reports one of ``names`` unusable, or
        no longer in the partition (taken out since the inventory was last read)."""
        if not names:
            return
        now = self._clock()
        if now - self._node_states_at >= self._poll_interval:
            try:
                listed = self._commands.nodes(self._partition)
                self._node_states = {n.name: n.state for n in listed}
            except SlurmError as exc:
                raise SlurmUnavailableError(f"cannot read the nodes' states: {exc}") from exc
            self._node_states_at = now
        for name in names:
            state = self._node_states.get(name)
            if state is None:
                where = f"partition {self._partition}" if self._partition else "Slurm's nodes"
                raise NodeLaunchError(f"node {name} is no longer in {where}", nodes=(name,))
            if node_closed(state):
                raise NodeLaunchError(f"Slurm reports node {name} as {state}", nodes=(name,))

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

    def _slurm_id(self, run_dir: Path, launch: dict[str, Any]) -> int | None:
        """The run's Slurm job id; looked up by name when the launch record lacks it (a
        control plane stopped between ``sbatch`` and writing the id, an ``sbatch`` that timed
        out: :meth:`_unconfirmed`). Of several jobs of that name the first that Slurm may
        still run is the run's, and the others are cancelled (the run is one Slurm job)."""
        if "slurm_id" in launch:
            return int(launch["slurm_id"])
        found = sorted(self._commands.find(run_name(launch["job_id"], launch["attempt"])))
        if not found:
            return None
        kept = found[-1]
        if len(found) > 1:
            live = [i for i, job in sorted(self._commands.jobs(found).items()) if job.running]
            kept = live[0] if live else kept
            for extra in live[1:]:
                log.warning("cancelling Slurm job %s, a duplicate of job %s", extra, kept)
                self._commands.cancel(extra)
        launch["slurm_id"] = kept
        save_launch(run_dir, launch)
        return kept

    def _run_state(
        self, run_dir: Path, launch: dict[str, Any]
    ) -> tuple[int | None, SlurmJob | None]:
        """The run's Slurm job id (:meth:`_slurm_id`) and Slurm's state of it, checked to be
        the job of the run's name (``danlu.JOB_ID.ATTEMPT``) and of danlu's account
        (:meth:`SlurmCommands.owns`): an id in the launch record that Slurm lists under
        another name or user is no longer (a job Slurm forgot leaves its id to later jobs)
        or never was (the job rewrote its record) this run's, and polls, stops and clean-up
        would act on that other job. The run's job is then looked up by
        its name (and its id recorded); none found, Slurm has forgotten it (state None,
        the id kept for the messages; nothing is signalled by it)."""
        slurm_id = self._slurm_id(run_dir, launch)
        if slurm_id is None:
            return None, None
        state = self._slurm_state(slurm_id)
        name = run_name(launch["job_id"], launch["attempt"])
        if state is None or self._of_run(state, name):
            return slurm_id, state
        log.warning(
            "Slurm job %s of the launch record of job %s is named %r, of user %s, not %s of "
            "user %s: not its run's; looking its run up by name",
            slurm_id,
            launch["job_id"],
            state.name,
            state.user or state.uid,
            name,
            self._commands.user,
        )
        del launch["slurm_id"]
        found = self._slurm_id(run_dir, launch)
        if found is None:
            launch["slurm_id"] = slurm_id
            return slurm_id, None
        return found, self._slurm_state(found)

    def _of_run(self, job: SlurmJob, name: str) -> bool:
        """Whether Slurm's ``job`` is the job of the run named ``name``
        (``danlu.JOB_ID.ATTEMPT``): of that name (or of none read) and of danlu's account
        (:meth:`SlurmCommands.owns`)."""
        return job.name in (None, name) and self._commands.owns(job)

    def _slurm_state(self, slurm_id: int) -> SlurmJob | None:
        """Slurm's state of ``slurm_id``; every live run is asked in one ``squeue`` call,
        at most once per ``poll_interval``."""
        now = self._clock()
        if now - self._states_at >= self._poll_interval or slurm_id not in self._states:
            ids = {slurm_id, *(s.job_id for s in self._states.values() if s.running)}
            self._states = self._commands.jobs(ids)
            self._states_at = now
        return self._states.get(slurm_id)

    def _status(self, run_dir: Path, launch: dict[str, Any]) -> ExecStatus:
        stop = records.read_stop(run_dir)
        reason = StopReason(stop["reason"]) if "reason" in stop else None
        recorded = self._recorded(run_dir, reason)
        if recorded is not None:
            return recorded
        slurm_id, state = self._run_state(run_dir, launch)
        if slurm_id is None:
            since = launch.get("sbatch_failed_at", launch["launched_at"])
            if self._clock() - since < START_TIMEOUT:
                return ExecStatus(RunState.RUNNING, stop_reason=reason)
            return self._record(run_dir, unsubmitted(launch, reason), reason)
        if state is not None and state.running:
            pending = slurm_waiting.waiting(state)  # not running: PENDING, or held
            started = slurm_exits.note_start(launch, state)  # before note_wait ends the wait
            if slurm_waiting.note_wait(launch, state, self._clock()) or started:
                save_launch(run_dir, launch)  # else the wait's count restarts at each poll
            slurm_stops.note_suspension(run_dir, launch, state, self._clock())
            if reason is None and pending:
                return self._pending(run_dir, launch, slurm_id, state)
            if reason is None and state.state == "RUNNING" and "gang_stopped_at" not in launch:
                grace = self._stop_grace(launch, self._preempt_grace)
                slurm_stops.gang_stop(
                    self._commands, run_dir, launch, slurm_id, grace, self._clock()
                )
            refused = slurm_stops.enforce_stop(
                self._commands,
                run_dir,
                launch,
                slurm_id,
                state,
                stop or slurm_stops.gang_stop_request(launch),
                self._clock(),
            )
            return ExecStatus(
                RunState.RUNNING,
                stop_reason=reason,
                started_at=None if pending else state.started_at or launch.get("launched_at"),
                message=_state_message(slurm_id, state) + refused,
            )
        full = self._commands.job(slurm_id) if state is not None else None
        name = run_name(launch["job_id"], launch["attempt"])
        if full is not None and not self._of_run(full, name):
            # forgotten since squeue listed it, its id another job's: not the run's result
            who = f"{full.name!r} of user {full.user or full.uid}"
            log.warning("Slurm job %s is %s, not run %s: forgotten by Slurm", slurm_id, who, name)
            full = None
        result = slurm_exits.run_result(
            run_dir,
            launch,
            slurm_id,
            full,
            reason,
            now=self._clock(),
            log_tail=lambda: self._log_tail(run_dir, launch),
            log_dir=self._log_dir,
        )
        return self._record(run_dir, result, reason)

    def _pending(
        self, run_dir: Path, launch: dict[str, Any], slurm_id: int, state: SlurmJob
    ) -> ExecStatus:
        """The status of a run Slurm keeps waiting (``PENDING``, or held after a requeue),
        no stop asked for: running, with no start time and Slurm's state and reason in its
        message. Once it has waited ``pending_limit`` seconds (since its submission, since it
        was first seen held, or ``PENDING`` again after it ran:
        :mod:`~danlu.executors.slurm_waiting`) it is cancelled (again at each poll until Slurm
        reports it ended; an unreachable controller raises, a cancel Slurm refuses is noted
        in the message, and either is asked again at the next poll), and its
        result is a failed launch (:func:`~danlu.executors.slurm_exits.run_result`); but one
        whose nodes recorded exits, never seen running, ran and was requeued: its wait counts
        from now."""
        message = _state_message(slurm_id, state)
        now, limit = self._clock(), self._pending_limit
        if limit is None or not slurm_waiting.over_limit(launch, limit, now):
            return ExecStatus(RunState.RUNNING, message=message)
        ran = "gave_up_at" not in launch and bool(node_exits(run_dir, launch))
        if ran and slurm_waiting.note_unseen_run(launch, state, now):
            save_launch(run_dir, launch)  # else given up at the next poll
            return ExecStatus(RunState.RUNNING, message=message)
        if slurm_waiting.give_up(launch, state, limit, now):
            save_launch(run_dir, launch)  # its result then names no reason
        message += slurm_waiting.given_up_note(launch, state, limit)
        try:
            self._commands.cancel(slurm_id)
        except SlurmUnavailableError:
            raise
        except SlurmError as exc:  # refused: raised, every poll of the run failed
            message += slurm_stops.refused(slurm_id, exc)
        return ExecStatus(RunState.RUNNING, message=message)

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


def partition_nodes(commands: SlurmCommands, partition: str | None) -> list[SlurmNode]:
    """The nodes of ``partition`` (None: every node) as Slurm lists them, with no executor
    made (``danlu server`` asks before it makes its home: :func:`danlu.server.main.prepare`).
    Raises :class:`SlurmUnavailableError` when Slurm's controller cannot be reached, and
    :class:`ExecutorError` when Slurm lists no nodes there or no such partition."""
    nodes = commands.nodes(partition)
    if not nodes:
        raise ExecutorError("Slurm lists no nodes; check SLURM_CONF and the partition")
    return nodes


def _state_message(slurm_id: int, state: SlurmJob) -> str:
    """``Slurm job N STATE``, with Slurm's reason when it gives one (why it is pending); a
    state danlu does not know (:attr:`SlurmJob.known`) is named as such, taken as running."""
    reason = slurm_waiting.given_reason(state.reason)
    what = state.state if state.known else f"in unknown state {state.state!r}, taken as running"
    return f"Slurm job {slurm_id} {what}" + (f" ({reason})" if reason else "")


def _public(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without danlu's and Slurm's own variables (those set the job's submission)."""
    return {k: v for k, v in env.items() if not k.startswith(("DANLU_", *_PRIVATE_PREFIXES))}
