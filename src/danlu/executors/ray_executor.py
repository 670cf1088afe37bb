"""The Ray executor: each run of a job is one detached Ray actor per node it was placed on.

danlu stays the scheduler: it places jobs on the GPUs of the Ray cluster's nodes and starts a
:class:`~danlu.executors.ray_actor.NodeRun` actor on each node of a run (pinned there with a
hard node affinity, asking Ray for no CPU or GPU), which starts the job's command with
``CUDA_VISIBLE_DEVICES`` set to that node's GPUs of the allocation and torchrun's ``PET_*``
settings for the run's nodes. The cluster should be danlu's: Ray tasks that others place on
its GPUs are not seen by danlu.

- **Nodes.** Every live node with GPUs (Ray's ``GPU`` resource) is a danlu node, named by its
  ``danlu.node`` label (``ray start --labels='{"danlu.node": "gpu07"}'``) or else by Ray's
  ``NodeName`` (its address). Ray's ``accelerator_type:...`` resources name the GPU type
  (:mod:`~danlu.executors.ray_nodes`).
  Two nodes of one name leave the inventory as it was; a launch onto that name is a
  :class:`NodeLaunchError`, launches onto other nodes go on.
- **Logs.** The actors keep their node's output and hand it out in whole lines; each poll
  appends what is new, node after node, to ``{log_dir}/JOB_ID.log`` on the control plane's
  host (a node's last line, which its command may leave without a newline, gets one; a line
  longer than an actor hands out at once stays whole: :mod:`~danlu.executors.ray_output`), so
  a job's log outlives its actors and is appended across runs as the local executor's is.
- **Stopping.** SIGTERM to the command's process group on every node, SIGKILL after the grace
  (the actor's own timer). When one node's command fails, the others are stopped once, with
  the cancel grace (a gang); when one checkpoints (exit 75) with no stop danlu asked for
  under way (its host SIGTERMed that node alone), once, as a preemption, with the job's
  preemption grace, so that they checkpoint too. None while a stop danlu asked for is under
  way (its grace stands; every node is checkpointing). These are made at the polls
  (:mod:`~danlu.executors.ray_polls`): while the control plane is down the other nodes run on.
  A stop Ray could not deliver to an actor is sent again at the next poll, with what is left
  of its grace.
- **Exit.** Once every node's command has exited, the run's status
  (:func:`~danlu.executors.base.gang_exit`: the first failure in time, by when each node's
  command exited, that is not a checkpoint, else 75 or 0) is classified as
  :func:`~danlu.executors.base.classify_exit` does, and the actors are killed; a kill that
  failed is made again at the run's later polls and every :data:`KILL_RETRY` seconds at other
  runs' polls, until it is recorded.
  An actor that died (Ray's ``ActorDiedError``, or one Ray no longer finds: its node lost,
  its worker killed) or that Ray cannot place (``ActorUnschedulableError``: its node left
  while the launch was made) makes the run a preemption: the job is re-queued to resume from
  its checkpoint. One whose creation failed on its node (``actor_init_failed``: danlu not
  importable there) makes the run a failure naming the node and Ray's cause
  (:func:`~danlu.executors.ray_results.unstarted_result`): relaunched onto that node, it
  fails the same way, so its status names the node (``start_failed_on``), which the control
  plane counts as a launch that failed there for the node's reasons, re-queuing the job with
  no restart counted. So is one whose actors have not answered once within
  :data:`START_TIMEOUT` of the launch on nodes Ray's GCS lists alive
  (:func:`~danlu.executors.ray_results.unanswered_result`); on a node that left, the run is
  lost with it. One whose worker Ray's memory monitor killed (Ray's ``OutOfMemoryError``: its
  node ran low on host memory) makes the run the job's out-of-memory, a restart counted, not
  a lost node (:func:`~danlu.executors.ray_results.memory_killed_result`). One that cannot be
  reached for now (``ActorUnavailableError``) or does not answer in time is asked again at
  the next poll; other errors of Ray's are an :class:`ExecutorUnavailableError`.
- **The GCS gone.** The control plane joins the cluster as a Ray driver, which Ray ends once
  it has not reached the cluster's GCS for ``gcs_rpc_server_reconnect_timeout_s``: the
  executor joins with that set to :data:`GCS_RECONNECT_TIMEOUT`. A call answered by the GCS
  (the nodes, an actor by name, a kill, a new actor) that takes over :data:`GCS_TIMEOUT` is
  an :class:`ExecutorUnavailableError`, as is every such call while it has not returned
  (:meth:`RayExecutor._gcs`); the runs' actors are asked directly, GCS or not.
- **One plane a cluster.** Built for a control plane (``plane_home``), the executor claims
  the cluster for it as it joins: a plane of another home that holds the claim alive refuses
  the start (:class:`~danlu.executors.ray_claim.ClusterClaimedError`), the same home's is
  taken over; the claim goes with the plane's process, or at :meth:`RayExecutor.close`
  (:mod:`~danlu.executors.ray_claim`). A plane's start-up joins the cluster and looks at the
  claim before it makes its home (:func:`check_unclaimed`), so that one refused for it leaves
  nothing behind.
- **State.** ``{state_dir}/runs/JOB_ID/`` holds the launch record (actor names), a stop
  request, the result and whether the actors were killed, so a restarted control plane finds
  its runs' actors by name.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from danlu.core.cluster import GPU_TYPES, Cluster, GpuType
from danlu.executors import records, supervise
from danlu.executors.base import (
    ExecStatus,
    GpuSharingExecutor,
    Handle,
    HeldGpus,
    JobLaunch,
    MultiNodeExecutor,
    job_environment,
    master_port,
    node_devices,
    refreshed_cluster,
)
from danlu.executors.errors import (
    ExecutorError,
    ExecutorUnavailableError,
    LaunchError,
    NodeLaunchError,
)
from danlu.executors.ray_actor import VISIBLE_DEVICES, NodeRun
from danlu.executors.ray_claim import ClusterClaim, claim_record, probe_record
from danlu.executors.ray_nodes import (
    JOIN_TIMEOUT,
    NODE_LABEL,
    call_in_thread,
    check_head_reachable,
    node_name,
    ray_node,
    shared_name,
)
from danlu.executors.ray_polls import START_TIMEOUT as START_TIMEOUT  # re-exported: it lived here
from danlu.executors.ray_polls import RayPolls
from danlu.executors.ray_records import (
    LAUNCH_FIELDS,
    actor_id,
    job_actors,
    own_actors,
    placed_gpus,
    run_actors,
)
from danlu.executors.ray_results import START_FAILED_ON
from danlu.executors.ray_stops import CALL_TIMEOUT
from danlu.executors.ray_stops import KILL_RETRY as KILL_RETRY  # re-exported: it lived here
from danlu.executors.ray_stops import KILLED as KILLED  # re-exported: it lived here
from danlu.executors.rundirs import (
    DEFAULT_PREEMPT_GRACE,
    RESULT,
    RESULT_FIELDS,
    check_log_max_bytes,
)

log = logging.getLogger(__name__)

_PRIVATE_PREFIXES = ("RAY_",)
"""Ray's own variables: left out of a job's environment, the job's own ``env`` included."""
GCS_TIMEOUT = 10.0
"""Seconds a call that Ray's GCS answers (the nodes, an actor by name, a kill, a new actor)
may take before it is an :class:`ExecutorUnavailableError`: with the GCS unreachable, Ray
blocks such calls until it is back."""
GCS_RECONNECT_TIMEOUT = 1_000_000
"""Seconds (about 11 days) the control plane, as a Ray driver, waits for an unreachable GCS
before Ray ends its process (Ray's ``gcs_rpc_server_reconnect_timeout_s``, 60 by default),
set when the executor joins the cluster. Ray multiplies it by 1000 in 32 bits in places: keep
it under 4,294,967."""
_RECONNECT_VARIABLE = "RAY_gcs_rpc_server_reconnect_timeout_s"
NAMESPACE = "danlu"
"""The Ray namespace of the runs' actors unless the executor is given another."""

