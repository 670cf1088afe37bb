"""How the reconcile loop reads a run's exit and a job's stop: what an exit says
(:func:`describe_exit`), whether it is an exit 75 danlu did not ask for
(:func:`unasked_75`), how a job whose cancellation was requested is stopped
(:class:`StopKind`), and up to when an exited run's GPUs are charged (:func:`ran_until`)."""

from __future__ import annotations

import enum
from typing import Any

from danlu.core.state import JobState
from danlu.core.values import controls_replaced
from danlu.executors import ExecStatus, Outcome, RunState, StopReason
from danlu.server.db import Job
from danlu.server.services import jobs


def storable(message: str) -> str:
    """An executor's ``message`` as a reason the store can hold and a terminal shows as it
    is: each control character and lone surrogate as ``?``. The message is read from
    records a job can write (the local executor's exit record, which runs as the job's
    user): a NUL, which PostgreSQL's text refuses, or a lone surrogate, which no store can
    encode, failed the write of the job's exit, and so every reconcile pass at that job."""
    return controls_replaced(message.encode("utf-8", "replace").decode("utf-8"))


def describe_exit(status: ExecStatus | None) -> tuple[bool, int | None, str]:
    """(succeeded, exit code, reason) of an exited run (``None``: it never launched)."""
    if status is None:
        return False, None, "never launched (the control plane stopped before the launch)"
    code = status.exit_code
    how = f"exit code {code}" if code is not None else "no exit code"
    if status.signal:
        how = f"signal {status.signal}"
    if status.message:
        how += f"; {storable(status.message)}"
    if status.outcome is Outcome.SUCCEEDED:
        return True, code, "exited 0"
    if status.node_lost:
        return False, code, f"lost with its node ({how})"
    if status.outcome is Outcome.PREEMPTED:
        if status.checkpointed and status.stop_reason is None:
            return False, code, "checkpointed and exited 75 on its own (a SIGTERM from outside)"
        if status.checkpointed:
            return False, code, "checkpointed and exited after preemption; re-queued to resume"
        return False, code, f"stopped for preemption ({how}); re-queued"
    if status.outcome is Outcome.OOM:
        return False, code, f"out of memory ({how})"
    if status.stop_reason is StopReason.CANCEL:
        return False, code, f"stopped ({how})"
    return False, code, f"failed ({how})"


def unasked_75(status: ExecStatus | None, job: Job) -> bool:
    """``status`` is an exit 75 of ``job``'s run that danlu did not ask for: no stop sent to
    the run, the job RUNNING (not being preempted) and no cancellation requested."""
    return (
        status is not None
        and status.outcome is Outcome.PREEMPTED
        and status.checkpointed
        and status.stop_reason is None
        and not status.node_lost
        and job.state == JobState.RUNNING.value
        and job.cancel_requested_at is None
    )


class StopKind(enum.Enum):
    """How a job whose cancellation was requested is stopped."""

    CANCEL = "cancel"
    """A cancel: SIGTERM, SIGKILL after the job's preemption grace (its spec's
    ``preempt_grace``, else ``DANLU_PREEMPT_GRACE``), to checkpoint; delivered as a
    cancel (:meth:`~danlu.executors.Executor.cancel`), so the job ends CANCELLED."""
    LIMIT = "limit"
    """Its deadline passed or it used its time limit: SIGTERM with the job's preemption
    grace, to checkpoint (delivered as a preemption; the job still ends CANCELLED)."""


def stop_of(job: Job) -> StopKind | None:
    """How ``job`` is to be stopped, if its cancellation was requested."""
    if job.cancel_requested_at is None:
        return None
    limited = (job.cancel_reason or "").startswith(jobs.LIMIT_STOPS)
    return StopKind.LIMIT if limited else StopKind.CANCEL


def ran_until(status: ExecStatus | None, last_start: float | None, t: float) -> float | None:
    """When the run of ``status`` exited, if it is a time on the control plane's clock
    before ``t``: its GPUs are charged up to then, not up to when its exit was seen. The
    executors report wall-clock seconds (the local one's supervisor, the Slurm and Ray
    nodes); a time before the run's start (``last_start``) is on another clock (the fake
    executor's manual one, a caller driving the pass's clock), and None is returned."""
    end = status.finished_at if status is not None else None
    if end is None or last_start is None or not last_start <= end < t:
        return None
    return end


RunGpus = tuple[list[dict[str, Any]] | None, float]
"""A run's allocation as the job row stores it, and when the run started."""


def run_gpus(job: Job) -> RunGpus:
    """``job``'s current run: its allocation (not parsed: most runs do not fail) and start."""
    return job.allocation, job.last_start if job.last_start is not None else job.submitted_at


VANISHED = ExecStatus(
    state=RunState.EXITED,
    outcome=Outcome.FAILED,
    message="the executor no longer knows the run, which had launched (its record vanished)",
)
"""The exit of a run whose launch the executor took (``jobs.launched_attempt``) and that it
no longer knows: a failure, a restart counted (FAILED out of restarts). Launched again for
free as one never launched, a job whose run's record kept vanishing ran for ever."""
