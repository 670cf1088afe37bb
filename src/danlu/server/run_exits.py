"""How the reconcile loop reads a run's exit and a job's stop: what an exit says
(:func:`describe_exit`, and for an out-of-memory exit the memory the run had, or for one of
the host's memory what to change: :func:`memory_note`), whether it is an exit 75 danlu did not
ask for
(:func:`unasked_75`), how a job whose cancellation was requested is stopped
(:class:`StopKind`), and up to when an exited run's GPUs are charged (:func:`ran_until`)."""

from __future__ import annotations

import enum
from typing import Any

from danlu.core.cluster import MILLI_PER_GPU
from danlu.core.state import JobState
from danlu.core.units import format_bytes
from danlu.core.values import controls_replaced
from danlu.executors import ExecStatus, Outcome, RunState, StopReason
from danlu.server.db import Job
from danlu.server.services import jobs

AllocationRows = list[dict[str, Any]] | None
"""A job's allocation as its row stores it: ``[{"node", "gpu", "milli", "memory"}, ...]``."""


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
        said = executor_note(status)
        if status.checkpointed and status.stop_reason is None:
            outside = "checkpointed and exited 75 on its own (a SIGTERM from outside)"
            return False, code, f"{outside}{said}"
        if status.checkpointed:
            after = "checkpointed and exited after preemption; re-queued to resume"
            return False, code, f"{after}{said}"
        return False, code, f"stopped for preemption ({how}); re-queued"
    if status.outcome is Outcome.CANNOT_FIT:
        return False, code, f"{CANNOT_FIT} ({how})"
    if status.outcome is Outcome.OOM:
        what = "out of host memory" if status.host_memory else "out of memory"
        return False, code, f"{what} ({how})"
    if status.stop_reason is StopReason.CANCEL:
        return False, code, f"stopped ({how})"
    return False, code, f"failed ({how})"


def executor_note(status: ExecStatus | None) -> str:
    """What the executor said of a run's exit (its ``message``), as the run's reason ends
    with it: ``; Slurm job 12 ended TIMEOUT (TimeLimit)``; empty when it said nothing. A
    checkpoint's reason names no exit code, and one danlu did not ask for is judged anew
    (:func:`~danlu.server.failures.judge_unasked_exit_75`): without this, who sent its
    SIGTERM (Slurm's time limit, its preemption, a node lost) was said nowhere."""
    if status is None or not status.message:
        return ""
    return f"; {storable(status.message)}"


CANNOT_FIT = (
    "cannot fit its GPU memory: danlu.train ran out of memory even at its smallest micro-batch"
)
"""How the reason of a run that ended :attr:`~danlu.executors.Outcome.CANNOT_FIT` begins."""
NO_RESTART = "ended with no restart: a restart with the same memory fails the same way"
"""What the reason of a job ended FAILED for a run that cannot fit says of its restarts."""


def memory_note(status: ExecStatus | None, job: Job, allocation: AllocationRows) -> str:
    """What the reason of an out-of-memory exit adds (empty for any other exit): the GPU
    memory the run had, from its ``allocation`` (the job row's, :data:`AllocationRows`; not
    named when it is not known) and the job's request (``gpu_memory_per_gpu``); for a
    run that cannot fit (:attr:`~danlu.executors.Outcome.CANNOT_FIT`) what to ask for instead
    (a share: a larger ``resources.gpu_memory``, whole GPUs or a GPU type with more memory;
    whole GPUs: a GPU type with more memory) and that no restart is spent; for another
    out-of-memory exit that a restart gets the same memory (a job's request is not grown
    behind its back: the memory it asked for is what its quota, its placement and its
    neighbours on a shared GPU were sized by). For an exit of the host's memory
    (:attr:`~danlu.executors.ExecStatus.host_memory`: the kernel's OOM killer, Slurm's
    ``OUT_OF_MEMORY``, Ray's memory monitor) no GPU memory, which was not what ran out:
    :func:`host_memory_note`."""
    if status is None or status.outcome not in (Outcome.OOM, Outcome.CANNOT_FIT):
        return ""
    if status.outcome is Outcome.OOM and status.host_memory:
        return host_memory_note(job)
    had = memory_had(allocation, job.gpu_memory_per_gpu)
    if status.outcome is Outcome.OOM:
        return f"; it had {had[0]}, which a restart gets again" if had else ""
    less = "or make it need less (mixed precision, activation checkpointing, sharded training)"
    if had is None:
        fix = f"give it more GPU memory (resources.gpu_memory, or whole GPUs) {less}"
        return f"; {fix}; {NO_RESTART}"
    words, shared = had
    if shared:
        fix = (
            "submit it again asking for more memory (a larger resources.gpu_memory or "
            "gpu_fraction, whole GPUs by leaving both out, or GPUs with more memory: "
            f"resources.gpu_type) {less}"
        )
    else:
        fix = f"submit it again on GPUs with more memory (resources.gpu_type) {less}"
    return f"; it had {words}: {fix}; {NO_RESTART}"


HOST_MEMORY_FIX = (
    "make it use less host memory (fewer or lighter data-loader workers, smaller prefetch and "
    "shuffle buffers) or run it where more is free"
)
"""What the reason of a run that ran out of the host's memory says to change."""


def host_memory_note(job: Job) -> str:
    """What the reason of a run that ran out of the host's memory adds: that its GPU memory
    was not the cause (more of it, a larger ``resources.gpu_memory`` or whole GPUs, would
    not help), the host memory its spec asks for (``resources.memory``) where it asks for
    some, which no executor reserves or holds the job to (the scheduler places by GPUs),
    and what to change (:data:`HOST_MEMORY_FIX`)."""
    asked = jobs.job_spec(job).resources.memory
    if not asked:
        return f"; not GPU memory: {HOST_MEMORY_FIX}"
    return (
        f"; not GPU memory: it asked for {format_bytes(asked)} of host memory "
        f"(resources.memory), which is not reserved for it: {HOST_MEMORY_FIX}"
    )


def memory_had(allocation: AllocationRows, gpu_memory: int | None) -> tuple[str, bool] | None:
    """The GPU memory of a run's ``allocation`` in words (``a 20.0GiB share of 1 GPU``,
    ``2 whole GPUs of 80.0GiB``), and whether it was a share (memory capped below its GPUs':
    the job asked for ``gpu_memory``, or for a fraction of a GPU); None without an
    allocation. The smallest GPU's memory is named: it is the one that ran out first."""
    rows = [r for r in allocation or () if isinstance(r, dict)]
    try:
        memory = min(int(r["memory"]) for r in rows)
        milli = min(int(r.get("milli", MILLI_PER_GPU)) for r in rows)
    except (KeyError, TypeError, ValueError):  # no rows, or a damaged one: nothing to say
        return None
    gpus = len({(str(r.get("node")), r.get("gpu")) for r in rows})
    size = format_bytes(memory)
    if gpu_memory or milli < MILLI_PER_GPU:
        each = "1 GPU" if gpus == 1 else f"each of its {gpus} GPUs"
        return f"a {size} share of {each}", True
    if gpus == 1:
        return f"1 whole GPU of {size}", False
    if len({int(r["memory"]) for r in rows}) > 1:
        return f"{gpus} whole GPUs, the smallest of {size}", False
    return f"{gpus} whole GPUs of {size}", False


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


RunGpus = tuple[AllocationRows, float]
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