_T = TypeVar("_T")


RAY_RESULT_FIELDS: Mapping[str, records.Check] = {
    **RESULT_FIELDS,
    START_FAILED_ON: lambda v: isinstance(v, list),  # its names checked where read
}
"""The fields of a Ray run's recorded result: the others' and the nodes it could not start
on (:func:`~danlu.executors.ray_results.unstarted_result`)."""


class RayExecutor(RayPolls, MultiNodeExecutor, GpuSharingExecutor):
    """Runs each job as detached Ray actors on the nodes danlu placed it on.

    Connects to the Ray cluster at ``address`` (``"auto"``: the one this host belongs to)
    unless this process is connected already; actors live in ``namespace``. ``gpu_type`` is
    the type of GPUs whose node names none danlu knows. ``state_dir`` and ``log_dir`` are on
    the control plane's host. ``preempt_grace`` is the grace of a job whose spec has none
    when the executor stops its nodes itself, as a preemption, because one of them
    checkpointed alone (:meth:`_gang_stop`).

    ``plane_home``, the home of the control plane the executor serves (``danlu server``),
    claims the cluster for that plane (:mod:`~danlu.executors.ray_claim`; its id kept in
    ``state_dir``): the build raises
    :class:`~danlu.executors.ray_claim.ClusterClaimedError` while a live plane of another
    home holds the cluster. Without it nothing is claimed (an executor of a program's own).

    ``log_max_bytes`` caps each job's log (0: no cap; a :class:`ConfigError` for one that is
    no whole number of bytes), kept by the poll that appends the actors' output to it
    (:func:`~danlu.executors.ray_output.append_run_output`).
    """

    launch_fields = LAUNCH_FIELDS
    result_fields = RAY_RESULT_FIELDS
    launch_required = (*records.LAUNCH_REQUIRED, "actors")
    start_seen_at_poll = True  # an actor may fail to start on its node after the submit

    def __init__(
        self,
        state_dir: str | Path,
        *,
        address: str | None = "auto",
        namespace: str = NAMESPACE,
        gpu_type: GpuType = GPU_TYPES["generic"],
        log_dir: str | Path | None = None,
        base_env: Mapping[str, str] | None = None,
        api_url: str | None = None,
        cancel_grace: float = 5.0,
        preempt_grace: float = DEFAULT_PREEMPT_GRACE,
        max_jobs_per_gpu: int = 16,
        clock: Callable[[], float] = time.time,
        plane_home: str | Path | None = None,
        log_max_bytes: int = 0,
    ) -> None:
        self._log_max_bytes = check_log_max_bytes(log_max_bytes)
        import ray

        self._ray: Any = ray
        errors: Any = ray.exceptions
        self._ray_error: type[Exception] = errors.RayError
        unschedulable = getattr(errors, "ActorUnschedulableError", None)
        out_of_memory = getattr(errors, "OutOfMemoryError", None)
        self._out_of_memory: tuple[type[Exception], ...] = (
            (out_of_memory,) if out_of_memory is not None else ()
        )
        """Ray's error of every call to an actor whose worker Ray's memory monitor killed (its
        node low on host memory): no ``RayActorError``, but the actor is dead."""
        self._gone: tuple[type[Exception], ...] = (
            errors.RayActorError,
            *((unschedulable,) if unschedulable is not None else ()),
            *self._out_of_memory,
        )
        """A call's errors that mean the actor is gone for good: dead (its node lost, its
        worker killed, by Ray's memory monitor too), or never to be placed (its node left
        before Ray placed it)."""
        unavailable = getattr(errors, "ActorUnavailableError", None)  # Ray >= 2.22
        self._busy: tuple[type[Exception], ...] = (
            errors.GetTimeoutError,
            *((unavailable,) if unavailable is not None else ()),
        )
        """A call's errors that mean "ask again later": no answer in time, or the actor
        cannot be reached for now (a subclass of ``RayActorError``, which else means dead)."""
        if not ray.is_initialized():
            _join(ray, address, namespace)
        self._namespace = namespace
        self._actor = ray.remote(NodeRunOnNode)
        self._init_runs(state_dir, log_dir, cancel_grace, clock)
        self._preempt_grace = preempt_grace
        self._base_env = public_env(base_env or {})
        self._api_url = api_url
        self._gpu_type = gpu_type
        self._max_jobs_per_gpu = max_jobs_per_gpu
        self._cluster: Cluster | None = None
        self._handles: dict[str, Any] = {}
        self._unkilled: dict[tuple[str, ...], tuple[Path, dict[str, Any], float]] = {}
        """Ended runs whose actors could not all be killed, by their actors' names: their run
        directory, launch record, and when to try again (:meth:`_retry_kills`)."""
        self._shared_names: list[str] = []
        """The names two Ray nodes share, as last warned about."""
        self._gcs_lock = threading.Lock()
        self._gcs_waiting: tuple[threading.Thread, str, float] | None = None
        """A call to the GCS that has not returned in time: its thread, what it was, since
        when (:meth:`_gcs`)."""
        self._claim: ClusterClaim | None = None
        """The plane's claim on the cluster (None: the executor claims none)."""
        if plane_home is not None:
            record = claim_record(plane_home, Path(state_dir), api_url, time.time())
            claim = ClusterClaim(ray, record, self._gcs, address=address)
            claim.take()  # refused: another plane's
            self._claim = claim

    # -- capabilities -------------------------------------------------------------------------

    def inventory(self) -> Cluster:
        """The live nodes with GPUs, as Ray listed them first or at the last
        :meth:`refresh_inventory`."""
        if self._cluster is None:
            self._cluster = self._read_inventory()
        return self._cluster

    def refresh_inventory(self) -> Cluster:
        """The live nodes with GPUs read from Ray again: nodes that joined the cluster
        (``ray start``, an autoscaler) come in, nodes that died or left go. A cluster with
        no live node with GPUs is refused, keeping the inventory as it was (an
        :class:`ExecutorError`); a Ray that cannot be asked is an
        :class:`ExecutorUnavailableError`. The plane's claim on the cluster is checked too
        (:meth:`~danlu.executors.ray_claim.ClusterClaim.check`)."""
        self._cluster = self._read_inventory()
        if self._claim is not None:
            self._claim.check()  # its actor killed under the plane: claimed again
        return self._cluster

    def close(self) -> None:
        """Give the plane's claim on the cluster back, so that another plane may start at
        once (:meth:`~danlu.executors.ray_claim.ClusterClaim.release`); the runs go on."""
        if self._claim is not None:
            self._claim.release()
        super().close()

    def _read_inventory(self) -> Cluster:
        nodes = self._nodes()
        if not nodes:
            raise ExecutorError("the Ray cluster has no live node with GPUs")
        return refreshed_cluster(
            self._cluster, [ray_node(n, self._gpu_type) for n in nodes.values()], "ray"
        )

    def _listed(self) -> dict[str, list[dict[str, Any]]]:
        """Ray's live nodes with GPUs by danlu name (several where nodes share a name), in
        Ray's order. Raises :class:`ExecutorUnavailableError` when Ray cannot be asked."""
        try:
            listed = self._gcs("read Ray's nodes", self._ray.nodes)
        except ExecutorUnavailableError:
            raise
        except Exception as exc:  # the GCS gone: ray.nodes() raises what gRPC raised
            raise ExecutorUnavailableError(f"cannot read Ray's nodes: {exc}") from exc
        found: dict[str, list[dict[str, Any]]] = {}
        for info in listed:
            if info.get("Alive") and float(info.get("Resources", {}).get("GPU", 0)) > 0:
                found.setdefault(node_name(info), []).append(info)
        return found

    def _nodes(self) -> dict[str, dict[str, Any]]:
        """Ray's live nodes with GPUs by danlu name, in Ray's order: an
        :class:`ExecutorError` when two share a name, an :class:`ExecutorUnavailableError`
        when Ray cannot be asked."""
        found = self._listed()
        for name, infos in found.items():
            if len(infos) > 1:
                raise ExecutorError(shared_name(name))
        return {name: infos[0] for name, infos in found.items()}

    def _launch_nodes(self, names: list[str]) -> dict[str, dict[str, Any]]:
        """Ray's live nodes with GPUs by danlu name, for a launch onto the nodes ``names``: a
        name two nodes share is a :class:`NodeLaunchError` when the launch is onto it, else
        only warned about (those nodes are left out): it makes no other launch wait."""
        found = self._listed()
        shared = sorted(name for name, infos in found.items() if len(infos) > 1)
        ours = [name for name in shared if name in names]
        if ours:
            raise NodeLaunchError(shared_name(ours[0]), nodes=ours)
        if shared and shared != self._shared_names:
            log.warning(
                "Ray nodes share the names %s: no launch is made onto them; give each a "
                "%s label of its own",
                ", ".join(shared),
                NODE_LABEL,
            )
        self._shared_names = shared
        return {name: infos[0] for name, infos in found.items() if len(infos) == 1}

    def max_nodes_per_job(self) -> int:
        """Every node of the cluster."""
        return len(self.inventory().nodes)

    def max_jobs_per_gpu(self) -> int:
        """The most jobs that may share one GPU (a constructor setting)."""
        return self._max_jobs_per_gpu

    # -- environment --------------------------------------------------------------------------

    def node_env(
        self, job: JobLaunch, rank: int, names: list[str], devices: str, master: str
    ) -> dict[str, str]:
        """The environment of the command on the ``rank``-th node of the run: ``base_env``
        (without inherited ``DANLU_*``), the job's ``env`` (without Ray's ``RAY_*``; its
        ``DANLU_*`` ones kept, a sweep trial's ``DANLU_HPARAMS`` among them), then the danlu
        job environment and torchrun's settings, which win."""
        env = job_environment(self._base_env, job, self._api_url, _PRIVATE_PREFIXES)
        env["CUDA_VISIBLE_DEVICES"] = devices
        env["PET_NNODES"] = str(max(1, len(names)))
        env["PET_NODE_RANK"] = str(rank)
        env["PET_NPROC_PER_NODE"] = str(max(1, len([d for d in devices.split(",") if d])))
        env["PET_MASTER_ADDR"] = master
        env["PET_MASTER_PORT"] = str(master_port(job))
        return env

    # -- lifecycle ----------------------------------------------------------------------------

    def submit(self, job: JobLaunch) -> Handle:
        """Start ``job``'s actors on its allocation's nodes. Raises
        :class:`JobAlreadyRunningError` while an earlier run still runs,
        :class:`GpusBusyError` while another job's run holds one of its GPUs,
        :class:`NodeLaunchError` when one of its nodes has left the Ray cluster or shares its
        name with another Ray node, and :class:`ExecutorUnavailableError` when Ray cannot be
        asked."""
        cluster = self.inventory()
        run_dir = self._clear_for(job, cluster)
        names = [cluster.nodes[i].name for i in job.nodes]
        alive = self._launch_nodes(names)
        for name in names:
            if name not in alive:
                raise NodeLaunchError(
                    f"node {name} is not a live node of the Ray cluster", nodes=(name,)
                )
        try:
            return self._start(job, run_dir, names, alive)
        except OSError as exc:  # (the run directory, if this launch made it, is removed)
            raise NodeLaunchError(
                f"cannot write the run files of job {job.job_id}: {exc}", nodes=()
            ) from exc

    def _start(
        self, job: JobLaunch, run_dir: Path, names: list[str], alive: dict[str, dict[str, Any]]
    ) -> Handle:
        actors = run_actors(job.job_id, job.run_attempt, len(names) or 1)
        stale = self._unkilled.get(tuple(actors))
        if stale is not None:  # of a launch of this run that failed: Ray's GCS silent
            if not self._kill_actors(stale[1]):
                raise ExecutorUnavailableError(
                    f"cannot kill the actors of job {job.job_id}'s failed launch (tried again "
                    "at the next launch); is the Ray head up?"
                )
            self._unkilled.pop(tuple(actors), None)
        log_path, offset = self._open_log(self._log_dir, job.job_id)
        with self._new_run_dir(run_dir, job.job_id):
            record = self._launch_record(job, log_path, offset)
            record.update(nodes=names, actors=actors)
            if self._log_max_bytes:
                record["log_max_bytes"] = self._log_max_bytes
            return self._start_actors(job, run_dir, alive, record)

    def _start_actors(
        self,
        job: JobLaunch,
        run_dir: Path,
        alive: dict[str, dict[str, Any]],
        record: dict[str, Any],
    ) -> Handle:
        """Write the launch ``record`` of ``job``'s run into ``run_dir``, made for it, and
        start its actors (``record["actors"]``) on its nodes (``record["nodes"]``, Ray's
        ``alive`` nodes by name)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        names: list[str] = record["nodes"]
        actors: list[str] = record["actors"]
        devices = node_devices(job, self.inventory())
        # a run without GPUs is one process anywhere in the cluster: its torchrun is alone
        first = alive[names[0]] if names else {}
        master = str(first.get("NodeManagerAddress") or "127.0.0.1")
        supervise.write_json(run_dir / supervise.LAUNCH, record)
        for rank, actor_name in enumerate(actors):
            options: dict[str, Any] = {
                "name": actor_name,
                "namespace": self._namespace,
                "lifetime": "detached",
                "num_cpus": 0,
                "max_restarts": 0,
                "max_concurrency": 4,
            }
            if names:
                node_id = alive[names[rank]]["NodeID"]
                options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id, soft=False)
            visible = ",".join(devices.get(names[rank], [])) if names else ""
            env = self.node_env(job, rank, names, visible, master)
            try:
                start = self._actor.options(**options).remote
                handle = self._gcs(
                    f"start Ray actor {actor_name}",
                    functools.partial(
                        start, job.command, env, job.workdir, node=names[rank] if names else None
                    ),
                )
            except Exception as exc:  # Ray refused the actor (a name taken, the cluster gone)
                self._kill_ended(run_dir, record, mark=False)  # else at a later poll
                shutil.rmtree(run_dir, ignore_errors=True)
                if isinstance(exc, ExecutorUnavailableError):  # the GCS silent: launched later,
                    raise  # once the actors Ray may make meanwhile are killed (above)
                raise LaunchError(f"Ray could not start job {job.job_id}: {exc}") from exc
            self._handles[actor_name] = handle
        ids = [actor_id(self._handles[name]) for name in actors]
        if all(ids):  # Ray's record of an actor dead while the plane was down is read by id
            record["actor_ids"] = ids
            records.save_launch(run_dir, record)
        self._started(run_dir, record)
        return Handle(job.job_id, job.run_attempt)

    def poll(self, handle: Handle) -> ExecStatus:
        """The run's status from its actors; appends their new output to the job's log.
        Raises :class:`ExecutorUnavailableError` when Ray cannot be asked."""
        run_dir, launch = self._load(handle)
        status = self._status(run_dir, launch)
        self._retry_kills()
        return status

    # -- internals ----------------------------------------------------------------------------

    def _read_launch(self, run_dir: Path) -> dict[str, Any] | None:
        """The run's launch record, as :class:`RunDirExecutor` reads it, naming only the
        run's own actors (:func:`~danlu.executors.ray_records.own_actors`)."""
        launch = super()._read_launch(run_dir)
        return None if launch is None else own_actors(launch)

    def _dropped(self, run_dir: Path, launch: dict[str, Any] | None) -> None:
        if launch is not None:
            self._kill_ended(run_dir, launch)

    def _named_actors(self, run_dir: Path) -> list[str]:
        """The live actors of any run of the job of ``run_dir``, found by their names
        (:func:`job_actors`). Raises :class:`ExecutorUnavailableError` when Ray cannot be
        asked."""
        listing = functools.partial(self._ray.util.list_named_actors, all_namespaces=True)
        try:
            listed = self._gcs("list Ray's actors", listing)
        except ExecutorUnavailableError:
            raise
        except Exception as exc:  # the GCS gone: what gRPC raised, as for ray.nodes()
            raise ExecutorUnavailableError(
                f"cannot list Ray's actors (does job {run_dir.name} still run?): {exc}"
            ) from exc
        return job_actors(listed, run_dir.name, self._namespace)

    def _still_runs(self, run_dir: Path) -> str | None:
        """The live actors of a run of the job of ``run_dir``, whose launch record (naming
        them) is missing or damaged (:meth:`_named_actors`). Raises
        :class:`ExecutorUnavailableError` when Ray cannot be asked (nothing is deleted)."""
        actors = self._named_actors(run_dir)
        if not actors:
            return None
        named = ", ".join(actors)
        return (
            f"its Ray actors {named} are alive; stop them (ray.kill, namespace {self._namespace})"
        )

    def _unread_gpus(self, run_dir: Path) -> HeldGpus | None:
        """The GPUs of the live actors of the run in ``run_dir`` (:meth:`_named_actors`),
        running without a readable launch record, as each tells where the control plane
        placed it (:meth:`NodeRun.placement`, :func:`placed_gpus`). None (every GPU held)
        when one does not answer within :data:`CALL_TIMEOUT`, Ray cannot be asked, or one
        is of a danlu whose actors have no such method."""
        try:
            with self._asking(f"ask job {run_dir.name}'s actors where they run"):
                placements = []
                for name in self._named_actors(run_dir):
                    actor = self._actor_handle(name)
                    if actor is None:
                        continue  # gone since
                    try:
                        ref = actor.placement.remote()
                        placements.append(self._ray.get(ref, timeout=CALL_TIMEOUT))
                    except self._gone:
                        continue
        except (ExecutorError, AttributeError) as exc:  # (an older actor: no such method)
            log.warning("cannot learn the GPUs of job %s from its actors: %s", run_dir.name, exc)
            return None
        stopping = (run_dir / supervise.STOP).exists()
        return placed_gpus(run_dir.name, placements, self.inventory(), stopping)

    def _ended(self, run_dir: Path, launch: dict[str, Any]) -> bool:
        """A run whose result a poll has recorded; asks no actor (a launch would otherwise
        ask every live run's), so a run that exited since its last poll holds its GPUs
        until the next one."""
        return (run_dir / RESULT).exists()

    def _actor_handle(self, name: str) -> Any | None:
        """The actor named ``name`` (None when Ray has no such actor: killed, or its node
        lost). Raises :class:`ExecutorUnavailableError` when Ray cannot be asked."""
        if name not in self._handles:
            try:
                self._handles[name] = self._gcs(
                    f"look up Ray actor {name}",
                    lambda: self._ray.get_actor(name, namespace=self._namespace),
                )
            except ValueError:
                return None
            except ExecutorUnavailableError:
                raise
            except Exception as exc:  # the GCS gone: what gRPC raised, as for ray.nodes()
                raise ExecutorUnavailableError(f"cannot look up Ray actor {name}: {exc}") from exc
        return self._handles[name]

    def _gcs(self, what: str, call: Callable[[], _T]) -> _T:
        """``call()``, a call that Ray's GCS answers, made in a thread of its own: an
        :class:`ExecutorUnavailableError` when it has not returned within
        :data:`GCS_TIMEOUT` (the GCS unreachable: Ray blocks the call until it is back), and
        at once while an earlier one has not, so that no caller (the control plane's loop,
        its API) blocks, nor do threads pile up, however long the GCS is gone. What
        ``call`` raises is raised."""
        with self._gcs_lock:
            if self._gcs_waiting is not None:
                thread, earlier, since = self._gcs_waiting
                if thread.is_alive():
                    raise ExecutorUnavailableError(
                        f"cannot {what}: Ray's GCS has not answered (to {earlier}) for "
                        f"{time.monotonic() - since:.0f} s; is the Ray head up?"
                    )
                self._gcs_waiting = None
            thread, result = call_in_thread(call, GCS_TIMEOUT)
            if thread.is_alive():
                self._gcs_waiting = (thread, what, time.monotonic() - GCS_TIMEOUT)
                raise ExecutorUnavailableError(
                    f"cannot {what}: Ray's GCS did not answer within {GCS_TIMEOUT:g} s; is the "
                    "Ray head up?"
                )
        return result()

    @contextlib.contextmanager
    def _asking(self, what: str) -> Iterator[None]:
        """Ray's errors in the block (and OS errors of its connections) as
        :class:`ExecutorUnavailableError`, which the control plane handles (asks again later)."""
        try:
            yield
        except (self._ray_error, OSError) as exc:
            raise ExecutorUnavailableError(f"cannot {what}: {exc}") from exc


