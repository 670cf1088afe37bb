"""How a run of the Ray executor (:class:`~danlu.executors.ray_executor.RayExecutor`) ends,
worked out from its actors' answers at a poll (each :meth:`NodeRun.status
<danlu.executors.ray_actor.NodeRun.status>`, None for an actor that is gone): the result
recorded when an actor is gone (:func:`lost_result`), could not start on its node
(:func:`unstarted_result`), was killed by Ray's memory monitor (:func:`memory_killed_result`;
told by a call's error, :func:`memory_monitor_kill`, or by the death cause Ray keeps of an
actor it no longer finds, :func:`memory_monitor_death`),
or every node's command has exited (:func:`exit_result`), and the stop of the other nodes once
one node's command has exited alone (:func:`gang_stop_reason`). Nothing here asks Ray or
writes a file."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from danlu.executors.base import (
    KILLED_EXIT_CODE,
    PREEMPTED_EXIT_CODE,
    ExecStatus,
    Outcome,
    StopReason,
    classify_exit,
    gang_exit,
    host_oom,
)
from danlu.executors.oom_kills import killed_message

Answers = Sequence[dict[str, Any] | None]
"""The actors' answers to one poll, in the order of the launch record's ``actors``."""


def started_at(answers: Answers, launched_at: float) -> float:
    """When the run started: its first node's command's start, else its launch."""
    return min((a["started_at"] for a in answers if a), default=launched_at)


def lost_result(
    nodes: Sequence[str], answers: Answers, started: float, unanswered: float | None = None
) -> dict[str, Any]:
    """The result of a run one of whose actors is gone (its node lost, its worker killed):
    a preemption (``node_lost``), naming the nodes (``nodes``: the launch record's, by rank)
    whose actors are gone. ``unanswered``: the run's actors have never all answered in the
    seconds since its launch it gives (not started by Ray, or not reachable: nothing says
    they are gone), which the error says instead."""
    where = ", ".join(name for name, answer in zip(nodes, answers, strict=False) if answer is None)
    where = where or "its node"
    if unanswered is None:
        error = f"the run's actor on {where} is gone (node lost?)"
    else:
        error = _unanswered_error(where, unanswered)
    return {
        "outcome": Outcome.PREEMPTED.value,
        "exit_code": None,
        "started_at": started,
        "error": error,
        "node_lost": True,
    }


def _unanswered_error(where: str, unanswered: float) -> str:
    """What a run says whose actors on ``where`` have not answered once in the
    ``unanswered`` seconds since its launch."""
    return (
        f"the run's actor on {where} did not answer within {unanswered:g} s of the "
        "launch (not started there by Ray, or not reachable from the control plane: see "
        "that node's Ray logs)"
    )


def unanswered_result(nodes: Sequence[str], started: float, unanswered: float) -> dict[str, Any]:
    """The result of a run whose actors on ``nodes``, each a node Ray's GCS lists alive,
    have not answered once in the ``unanswered`` seconds since its launch: a run that did
    not start there for the nodes' reasons (:data:`START_FAILED_ON`), as one whose actor's
    creation failed there (:func:`unstarted_result`), not one lost with its node, whose job
    the control plane re-queues at once with nothing counted (sent back to the same node
    every ``unanswered`` seconds, for ever): the control plane counts it toward the node's
    cordon and the job's bound of such re-queues."""
    return {
        "outcome": Outcome.FAILED.value,
        "exit_code": None,
        "started_at": started,
        "error": _unanswered_error(", ".join(nodes), unanswered)
        + "; the node is alive in Ray: counted as a run that could not start there",
        START_FAILED_ON: list(nodes),
    }


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
"""The colour codes Ray puts in its errors' text."""
MAX_CAUSE = 500
"""The most characters of Ray's cause an unstarted actor's result keeps."""


def creation_failure(error: BaseException) -> str | None:
    """Ray's cause, in one line, when ``error`` (a call's error that means the actor is gone)
    says the actor's creation failed on its node (Ray's ``ActorDiedError`` with
    ``actor_init_failed``: danlu not importable there, or the actor's ``__init__`` raised);
    else None (its node lost, its worker killed, never placed). The line is the last of
    Ray's text that says something (the exception raised on the node), colour codes left
    out."""
    if getattr(error, "actor_init_failed", False) is not True:
        return None
    said = _said(error)
    return _capped(said[-1] if said else type(error).__name__)


def _said(error: BaseException | str) -> list[str]:
    """The lines of Ray's text of ``error`` that say something, colour codes left out."""
    lines = [line.strip() for line in _ANSI.sub("", str(error)).splitlines()]
    return [line for line in lines if line and line.strip("^~ ")]


def _capped(cause: str) -> str:
    """``cause`` cut to :data:`MAX_CAUSE` characters."""
    return cause if len(cause) <= MAX_CAUSE else cause[: MAX_CAUSE - 3] + "..."


MEMORY_MONITOR_EXIT = "NODE_OUT_OF_MEMORY"
"""The exit type Ray gives a worker its memory monitor killed, as an ``ActorDiedError``'s text
names it (``Worker exit type: NODE_OUT_OF_MEMORY``) where Ray reports such a death as one."""
_EXIT_DETAIL = "Worker exit detail:"


def memory_monitor_kill(
    error: BaseException, out_of_memory: tuple[type[BaseException], ...]
) -> str | None:
    """Ray's account, in one line, when ``error`` (a call's error that means the actor is
    gone) says Ray's memory monitor killed the actor's worker because its node ran low on
    host memory; else None (its node lost, its worker killed otherwise, its creation failed).
    Ray says so with its ``OutOfMemoryError`` (``out_of_memory``: that class, where this Ray
    has it), which every call to such an actor raises (no ``RayActorError``), or an
    ``ActorDiedError`` whose text names the worker's exit type :data:`MEMORY_MONITOR_EXIT`.
    The line is the first of Ray's text (the node's memory used and its limit), or the
    worker's exit detail, colour codes left out."""
    said = _said(error)
    if isinstance(error, out_of_memory):
        return _capped(said[0] if said else type(error).__name__)
    return _exit_type_said(said)


def _exit_type_said(said: Sequence[str]) -> str | None:
    """The worker's exit detail (or the line) of Ray's text ``said`` (its lines) where a line
    names the exit type :data:`MEMORY_MONITOR_EXIT`; else None."""
    named = next((line for line in said if MEMORY_MONITOR_EXIT in line), None)
    if named is None:
        return None
    detail = named.partition(_EXIT_DETAIL)[2].strip()
    return _capped(detail or named)


def memory_monitor_death(death_cause: Any) -> str | None:
    """Ray's account, in one line, when the cause of a dead actor's death that Ray's GCS
    keeps (its ``ActorDeathCause`` proto, as the GCS's actor table gives it, or as a dict of
    the proto's field names, as ``ray.util.state`` does) says Ray's memory monitor killed its
    worker: the first line of its ``oom_context``'s message (the node's memory used and its
    limit, as the ``OutOfMemoryError`` of a call says it), or the exit detail of an
    ``actor_died_error_context`` naming the exit type :data:`MEMORY_MONITOR_EXIT`; else None
    (its node died, its worker died otherwise, it was killed; no cause, or none readable).
    Read after a control-plane restart, when Ray no longer finds the actor by its name and
    no call can be made to it."""
    death_cause = _fields(death_cause)
    oom = death_cause.get("oom_context")
    if isinstance(oom, Mapping):
        said = _said(str(oom.get("error_message") or ""))
        return _capped(said[0] if said else "the node ran low on memory")
    died = death_cause.get("actor_died_error_context")
    if isinstance(died, Mapping):
        return _exit_type_said(_said(str(died.get("error_message") or "")))
    return None


def _fields(message: Any) -> Mapping[str, Any]:
    """A proto ``message`` as a dict of its fields' names (``MessageToDict``), a mapping as
    it is; empty for anything else."""
    if isinstance(message, Mapping):
        return message
    try:
        from google.protobuf.json_format import MessageToDict

        fields: dict[str, Any] = MessageToDict(message, preserving_proto_field_name=True)
    except Exception:  # no proto (no protobuf where Ray is not): no cause to read
        return {}
    return fields


def _by_node(nodes: Sequence[str], causes: Mapping[int, str]) -> str:
    """``NODE: CAUSE; ...`` of ``causes`` (by rank) with the nodes (``nodes``: the launch
    record's, by rank) named."""
    return "; ".join(
        f"{nodes[rank] if rank < len(nodes) else 'its node'}: {cause}"
        for rank, cause in sorted(causes.items())
    )


def memory_killed_result(
    nodes: Sequence[str], causes: Mapping[int, str], started: float, reason: StopReason | None
) -> dict[str, Any]:
    """The result of a run an actor of which Ray's memory monitor killed (``causes``: by rank,
    Ray's account, :func:`memory_monitor_kill`): its node ran low on host memory, which the
    job's processes there use (the actor's own is small). The job ran out of memory (``OOM``:
    a restart counted, as for a local run the kernel's OOM killer ended or Slurm's
    ``OUT_OF_MEMORY``), not a node lost (the job re-queued with no restart counted, to run
    out again); PREEMPTED while a preemption danlu asked for is under way, as any run killed
    then (:func:`~danlu.executors.base.classify_exit`)."""
    outcome = Outcome.PREEMPTED if reason is StopReason.PREEMPT else Outcome.OOM
    return {
        "outcome": outcome.value,
        "exit_code": None,
        "started_at": started,
        "error": (
            "killed by Ray's memory monitor: the node ran low on host memory "
            f"({_by_node(nodes, causes)})"
        ),
        "host_memory": outcome is Outcome.OOM,
    }


def unstarted_result(
    nodes: Sequence[str], causes: Mapping[int, str], started: float
) -> dict[str, Any]:
    """The result of a run an actor of which could not start on its node (``causes``: by
    rank, Ray's cause, :func:`creation_failure`): a failure, not a lost node (the node is
    there, and a run relaunched onto it fails the same way), naming the nodes (``nodes``:
    the launch record's, by rank) and the fix."""
    where = _by_node(nodes, causes)
    named = sorted({nodes[rank] for rank in causes if rank < len(nodes)})
    return {
        "outcome": Outcome.FAILED.value,
        "exit_code": None,
        "started_at": started,
        "error": (
            f"the run's Ray actor could not start ({where}); is danlu (the control plane's "
            "version) installed on that node (pip install 'danlu[ray]'), and its temporary "
            "folder writable?"
        ),
        START_FAILED_ON: named,
    }


START_FAILED_ON = "start_failed_on"
"""The field of a recorded result (:func:`unstarted_result`) naming the nodes the run could
not start on for the nodes' own reasons: :attr:`ExecStatus.start_failed_on
<danlu.executors.base.ExecStatus.start_failed_on>`. A result recorded without it (a run that
ended otherwise, or before it was recorded) names none."""


def with_start_failures(status: ExecStatus, result: Mapping[str, Any] | None) -> ExecStatus:
    """``status`` (of the recorded ``result``) naming the nodes ``result`` says the run could
    not start on (:data:`START_FAILED_ON`); ``status`` itself when it names none, or names
    them as something other than a list of names (a damaged record blames no node)."""
    names = None if result is None else result.get(START_FAILED_ON)
    if not isinstance(names, list) or not names:
        return status
    if not all(isinstance(name, str) and name for name in names):
        return status
    return replace(status, start_failed_on=tuple(names))


def exit_result(
    answers: Sequence[dict[str, Any]],
    started: float,
    log_tail: Callable[[], str],
    reason: StopReason | None,
    now: float,
) -> dict[str, Any] | None:
    """The result of a run every node's command of which has exited and handed out all its
    output, else None (it runs on). Its status is :func:`gang_exit`'s, by when each node's
    command exited (stamped by its actor as it happened), classified with the end of its
    log (``log_tail()``, read only then) and the stop ``reason``. It ended with its last
    node's exit, not when this poll saw it (the control plane may have been down meanwhile:
    its run time is billed up to the exit), never after ``now`` nor before ``started``.

    A SIGKILL with OOM kills counted in the memory cgroup of the node whose exit is the
    run's (:func:`oom_kills_of`) is the kernel's OOM killer's: an out-of-memory exit of the
    host's memory (``host_memory``; :func:`~danlu.executors.base.host_oom`), as the local
    executor's, whose error says so where no node's says anything
    (:func:`~danlu.executors.oom_kills.killed_message`). So is that node's exit 1 of
    torchrun's agent after its report of a worker's SIGKILL (``exitcode : -9``) in the log."""
    if any(a["exit_code"] is None or a["more"] for a in answers):
        return None
    exits = sorted((a["finished_at"] or 0.0, a["exit_code"]) for a in answers)
    code = gang_exit(c for _, c in exits)
    tail = log_tail()
    kills = oom_kills_of(answers, code)
    outcome = classify_exit(code, tail, reason, oom_killed=kills > 0)
    host_memory = outcome is Outcome.OOM and host_oom(code, tail, kills > 0)
    error = next((a["error"] for a in answers if a["error"]), "")
    if host_memory and kills > 0 and not error:
        error = killed_message(kills, worker=code != KILLED_EXIT_CODE)
    result: dict[str, Any] = {
        "outcome": outcome.value,
        "exit_code": code,
        "started_at": started,
        "error": error,
        "host_memory": host_memory,
    }
    if (last := max((f for f, _ in exits), default=0.0)) > 0:
        result["finished_at"] = min(max(last, started), now)
    return result


def oom_kills_of(answers: Sequence[dict[str, Any]], code: int) -> int:
    """The OOM kills counted in the memory cgroup of the node whose exit is the run's
    (``code``, :func:`~danlu.executors.base.gang_exit`'s: the first node by its exit with
    that status) while its command ran: its answer's ``oom_kills``
    (:meth:`NodeRun.status <danlu.executors.ray_actor.NodeRun.status>`). 0 where that
    answer has no count (its cgroup's could not be read, or an actor of an earlier danlu
    left the field out) or one that is not a count (a damaged answer is no evidence)."""
    exits = sorted(
        (a for a in answers if a["exit_code"] == code), key=lambda a: a["finished_at"] or 0.0
    )
    if not exits:
        return 0
    count = exits[0].get("oom_kills")
    return count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 0


def gang_stop_reason(codes: Sequence[int | None]) -> StopReason | None:
    """Why the other nodes are stopped once some node's command has exited (``codes``: each
    node's exit status, None while it runs) while others still run: a failure is a cancel,
    a checkpoint (exit 75) alone a preemption; None when every node that exited exited 0,
    or none still runs."""
    if None not in codes:
        return None
    if any(c not in (None, 0, PREEMPTED_EXIT_CODE) for c in codes):
        return StopReason.CANCEL
    return StopReason.PREEMPT if PREEMPTED_EXIT_CODE in codes else None
