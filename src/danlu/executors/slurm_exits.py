"""How a run of the Slurm executor ended: the exits its nodes' tasks recorded, and Slurm's
record of its batch job (:class:`~danlu.executors.slurm.SlurmExecutor`'s results, which
:func:`run_result` works out).

A run Slurm requeued after it ran (``scontrol requeue``; ``scontrol requeuehold``, then a
release) runs again in the same run directory, where the exit records its nodes' tasks wrote
before the requeue are still there until each node writes its new one (a node ``srun
--kill-on-bad-exit`` kills writes none). Only the exits written since the run's current start
count (:func:`node_exits`): those whose ``finished_at`` is not before its launch record's
``exits_since``, which :func:`note_start` sets when the run is seen started again

- after it was seen waiting again (``held_at``, ``requeued_at``:
  :mod:`~danlu.executors.slurm_waiting`): to when it was first seen so, after every exit of
  its earlier start and before any of its new one (while it waits, that time already
  serves);
- or with a later ``StartTime`` in Slurm's record than the one last seen (a requeue while
  the control plane was away): to that new start time.

Nothing is moved or deleted: an exit a node wrote since the new start, before any poll saw
it, counts (the mark is a time, not the records present when it is set), and the mark is in
the launch record, so a new executor instance keeps it. A run never requeued has no mark,
and all its exits count. The times are compared across hosts (the nodes' clocks, the
controller's, the control plane's): between a requeue's last exit and the new start lie the
requeue's wait (Slurm's ``BeginTime``: ``requeue_delay``, 120 s unless set) and the launch,
far more than the clocks of Slurm's hosts differ (its credentials are checked against them).
An exit record whose ``finished_at`` is unknown is none of a requeued run's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from danlu.executors import records, slurm_task, slurm_waiting, supervise
from danlu.executors.base import (
    PREEMPTED_EXIT_CODE,
    Outcome,
    StopReason,
    classify_exit,
    exit_signal,
    gang_exit,
    host_oom,
)
from danlu.executors.slurmctl import LAUNCH_FAILURE, NODE_LOST_STATES, SlurmJob

EXITS_SINCE = "exits_since"
"""The launch record's field: exits recorded before it are of an earlier start."""
STARTED = "slurm_started_at"
"""The launch record's field: Slurm's ``StartTime`` of the run when it was last seen."""
LAUNCH_FIELDS: Mapping[str, records.Check] = {
    EXITS_SINCE: records.STOP_FIELDS["requested_at"],
    STARTED: records.STOP_FIELDS["requested_at"],
}
"""The checks of the launch record's fields this module keeps (a time each)."""
_GANG = ("gang_stopped_at", "gang_grace")
"""The launch record's fields of a gang stop (:func:`~danlu.executors.slurm_stops.gang_stop`),
which belongs to the start it stopped."""


def node_exits(run_dir: Path, launch: Mapping[str, Any]) -> dict[str, tuple[float, int]]:
    """(when, status) of the exit the task on each of the run's nodes recorded, by node (those
    that recorded none yet absent). A record's fields are checked as an exit record's
    (:data:`~danlu.executors.records.EXIT_FIELDS`): one whose ``exit_code`` is not a whole
    number (``true``, ``"1"``, ``null``) is no exit, and a ``finished_at`` that is not a
    finite number is unknown (0). A node name that is not a plain name
    (:func:`~danlu.executors.slurm_task.is_plain_name`: a damaged launch record) has none.
    After a requeue, an exit recorded before the run's current start (:func:`exits_since`)
    is none of the run's (the module's docstring)."""
    exits: dict[str, tuple[float, int]] = {}
    since = exits_since(launch)
    for name in launch.get("nodes") or []:
        if not slurm_task.is_plain_name(name):
            continue
        data = supervise.read_json(slurm_task.exit_path(run_dir, name))
        done = records.checked(data, records.EXIT_FIELDS) or {}
        code = done.get("exit_code")
        when = float(done.get("finished_at", 0.0))
        if code is not None and (since is None or when >= since):
            exits[name] = (when, code)
    return exits