class NodeRunOnNode(NodeRun):
    """:class:`NodeRun` as the Ray actor on its node (the class the executor makes an actor
    of): the command's ``CUDA_VISIBLE_DEVICES`` are danlu's GPU indices read through the
    list this process was started with (the node's raylet's: a node started with
    ``CUDA_VISIBLE_DEVICES=2,3`` counts two GPUs, danlu's 0 and 1, Ray's devices 2 and 3;
    :func:`~danlu.executors.ray_actor.node_visible_devices`; :func:`worker_visible_devices`)."""

    def __init__(
        self,
        command: Sequence[str],
        env: Mapping[str, str],
        workdir: str | None = None,
        log_dir: str | None = None,
        node: str | None = None,
    ) -> None:
        here = worker_visible_devices()
        super().__init__(command, env, workdir, log_dir, node, node_visible=here)


def worker_visible_devices() -> str | None:
    """The ``CUDA_VISIBLE_DEVICES`` this Ray worker process was started with (its raylet's),
    as Ray recorded it before any task or actor ran (``original_visible_accelerator_ids``:
    what Ray itself maps a task's GPU slots through), else as the environment has it now
    (None: unset). Not the environment alone: for an actor asking for no GPU, as the
    executor's do, Ray sets the variable to ``""`` (Rays did by default until 2026, 2.9 among
    them; later ones do with ``RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=1``), which would leave
    danlu's GPU indices unmapped: the command on danlu's GPU 1 of a node started with
    ``2,3`` would use the machine's device 1."""
    try:
        worker: Any = importlib.import_module("ray._private.worker")
        listed = worker.global_worker.original_visible_accelerator_ids.get("GPU")
    except Exception:  # another Ray's internals (or none): the environment, as it is
        listed = None
    if isinstance(listed, list | tuple):
        return ",".join(str(device) for device in listed)
    return os.environ.get(VISIBLE_DEVICES)


