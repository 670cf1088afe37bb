"""How the Ray executor (:class:`~danlu.executors.ray_executor.RayExecutor`) stops a run's
commands and kills its actors: a stop sent to every node's actor (one Ray could not deliver
is recorded and sent again at the next poll, with what is left of its grace), the gang stop
made once one node's command has exited while others run, and the kill of an ended run's
actors (tried again until it is recorded, :data:`KILLED`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from danlu.executors import supervise
from danlu.executors.base import Handle, StopReason
from danlu.executors.errors import ExecutorUnavailableError
from danlu.executors.ray_results import gang_stop_reason
from danlu.executors.rundirs import RunDirExecutor

log = logging.getLogger("danlu.executors.ray_executor")

CALL_TIMEOUT = 2.0
"""Seconds a poll waits for all the actors' answers before it counts the run as still
starting (or busy): it asks again at the next poll."""
KILL_RETRY = 30.0
"""Seconds between tries, at the polls of other runs, to kill the actors of an ended run whose
kill failed (at the run's own polls it is tried each time)."""
KILLED = "killed.json"
"""In a run's directory once the actors of the ended run are killed."""

_T = TypeVar("_T")


class RayStops(RunDirExecutor):
    """The stopping and killing of :class:`~danlu.executors.ray_executor.RayExecutor`'s
    runs, which sets the attributes below and makes the Ray calls declared here."""

    _ray: Any
    _preempt_grace: float
    _handles: dict[str, Any]
    _unkilled: dict[tuple[str, ...], tuple[Path, dict[str, Any], float]]

    if TYPE_CHECKING:

        def _actor_handle(self, name: str) -> Any | None: ...

        def _gcs(self, what: str, call: Callable[[], _T]) -> _T: ...

        def _asking(self, what: str) -> AbstractContextManager[None]: ...

    def _kill_actors(self, launch: Mapping[str, Any]) -> bool:
        """Kill the run's actors, each after it has SIGKILLed what is left of its command
        (the command's process group outlives an actor killed first) and removed its output
        folder on its node (:meth:`NodeRun.close`); an actor that does not answer that call
        is killed all the same. True when none is left: killed now, or gone already; False
        when Ray could not be asked about one, or could not kill it."""
        done = True
        actors = []
        for name in launch.get("actors") or []:
            try:
                actor = self._actor_handle(name)
            except ExecutorUnavailableError as exc:
                log.warning("cannot kill the actor %s: %s", name, exc)
                done = False
                continue
            if actor is None:
                continue
            closing = None
            with contextlib.suppress(Exception):  # not answering: its guard ends the command
                closing = actor.close.remote()
            actors.append((name, actor, closing))
        for name, actor, closing in actors:
            if closing is not None:
                with contextlib.suppress(Exception):  # gone already, or not answering
                    self._ray.get(closing, timeout=CALL_TIMEOUT)
            try:
                kill = functools.partial(self._ray.kill, actor, no_restart=True)
                self._gcs(f"kill Ray actor {name}", kill)
            except Exception as exc:  # the GCS unreachable for now: tried again later
                log.warning("cannot kill the actor %s: %s", name, exc)
                done = False
            else:
                self._handles.pop(name, None)
        return done

    def _kill_ended(self, run_dir: Path, launch: Mapping[str, Any], mark: bool = True) -> None:
        """Kill the actors of the ended run of ``launch`` unless ``run_dir`` records them
        killed (:data:`KILLED`, written once they are, when ``mark``: ``run_dir`` is still
        the run's). A kill that failed is remembered for :meth:`_retry_kills`."""
        key = tuple(launch.get("actors") or ())
        if mark and (run_dir / KILLED).exists():
            self._unkilled.pop(key, None)
            return
        if not self._kill_actors(launch):
            self._unkilled[key] = (run_dir, dict(launch), self._clock() + KILL_RETRY)
            return
        self._unkilled.pop(key, None)
        if mark:
            with contextlib.suppress(OSError):  # killed again (none found) at the next poll
                supervise.write_json(run_dir / KILLED, {"killed_at": self._clock()})

    def _retry_kills(self) -> None:
        """Kill again, every :data:`KILL_RETRY` seconds, the actors of ended runs whose kill
        failed (the control plane may not poll an ended run again)."""
        now = self._clock()
        for run_dir, launch, due in list(self._unkilled.values()):
            if due <= now:
                current = self._read_launch(run_dir)
                mine = current is not None and current.get("actors") == launch.get("actors")
                self._kill_ended(run_dir, launch, mark=mine)

    def _gang_stop(self, run_dir: Path, launch: dict[str, Any], codes: list[int | None]) -> None:
        """Stop every node, once, when one node's command has exited while others still run:
        after a failure, SIGTERM and SIGKILL after the cancel grace; after a checkpoint (exit
        75: its host SIGTERMed that node alone, e.g. a shutdown), as a preemption, SIGKILL
        after the job's own preemption grace (else the executor's), so that the others
        checkpoint too rather than wait for the missing node in their collectives. Nothing
        when every node exited 0 so far. The caller makes none while a stop danlu asked for
        is under way: every node is checkpointing, and its grace is not cut short. Actors Ray
        could not reach are stopped at the next poll (:meth:`_signal_again`)."""
        reason = gang_stop_reason(codes)
        if reason is None:
            return
        if reason is StopReason.CANCEL:
            grace = self._cancel_grace
        else:
            grace = self._stop_grace(launch, self._preempt_grace)
        launch["gang_stopped"] = True
        with contextlib.suppress(OSError):  # else stopped again at the next poll
            supervise.write_json(run_dir / supervise.LAUNCH, launch)
        self._signal_all(run_dir, launch, launch["actors"], reason.value, float(grace))

    def _signal_all(
        self, run_dir: Path, launch: dict[str, Any], names: list[str], reason: str, grace: float
    ) -> list[str]:
        """Ask the actors ``names`` of the run to SIGTERM the command now and SIGKILL it
        after ``grace`` seconds. Those Ray could not reach are recorded in the launch record
        (``unsignalled``), for :meth:`_signal_again` at the next poll, and returned."""
        failed = []
        had = "unsignalled" in launch
        for name in names:
            try:
                with self._asking(f"stop Ray actor {name}"):
                    actor = self._actor_handle(name)
                    if actor is not None:  # else gone: nothing of it to stop
                        actor.stop.remote(reason, grace)
            except ExecutorUnavailableError as exc:
                log.warning("%s (tried again at the next poll)", exc)
                failed.append(name)
        if failed:
            when = self._clock()
            launch["unsignalled"] = {"actors": failed, "reason": reason, "grace": grace, "at": when}
        else:
            launch.pop("unsignalled", None)
        if failed or had:
            with contextlib.suppress(OSError):  # else not sent again to those it missed
                supervise.write_json(run_dir / supervise.LAUNCH, launch)
        return failed

    def _signal_again(self, run_dir: Path, launch: dict[str, Any]) -> None:
        """Send the stop Ray could not deliver to some actors again, with what is left of its
        grace (so that its SIGKILL comes when it would have)."""
        pending = launch["unsignalled"]
        grace = max(0.0, float(pending["grace"]) - (self._clock() - float(pending["at"])))
        self._signal_all(run_dir, launch, list(pending["actors"]), str(pending["reason"]), grace)

    def _signal(
        self,
        handle: Handle,
        run_dir: Path,
        launch: dict[str, Any],
        reason: StopReason,
        grace: float,
    ) -> None:
        """Ask every node's actor to SIGTERM the command now and SIGKILL it after the grace.
        Raises :class:`ExecutorUnavailableError` when Ray could not reach one (the stop is
        recorded, and sent to it again at the next poll)."""
        failed = self._signal_all(run_dir, launch, launch["actors"], reason.value, grace)
        if failed:
            raise ExecutorUnavailableError(
                f"cannot reach the Ray actors {', '.join(failed)} to stop job {handle.job_id} "
                "(asked again at the next poll)"
            )