def exits_since(launch: Mapping[str, Any]) -> float | None:
    """When the run's current start began, for its nodes' exits (the module's docstring): the
    latest of its launch record's ``exits_since`` and, while it waits again after it ran,
    ``held_at`` and ``requeued_at``; None for a run never requeued (all its exits count)."""
    keys = (EXITS_SINCE, *slurm_waiting.AGAIN)
    return max((mark for key in keys if (mark := launch.get(key)) is not None), default=None)


def note_start(launch: dict[str, Any], job: SlurmJob) -> bool:
    """Keep the run's ``exits_since`` (and Slurm's ``StartTime`` of it last seen) up to date
    with Slurm's ``job`` (the module's docstring): set when ``job`` is seen in a state danlu
    knows that is not a waiting one after a wait (call it before
    :func:`~danlu.executors.slurm_waiting.note_wait`, which drops ``held_at`` and
    ``requeued_at`` then), or with a later ``StartTime`` than last seen. A gang stop of the
    earlier start is dropped with it: it is no stop of the new one. Nothing changes once the
    run is given up. Returns whether ``launch`` changed (the caller saves it)."""
    if "gave_up_at" in launch or not job.known or slurm_waiting.waiting(job):
        return False
    marks = [mark for key in slurm_waiting.AGAIN if (mark := launch.get(key)) is not None]
    start, seen = job.started_at, launch.get(STARTED)
    changed = False
    if start is not None and (seen is None or start > seen):
        launch[STARTED] = start
        changed = True
        if seen is not None:  # started again since it was last seen: requeued meanwhile
            marks.append(start)
    since, kept = min(marks, default=None), launch.get(EXITS_SINCE)
    if since is None or (kept is not None and since <= kept):
        return changed
    launch[EXITS_SINCE] = since
    if launch.get("term_due") is not None and launch.get("term_due") == launch.get(_GANG[0]):
        del launch["term_due"]  # the gang stop's SIGTERM, never sent: not to the new start
    for key in _GANG:
        launch.pop(key, None)
    return True


def recorded_exit(exits: Mapping[str, tuple[float, int]], nodes: int) -> int | None:
    """The run's exit from its ``nodes`` nodes' recorded ``exits`` (:func:`node_exits`), as
    :func:`~danlu.executors.base.gang_exit` gives it (the first failure in time that is not a
    checkpoint, else 75 or 0): once every node recorded one, or as soon as one recorded a
    failure (a node ``srun --kill-on-bad-exit`` killed because of it records none, and its
    SIGKILL, Slurm's exit of the job, must not hide the cause). None: not known yet."""
    failed = any(code not in (0, PREEMPTED_EXIT_CODE) for _, code in exits.values())
    if not exits or (len(exits) < nodes and not failed):
        return None
    return gang_exit(code for _, code in sorted(exits.values()))


def exits_decide(state: str, exits: Mapping[str, tuple[float, int]], nodes: int) -> bool:
    """Whether the ``exits`` the tasks of all the run's ``nodes`` nodes recorded
    (:func:`node_exits`) decide its result over Slurm's ended ``state`` of its job, which
    would otherwise (:func:`run_result`):

    - lost with its node (:data:`~danlu.executors.slurmctl.NODE_LOST_STATES`: ``NODE_FAIL``,
      ``BOOT_FAIL``): every node recorded its exit, so the job was over on each when the node
      was lost (in the job's teardown, the node's epilog): its exits decide (a success is
      not run again, a failure is the job's own, a checkpoint resumes);
    - ``OUT_OF_MEMORY`` (a process of the job's cgroup was killed out of memory): every node
      recorded a success or a checkpoint (0 or 75), so the job survived the kill (a helper
      process of it, a data loader's worker retried); a failure or a kill recorded, or a
      node that recorded nothing, stays an OOM (a launcher whose worker the kernel killed
      exits 1: the OOM kill is its cause).

    A run that names no node (none recorded: Slurm picked it) never has its exits decide."""
    if not nodes or len(exits) < nodes:
        return False
    if state == "OUT_OF_MEMORY":
        return all(code in (0, PREEMPTED_EXIT_CODE) for _, code in exits.values())
    return state in NODE_LOST_STATES