def check_unclaimed(
    state_dir: str | Path,
    plane_home: str | Path,
    address: str | None = "auto",
    namespace: str = NAMESPACE,
) -> None:
    """Join the Ray cluster at ``address`` as the executor would (unless this process has
    joined one: the executor built later then joins none) and raise
    :class:`~danlu.executors.ray_claim.ClusterClaimedError` while a live plane of another home
    than ``plane_home`` (its executor's state in ``state_dir``) holds the cluster's claim,
    claiming nothing and writing nothing
    (:meth:`~danlu.executors.ray_claim.ClusterClaim.check_unclaimed`): ``danlu server`` asks
    before it makes its home and its database, and its executor claims the cluster once they
    are made. Raises :class:`ExecutorUnavailableError` when the cluster cannot be joined or
    its GCS does not answer within :data:`GCS_TIMEOUT`."""
    import ray

    if not ray.is_initialized():
        _join(ray, address, namespace)
    record = probe_record(plane_home, Path(state_dir))
    ClusterClaim(ray, record, _gcs_call, address=address).check_unclaimed()


def _gcs_call(what: str, call: Callable[[], _T]) -> _T:
    """``call()``, a call that Ray's GCS answers, made in a thread of its own: an
    :class:`ExecutorUnavailableError` when it has not returned within :data:`GCS_TIMEOUT`
    (:meth:`RayExecutor._gcs` for a start-up's few calls, made before any executor is)."""
    thread, result = call_in_thread(call, GCS_TIMEOUT)
    if thread.is_alive():
        raise ExecutorUnavailableError(
            f"cannot {what}: Ray's GCS did not answer within {GCS_TIMEOUT:g} s; is the Ray head up?"
        )
    return result()


