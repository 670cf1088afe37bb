"""How a run's exit is classified: the outcome of an exited run from its exit status, the
tail of its log, why it was asked to stop, and evidence of the kernel's OOM killer.

:func:`classify_exit`: 0 is SUCCEEDED; :data:`PREEMPTED_EXIT_CODE` (75, the code
``danlu.train`` exits with after checkpointing on SIGTERM) is PREEMPTED; ``danlu.train``'s
verdict that the job cannot fit its memory even at the smallest micro-batch, recognised in the
log tail, is CANNOT_FIT; a CUDA or host out-of-memory error recognised there is OOM (one of
the host's memory, :func:`host_oom`, said so by
:attr:`~danlu.executors.base.ExecStatus.host_memory`: a SIGKILL of the run, or of a torchrun
worker, with evidence of the kernel's OOM killer); anything else is FAILED.

The executors' interface (:mod:`danlu.executors.base`) builds on these values and
re-exports every public name here, so they are importable from either module.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable

PREEMPTED_EXIT_CODE = 75
"""Exit code of a job that checkpointed and stopped after SIGTERM (``danlu.train``'s contract;
``EX_TEMPFAIL``). The executor classifies it as :attr:`Outcome.PREEMPTED`."""


class Outcome(enum.Enum):
    """How a finished run ended."""

    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    OOM = "OOM"
    CANNOT_FIT = "CANNOT_FIT"
    """Out of memory even at the smallest micro-batch, as ``danlu.train``'s OOM guard found
    (:data:`CANNOT_FIT_MARK`): a run with the same memory fails the same way, so the control
    plane ends the job FAILED at once instead of restarting it. An out-of-memory error with
    no such verdict (a script without ``danlu.train``, an OOM the guard cannot retry) is
    :attr:`OOM`."""
    PREEMPTED = "PREEMPTED"


class StopReason(enum.Enum):
    """Why the executor was asked to stop a run (recorded, so a restarted server learns it)."""

    PREEMPT = "preempt"
    CANCEL = "cancel"


# Text that identifies an out-of-memory death in the tail of a job's log.
_CUDA_OOM = re.compile(
    r"OutOfMemoryError|CUDA out of memory|CUDA error: out of memory|CUBLAS_STATUS_ALLOC_FAILED"
)
_HOST_OOM = re.compile(r"out of memory|MemoryError|oom[-_ ]kill|Killed process", re.IGNORECASE)
CANNOT_FIT_MARK = re.compile(
    r"MicroBatchOutOfMemoryError: out of memory even at micro-batch \d+"
    r"|ContextOutOfMemoryError: DANLU_GPU_MEMORY_LIMIT"
)
"""``danlu.train``'s verdict that the job cannot fit its memory: the last line of the
traceback of :class:`danlu.train.batch.MicroBatchOutOfMemoryError` (its name and the start of
its message are a contract), which its OOM guard raises when even the smallest micro-batch ran
out of memory, or of :class:`danlu.train.memory_cap.ContextOutOfMemoryError`, raised before
training when the job's GPU memory limit is no larger than its CUDA context. The traceback
is in the job's log wherever it ran (the local executor's file, a Slurm batch job's output, a
Ray actor's output), also when torchrun started it (its agent exits 1, whatever its workers'
codes, but their output goes to the same log): so the log, not an exit code, carries it."""
# torchrun's agent stopped by the SIGTERM a preemption sends the job's process group: it
# passes the signal to its workers (which checkpoint and exit 75), then exits 1 with this
_LAUNCHER_TERMINATED = re.compile(
    r"SignalException: Process \d+ got signal: (?:15|(?:Signals\.)?SIGTERM)\b"
)
KILLED_EXIT_CODE = 137
"""128 + SIGKILL: what a shell reports for a process the kernel's OOM killer killed."""
WORKER_SIGKILLED = re.compile(
    r"^[ \t]*exitcode[ \t]*:[ \t]*-9[ \t]+\(pid:[ \t]*\d+\)"
    r"|Signal 9 \(SIGKILL\) received by PID \d+",
    re.MULTILINE,
)
"""torchrun's report of a worker that died of SIGKILL, as the kernel's OOM killer kills: its
agent exits 1 after printing a ``ChildFailedError`` whose entry for each failed rank has a line
``  exitcode  : -9 (pid: 4321)  (SIGKILL)`` and, as the worker wrote no error file,
``  traceback : Signal 9 (SIGKILL) received by PID 4321`` (torch's
``torch.distributed.elastic.multiprocessing.errors``; torch 1.x's ``exitcode: -9 (pid: 4321)``
too). The agent's own log line of each failed attempt, ``failed (exitcode: -9) local_rank: 1
(pid: 4321) of binary: ...``, is not the report (a restart after it may have succeeded), so
the ``exitcode`` line must start the line."""
SIGNAL_LIMIT = 65
"""Signal numbers are below it: Linux's run from 1 to ``SIGRTMAX``, 64 (the nodes' numbers,
whatever this host's ``signal.NSIG``)."""