def never_ran(job: SlurmJob) -> bool:
    """Whether Slurm cancelled ``job`` before it started (while ``PENDING``): Slurm then
    records its cancel time as both its ``StartTime`` and its ``EndTime``."""
    return job.state == "CANCELLED" and _ended_unstarted(job)


def _ended_unstarted(job: SlurmJob) -> bool:
    """Whether ``job``'s ``EndTime`` is not after its ``StartTime``: Slurm stopped it before
    it started."""
    start, end = job.started_at, job.finished_at
    return start is not None and end is not None and end <= start


KILLED_STATES = frozenset({"CANCELLED", "TIMEOUT", "DEADLINE", "PREEMPTED"})
"""The ended states of a job Slurm (or an admin's ``scancel``) stopped, whatever its script
would have exited with: Slurm records ``ExitCode=0:0`` for such a job when it has no exit of
its batch script to record (``TIMEOUT 0:0``, while its batch step reads ``CANCELLED 0:15``)."""


def slurm_exit(job: SlurmJob) -> tuple[int | None, int | None]:
    """The exit code and signal of the ended Slurm job ``job`` as Slurm recorded them
    (``ExitCode``), but for the ``0:0`` Slurm records for jobs that did not exit: a job
    Slurm stopped (:data:`KILLED_STATES`: ``CANCELLED``, ``TIMEOUT`` at its time limit,
    ``DEADLINE``, ``PREEMPTED``) was killed (137, signal 9), not a success, unless it never
    started (its ``EndTime`` not after its ``StartTime``, as for :func:`never_ran`: no
    exit), one killed out of memory (``OUT_OF_MEMORY``, recorded ``0:125``: no signal) was
    SIGKILLed by the kernel (137, signal 9), and one lost with its node (``NODE_FAIL``) has
    none (None, None: it was killed with its node, no exit was seen), as has one whose node
    failed to boot (``BOOT_FAIL``: it never ran)."""
    code, sig = job.exit_code, job.signal
    if sig is None and not code:
        if job.state == "OUT_OF_MEMORY":  # 0:125, or 0:0: the kernel's OOM kill is a SIGKILL
            return 128 + 9, 9
        if job.state in KILLED_STATES:
            return (None, None) if _ended_unstarted(job) else (128 + 9, 9)
        if job.state in NODE_LOST_STATES:
            return None, None
    return code, sig


OUT_OF_MEMORY_SAID = (
    "a process of it went past the memory Slurm gave the job (its cgroup's limit: sbatch's "
    "--mem or --mem-per-cpu, which DANLU_SLURM_SBATCH_OPTIONS or the partition's defaults "
    "set)"
)
"""What a run's status says of a Slurm job that ended ``OUT_OF_MEMORY``, after its state."""


def ended_said(state: str, reason: str) -> str:
    """``ended STATE (REASON)``: how a run's message names the ended ``state`` of its Slurm
    job and Slurm's ``reason`` for it (``ended TIMEOUT (TimeLimit)``, ``ended NODE_FAIL
    (NodeDown)``), the reason left out where Slurm gives none. A job Slurm ended by itself
    (its time limit, its own preemption, a node lost, an admin's ``scancel``) is told apart
    only by these: its tasks saw a SIGTERM, and a checkpoint (exit 75) looks the same."""
    why = slurm_waiting.given_reason(reason)
    return f"ended {state}" + (f" ({why})" if why else "")


