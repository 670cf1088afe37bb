"""How a poll of the Ray executor (:class:`~danlu.executors.ray_executor.RayExecutor`) learns
what became of a run: every node's actor asked for its status and new output (one that does
not answer in time asked again at the next poll; one gone, or never started on its node,
told apart), the output appended to the job's log, and the run's end decided from the
answers (every node's command exited, an actor lost, one that could not start on its node or
has not answered within :data:`START_TIMEOUT` of the launch, one Ray's memory monitor killed,
which an actor Ray no longer finds by name may have been: Ray's record of its death says),
recorded, and its actors killed; while the run goes on, the gang stop made once one node's
command has exited.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from danlu.executors import records, supervise
from danlu.executors.base import ExecStatus, RunState, StopReason, exit_signal
from danlu.executors.errors import ExecutorUnavailableError
from danlu.executors.ray_output import append_run_output
from danlu.executors.ray_records import read_offsets
from danlu.executors.ray_results import (
    creation_failure,
    exit_result,
    lost_result,
    memory_killed_result,
    memory_monitor_death,
    memory_monitor_kill,
    started_at,
    unanswered_result,
    unstarted_result,
    with_start_failures,
)
from danlu.executors.ray_stops import CALL_TIMEOUT, RayStops

log = logging.getLogger("danlu.executors.ray_executor")

START_TIMEOUT = 120.0
"""Seconds an actor may take to answer its first call (Ray starting a worker on its node)
before the run ends: as one that could not start on its node, alive in Ray
(:meth:`RayPolls._unheard_live`), else as lost with it."""


class RayPolls(RayStops):
    """The polls of :class:`~danlu.executors.ray_executor.RayExecutor`'s runs, which sets
    the attributes below and makes the Ray calls declared here (and in :class:`RayStops`)."""

    _busy: tuple[type[Exception], ...]
    _gone: tuple[type[Exception], ...]
    _out_of_memory: tuple[type[Exception], ...]

    if TYPE_CHECKING:

        def _listed(self) -> dict[str, list[dict[str, Any]]]: ...

    def _status(self, run_dir: Path, launch: dict[str, Any]) -> ExecStatus:
        stop = records.read_stop(run_dir)
        reason = StopReason(stop["reason"]) if "reason" in stop else None
        recorded = self._recorded(run_dir, reason)
        if recorded is not None:
            self._kill_ended(run_dir, launch)
            return recorded
        if launch.get("unsignalled"):
            self._signal_again(run_dir, launch)
        unstarted: dict[int, str] = {}
        silent: list[int] = []
        killed: dict[int, str] = {}
        answers = self._ask(run_dir, launch, unstarted, silent, killed)
        unanswered = None
        if answers is None:  # not answering yet: Ray may still be starting the workers
            if self._clock() - launch["launched_at"] < START_TIMEOUT or launch.get("answered"):
                return ExecStatus(RunState.RUNNING, stop_reason=reason)
            answers = [None] * len(launch["actors"])
            unanswered = START_TIMEOUT
        elif not launch.get("answered"):
            launch["answered"] = True
            with contextlib.suppress(OSError):
                supervise.write_json(run_dir / supervise.LAUNCH, launch)
        started = started_at(answers, launch["launched_at"])
        if not self._append(run_dir, launch, answers):  # not ended before its output is in
            return ExecStatus(RunState.RUNNING, stop_reason=reason, started_at=started)
        present = [a for a in answers if a is not None]
        if unstarted:  # an actor that could not start on its live node: no node lost
            failed = unstarted_result(launch.get("nodes") or [], unstarted, started)
            return self._finish(run_dir, launch, failed, reason)
        if killed:  # Ray's memory monitor killed an actor: the job's memory, not its node
            oom = memory_killed_result(launch.get("nodes") or [], killed, started, reason)
            return self._finish(run_dir, launch, oom, reason)
        if unanswered is not None and (unheard := self._unheard_live(launch, silent)):
            failed = unanswered_result(unheard, started, unanswered)
            return self._finish(run_dir, launch, failed, reason)
        if len(present) < len(answers):  # an actor is gone: its node lost, or killed
            lost = lost_result(launch.get("nodes") or [], answers, started, unanswered)
            return self._finish(run_dir, launch, lost, reason)
        tail = functools.partial(self._log_tail, run_dir, launch)
        result = exit_result(present, started, tail, reason, self._clock())
        if result is not None:
            return self._finish(run_dir, launch, result, reason)
        if reason is None and not launch.get("gang_stopped"):
            self._gang_stop(run_dir, launch, [a["exit_code"] for a in present])
        return ExecStatus(RunState.RUNNING, stop_reason=reason, started_at=started)

    def _unheard_live(self, launch: Mapping[str, Any], silent: Sequence[int]) -> list[str]:
        """The nodes of the run's actors that have not answered once since the launch
        (``silent``: their ranks, every rank when none is known) when Ray's GCS lists every
        one of them alive: Ray has not started the actor there (a worker that cannot start on
        the node), or the node's actor cannot be reached from here while the GCS reaches the
        node. Empty when one of them is not alive (a node lost: the run is lost with it) or
        the run names no node (Ray picked it). Raises :class:`ExecutorUnavailableError` when
        the GCS cannot be asked: nothing is decided then (the control plane's own network
        gone), the run asked about again at the next poll."""
        nodes = [str(name) for name in launch.get("nodes") or []]
        ranks = silent or range(len(launch["actors"]))
        unheard = sorted({nodes[rank] for rank in ranks if rank < len(nodes)})
        if not unheard or len(unheard) < len(set(ranks)):
            return []
        live = self._listed()
        return unheard if all(name in live for name in unheard) else []

    def _ask(
        self,
        run_dir: Path,
        launch: Mapping[str, Any],
        unstarted: dict[int, str] | None = None,
        silent: list[int] | None = None,
        killed: dict[int, str] | None = None,
    ) -> list[dict[str, Any] | None] | None:
        """Every actor's status (None for an actor that is gone: dead, not found, or one Ray
        cannot place, its node gone); ``unstarted`` gets the rank and Ray's cause of each
        gone actor whose creation failed on its node (:func:`creation_failure`: danlu not
        importable there, its ``__init__`` raised), ``killed`` the rank and Ray's account of
        each that Ray's memory monitor killed (:func:`memory_monitor_kill`: its node ran low
        on host memory). None when they do not all answer within
        :data:`CALL_TIMEOUT` (still starting, busy) or one cannot be reached for now
        (``ActorUnavailableError``): asked again at the next poll; ``silent`` gets the ranks
        of the actors that did not answer then. An actor Ray no longer finds by its name (a
        control plane that was down when it died) goes in ``killed`` too when Ray's record
        of its death says its memory monitor killed it (:meth:`_memory_death`). Raises
        :class:`ExecutorUnavailableError` for Ray's other errors, and
        :class:`ExecutorError` for a launch record whose ``offsets`` do not match its
        ``actors`` (:func:`~danlu.executors.ray_records.read_offsets`)."""
        offsets = read_offsets(run_dir, launch)
        refs: list[Any] = []
        with self._asking("ask the run's actors"):
            for rank, (name, offset) in enumerate(zip(launch["actors"], offsets, strict=True)):
                actor = self._actor_handle(name)
                if actor is None and killed is not None:
                    memory = self._memory_death(launch, rank)
                    if memory is not None:
                        killed[rank] = memory
                refs.append(actor.status.remote(offset) if actor is not None else None)
            pending = [ref for ref in refs if ref is not None]
            if pending:
                ready, _ = self._ray.wait(pending, num_returns=len(pending), timeout=CALL_TIMEOUT)
                if len(ready) < len(pending):
                    if silent is not None:
                        silent.extend(
                            rank
                            for rank, ref in enumerate(refs)
                            if ref is not None and ref not in ready
                        )
                    return None
            out: list[dict[str, Any] | None] = []
            for rank, ref in enumerate(refs):
                if ref is None:
                    out.append(None)
                    continue
                try:
                    out.append(self._ray.get(ref, timeout=CALL_TIMEOUT))
                except self._busy:
                    if silent is not None:
                        silent.append(rank)
                    return None
                except self._gone as exc:  # its node lost, its worker killed, never placed,
                    out.append(None)  # or never started
                    cause = creation_failure(exc)
                    if cause is not None and unstarted is not None:
                        unstarted[rank] = cause
                    memory = memory_monitor_kill(exc, self._out_of_memory)
                    if cause is None and memory is not None and killed is not None:
                        killed[rank] = memory
        return out

    def _memory_death(self, launch: Mapping[str, Any], rank: int) -> str | None:
        """Ray's account of its memory monitor's kill of the run's actor of ``rank``, which
        Ray no longer finds by its name, from the cause of its death that Ray's GCS keeps
        (:func:`~danlu.executors.ray_results.memory_monitor_death`), read by the actor's id
        its launch recorded (``actor_ids``). None when the launch recorded none (made by
        an older danlu), Ray keeps no record of it (or cannot be asked so: another Ray's
        internals), or it died otherwise (its node lost, killed): the run is then lost with
        its node, as before. Raises :class:`ExecutorUnavailableError` when the GCS does not
        answer in time (asked again at the next poll)."""
        ids, actors = launch.get("actor_ids") or [], launch["actors"]
        if len(ids) != len(actors):
            return None
        try:
            state: Any = importlib.import_module("ray._private.state")
            info = self._gcs(
                f"read Ray's record of actor {actors[rank]}",
                functools.partial(state.actors, actor_id=ids[rank]),
            )
        except ExecutorUnavailableError:
            raise
        except Exception as exc:  # another Ray's internals, an id it refuses: no evidence
            log.warning("cannot read Ray's record of actor %s: %s", actors[rank], exc)
            return None
        return memory_monitor_death(info.get("DeathCause") if isinstance(info, Mapping) else None)

    def _append(
        self, run_dir: Path, launch: dict[str, Any], answers: list[dict[str, Any] | None]
    ) -> bool:
        """Append the actors' new output to the job's log and record how far it was read
        (:func:`~danlu.executors.ray_output.append_run_output`; False when the log cannot be
        written now). Written to the job's log as this executor places it (:meth:`_job_log`),
        never to the path the launch record names; nothing is while that log is a link out
        of its directory."""
        log_file = self._job_log(run_dir.name)
        return True if log_file is None else append_run_output(log_file, run_dir, launch, answers)

    def _finish(
        self,
        run_dir: Path,
        launch: Mapping[str, Any],
        result: dict[str, Any],
        reason: StopReason | None,
    ) -> ExecStatus:
        """Record how the run ended and kill its actors."""
        result["signal"] = exit_signal(result.get("exit_code"))
        status = self._record(run_dir, result, reason)
        self._kill_ended(run_dir, launch)
        return status

    def _status_of(self, result: Mapping[str, Any], reason: StopReason | None) -> ExecStatus:
        """The status of a run that ended as ``result`` says, naming the nodes the run could
        not start on (:func:`with_start_failures`), when recorded and at every poll until
        the control plane forgets it."""
        return with_start_failures(super()._status_of(result, reason), result)