def exit_signal(exit_code: int | None) -> int | None:
    """The signal N whose death an exit status ``exit_code`` of 128 + N reports (the shell's
    convention), or None when it reports none: 128 or less (an exit of the process's own),
    or 128 + N for no signal N (:data:`SIGNAL_LIMIT`): 255 is a program's ``exit(-1)`` (ssh's
    failure), not a death by "signal 127"."""
    if exit_code is None or not 0 < exit_code - 128 < SIGNAL_LIMIT:
        return None
    return exit_code - 128


def gang_exit(codes: Iterable[int]) -> int:
    """The exit status of a run of several nodes from its nodes' statuses, in the order
    they exited: the first failure that is not :data:`PREEMPTED_EXIT_CODE` (a node that
    failed or was killed while the others checkpointed leaves no whole checkpoint), else
    :data:`PREEMPTED_EXIT_CODE` when a node checkpointed, else 0."""
    failures = [code for code in codes if code != 0]
    return next((c for c in failures if c != PREEMPTED_EXIT_CODE), failures[0] if failures else 0)


def host_oom(exit_code: int | None, log_tail: str = "", oom_killed: bool = False) -> bool:
    """Whether an exited run died for the host's memory, not its GPUs': a SIGKILL, as the
    kernel's OOM killer sends, with evidence of an OOM kill, and no CUDA out-of-memory error
    in its log tail (the GPU's memory ran out first).

    The SIGKILL is the run's own (exit status 137) or, under torchrun, a worker's: its agent
    exits 1 (any failing status but :data:`PREEMPTED_EXIT_CODE` counts) after reporting the
    worker's ``exitcode -9`` (:data:`WORKER_SIGKILLED`, in the log tail). The evidence is
    ``oom_killed`` (the OOM kill count of the memory cgroup the run's processes were in rose
    while it ran: :mod:`~danlu.executors.oom_kills`, which the local executor's supervisor
    and the Ray executor's node actor read) or an out-of-memory marker in the log tail
    (slurmstepd's ``oom-kill event``, a ``MemoryError``). A bare SIGKILL is no evidence: an
    admin's ``kill -9`` (of the run or of a worker), a stop's grace that ran out."""
    if exit_code in (None, 0, PREEMPTED_EXIT_CODE) or _CUDA_OOM.search(log_tail):
        return False
    if exit_code != KILLED_EXIT_CODE and not WORKER_SIGKILLED.search(log_tail):
        return False
    return oom_killed or bool(_HOST_OOM.search(log_tail))


def classify_exit(
    exit_code: int | None,
    log_tail: str = "",
    stop_reason: StopReason | None = None,
    oom_killed: bool = False,
) -> Outcome:
    """Classify an exited run.

    0 -> SUCCEEDED; 75 -> PREEMPTED; a run killed after a preemption request (its exit
    status one of a death by signal, :func:`exit_signal`; not 255) -> PREEMPTED,
    and so is one whose launcher ended on the request's SIGTERM (torchrun's agent exits 1
    with a ``SignalException`` after its workers checkpointed); ``danlu.train``'s verdict
    that even the smallest micro-batch ran out of memory in the log tail
    (:data:`CANNOT_FIT_MARK`) -> CANNOT_FIT; torch's ``OutOfMemoryError`` / "CUDA out of
    memory" there -> OOM, and so is a death for the host's memory (:func:`host_oom`: exit
    status 137, or torchrun's report of a worker's SIGKILL with a failing status, with an
    out-of-memory marker there, or ``oom_killed``, the OOM kill count of the run's memory
    cgroup up while it ran); anything else (including an unknown exit code, and a SIGKILL of
    the run or of a worker with no such evidence) -> FAILED.
    """
    if exit_code == 0:
        return Outcome.SUCCEEDED
    if exit_code == PREEMPTED_EXIT_CODE:
        return Outcome.PREEMPTED
    if (
        stop_reason is StopReason.PREEMPT
        and exit_code is not None
        and (exit_signal(exit_code) is not None or _LAUNCHER_TERMINATED.search(log_tail))
    ):
        return Outcome.PREEMPTED
    if CANNOT_FIT_MARK.search(log_tail):
        return Outcome.CANNOT_FIT
    if _CUDA_OOM.search(log_tail) or host_oom(exit_code, log_tail, oom_killed):
        return Outcome.OOM
    return Outcome.FAILED