def run_result(
    run_dir: Path,
    launch: dict[str, Any],
    slurm_id: int,
    job: SlurmJob | None,
    reason: StopReason | None,
    *,
    now: float,
    log_tail: Callable[[], str],
    log_dir: Path,
) -> dict[str, Any]:
    """The result of the ended run of ``launch`` (Slurm job ``slurm_id``, stopped for
    ``reason`` if danlu asked), from Slurm's record of it (``job``: ``scontrol show job``) or,
    when Slurm has forgotten it (None), from the exits its tasks recorded: ``outcome``,
    ``exit_code``, ``signal``, ``started_at``, ``finished_at`` (``now`` when Slurm gives no
    end), ``error``, ``node_lost`` and ``host_memory`` (an OOM of the host's memory:
    Slurm's ``OUT_OF_MEMORY``, which ``error`` names with the limit it hit, or a SIGKILL with
    slurmstepd's ``oom-kill event`` in the log, the run's or, reported by torchrun's agent
    that exited 1, a worker's: :func:`~danlu.executors.base.host_oom`).
    ``log_tail`` reads the end of the run's log (for
    :func:`~danlu.executors.base.classify_exit`); ``log_dir`` is the executor's log
    directory, named in the error of a job Slurm could not launch. Slurm's ``OUT_OF_MEMORY``
    is an OOM and ``NODE_FAIL`` or ``BOOT_FAIL`` a run lost with its node, unless the exits
    every node recorded decide (:func:`exits_decide`). A job Slurm ended by itself
    (``TIMEOUT``, ``DEADLINE``, ``PREEMPTED``, ``CANCELLED`` with no stop asked, a node lost)
    has Slurm's state and reason in ``error`` (:func:`ended_said`), whatever its exit: a
    checkpoint after Slurm's SIGTERM is told from one after a host's only by them."""
    code: int | None = None
    sig: int | None = None
    finished = now
    started = launch.get("launched_at")
    error = ""
    state = ""
    if job is not None:
        note_start(launch, job)  # started again unseen: earlier exits are not its
    exits = node_exits(run_dir, launch)
    recorded = recorded_exit(exits, len(launch.get("nodes") or []))
    if job is not None:
        (code, sig), state = slurm_exit(job), job.state
        started = job.started_at or started
        finished = job.finished_at or finished
    if slurm_waiting.given_up_again(launch):  # whatever it recorded before: not started
        code, sig, started, state = None, None, None, ""
        error = slurm_waiting.given_up_error(slurm_id, launch)
    elif recorded is not None:  # the job's own exit: every node's, or a failure's
        code, sig = recorded, None
    elif "gave_up_at" in launch and not exits:  # never started: nothing ran
        code, sig, started, state = None, None, None, ""
        error = slurm_waiting.given_up_error(slurm_id, launch)
    elif job is None:
        error = f"Slurm no longer knows job {slurm_id} and its exit was not recorded"
    elif not exits and never_ran(job):
        code, sig, started = None, None, None
        error = f"Slurm job {slurm_id} was cancelled before it started"
    elif job.reason == LAUNCH_FAILURE and not exits:
        code, sig, started = None, None, None
        where = ", ".join(launch.get("nodes") or []) or "its node"
        error = (
            f"Slurm could not launch job {slurm_id} ({LAUNCH_FAILURE}): is the log "
            f"directory {log_dir.resolve()} present and writable on {where}? "
            "It must be on a filesystem the nodes share (the node's slurmd log says more)"
        )
    decided = exits_decide(state, exits, len(launch.get("nodes") or []))
    lost = state in NODE_LOST_STATES and not decided
    said = ended_said(state, job.reason if job is not None else "")
    host_memory = False
    if state == "OUT_OF_MEMORY" and not decided:
        outcome, host_memory = Outcome.OOM, True
        error = error or f"Slurm job {slurm_id} {said}: {OUT_OF_MEMORY_SAID}"
    elif lost:
        outcome, error = (
            Outcome.PREEMPTED,
            f"a node of Slurm job {slurm_id} {NODE_LOST_STATES[state]}: it {said}",
        )
    elif error:
        outcome = Outcome.PREEMPTED if reason is StopReason.PREEMPT else Outcome.FAILED
    else:
        tail = log_tail()
        outcome = classify_exit(code, tail, reason)
        host_memory = outcome is Outcome.OOM and host_oom(code, tail)  # slurmstepd's oom-kill
        if decided:
            error = f"Slurm job {slurm_id} {said} after every node recorded its exit"
        elif state in {"TIMEOUT", "DEADLINE", "PREEMPTED"} or (
            state == "CANCELLED" and reason is None
        ):
            error = f"Slurm job {slurm_id} {said}"
    if sig is None:
        sig = exit_signal(code)  # 128 + N: died of signal N (255 is none)
    return {
        "outcome": outcome.value,
        "exit_code": code,
        "signal": sig,
        "started_at": started,
        "finished_at": finished,
        "error": error,
        "node_lost": lost,
        "host_memory": host_memory,
    }
