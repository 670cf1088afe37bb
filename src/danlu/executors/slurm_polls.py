"""How a poll of the Slurm executor (:class:`~danlu.executors.slurm.SlurmExecutor`) learns
what became of a run: its Slurm job found (by the id in its launch record, checked to be the
run's, else by the run's name), Slurm's state of it read (every live run's in one ``squeue``
call), a run Slurm keeps waiting given up after its pending limit, the stops and the gang
stop enforced while it runs, and its result read once it ended
(:func:`~danlu.executors.slurm_exits.run_result`) and recorded.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from danlu.executors import records, slurm_exits, slurm_stops, slurm_waiting
from danlu.executors.base import ExecStatus, RunState, StopReason
from danlu.executors.records import save_launch
from danlu.executors.rundirs import RunDirExecutor
from danlu.executors.slurm_batch import unsubmitted
from danlu.executors.slurm_exits import node_exits
from danlu.executors.slurm_names import run_name
from danlu.executors.slurmctl import SlurmCommands, SlurmError, SlurmJob, SlurmUnavailableError

log = logging.getLogger("danlu.executors.slurm")

START_TIMEOUT = 30.0
"""Seconds a launch record may stand without a Slurm job id before the run counts as lost
(another instance may be submitting it)."""


class SlurmPolls(RunDirExecutor):
    """The polls of :class:`~danlu.executors.slurm.SlurmExecutor`'s runs, which sets the
    attributes below."""

    _commands: SlurmCommands
    _poll_interval: float
    _pending_limit: float | None
    _preempt_grace: float
    _states: dict[int, SlurmJob]
    _states_at: float

    def _slurm_id(self, run_dir: Path, launch: dict[str, Any]) -> int | None:
        """The run's Slurm job id; looked up by name when the launch record lacks it (a
        control plane stopped between ``sbatch`` and writing the id, an ``sbatch`` that timed
        out: :meth:`~danlu.executors.slurm.SlurmExecutor._unconfirmed`). Of several jobs of
        that name the first that Slurm may still run is the run's, and the others are
        cancelled (the run is one Slurm job)."""
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


def _state_message(slurm_id: int, state: SlurmJob) -> str:
    """``Slurm job N STATE``, with Slurm's reason when it gives one (why it is pending); a
    state danlu does not know (:attr:`SlurmJob.known`) is named as such, taken as running."""
    reason = slurm_waiting.given_reason(state.reason)
    what = state.state if state.known else f"in unknown state {state.state!r}, taken as running"
    return f"Slurm job {slurm_id} {what}" + (f" ({reason})" if reason else "")