def _join(ray: Any, address: str | None, namespace: str) -> None:
    """Join the Ray cluster at ``address`` as a driver that outlives its GCS for
    :data:`GCS_RECONNECT_TIMEOUT`: this process is the control plane, whose API and loop must
    go on, reporting the executor unavailable, while the cluster's head is down.

    Ray reads its settings from the environment when ``ray`` is imported (the control plane
    has imported it by now) and again when its configuration is initialized, which joining
    does after some of its GCS clients are made: so the variable is set and the configuration
    read again (``ray._config.initialize``) before joining. A cluster's ``--system-config``
    naming the setting wins. The environment is restored after: the processes this one
    starts later do not inherit the setting; those ``ray.init`` starts (a local cluster's,
    when ``address`` is None and none runs) do. First, a GCS must answer at ``address``
    within :data:`~danlu.executors.ray_nodes.JOIN_TIMEOUT` (:func:`check_head_reachable`):
    Ray would retry joining for many minutes."""
    before = os.environ.get(_RECONNECT_VARIABLE)
    try:
        check_head_reachable(ray, address, JOIN_TIMEOUT)  # Ray would retry for many minutes
        os.environ[_RECONNECT_VARIABLE] = str(GCS_RECONNECT_TIMEOUT)
        try:
            ray._config.initialize("{}")  # Ray's settings read again: the variable's included
        except Exception as exc:  # not in this Ray: the process ends with the GCS, as before
            log.warning(
                "cannot set Ray's GCS reconnect timeout (%s): the control plane will end if "
                "the Ray head's GCS is unreachable for 60 s; export %s=%d before starting it",
                exc,
                _RECONNECT_VARIABLE,
                GCS_RECONNECT_TIMEOUT,
            )
        ray.init(address=address, namespace=namespace, log_to_driver=False)
    except (ConnectionError, RuntimeError) as exc:
        raise ExecutorUnavailableError(f"cannot join the Ray cluster: {exc}") from exc
    finally:
        if before is None:
            os.environ.pop(_RECONNECT_VARIABLE, None)
        else:
            os.environ[_RECONNECT_VARIABLE] = before


def public_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without danlu's and Ray's own variables: the base every job's environment is
    built on (a control plane's ``DANLU_*`` settings are not its jobs')."""
    return {k: v for k, v in env.items() if not k.startswith(("DANLU_", *_PRIVATE_PREFIXES))}
