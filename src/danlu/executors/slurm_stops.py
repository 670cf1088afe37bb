"""Stopping a run of the Slurm executor (:class:`~danlu.executors.slurm.SlurmExecutor`): the
SIGTERM of a stop, sent again at the polls until Slurm takes it, the SIGKILL once its grace is
over, and the executor's own stop of a run's nodes when one of them checkpointed alone (the
gang stop).

A stop's state is in the run's records, so that a new executor instance, after a restart,
carries it on: the stop request (``stop.json``: why, the grace, when it was asked for) and
the launch record's ``term_due`` (the ``requested_at`` of the stop whose SIGTERM is not sent
yet), ``gang_stopped_at`` and ``gang_grace`` (when the executor stopped the nodes itself, and
with what grace), ``suspended_at`` and ``resumed_at`` (when its job was last seen suspended,
and first seen running since: :func:`note_suspension`; ``slurm_resumed_at``, Slurm's time
of a resume no poll saw, waited for: :func:`send_term`). Every function here acts through
``commands`` (``scancel``) and writes the launch record as well as the disk allows
(:func:`~danlu.executors.records.save_launch`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from danlu.executors import records, slurm_waiting
from danlu.executors.base import PREEMPTED_EXIT_CODE, StopReason
from danlu.executors.records import save_launch
from danlu.executors.slurm_exits import node_exits
from danlu.executors.slurmctl import SlurmCommands, SlurmError, SlurmJob, SlurmUnavailableError

log = logging.getLogger(__name__)

SUSPENDED = "SUSPENDED"
"""The state of a job an admin suspended (``scontrol suspend``): Slurm refuses it every
signal but SIGKILL ("Job can not be altered now, try again later"), so a stop's SIGTERM
waits until Slurm runs it again (:func:`enforce_stop` sends it then, :data:`RESUME_SETTLE`
seconds after: :func:`term_held`); its SIGKILL after the grace is taken."""
RESUME_SETTLE = 2.0
"""Seconds a job seen :data:`SUSPENDED` must have been seen ``RUNNING`` again before a
SIGTERM is sent to it: after ``scontrol resume`` the controller reports the job running at
once, but the node's ``slurmstepd`` resumes the step up to about a second later, and a
SIGTERM that reaches the step before is dropped though ``scancel`` succeeded (the job would
be SIGKILLed at the end of its grace without checkpointing)."""
RESUME_RECENT = 30.0
"""Seconds within which a resume Slurm reports (a running job's ``SuspendTime``) holds a
SIGTERM for :data:`RESUME_SETTLE` seconds (:func:`send_term`), though no poll saw the job
suspended: the time is Slurm's, to the second, and the controller's clock may be a little
off danlu's; a resume longer ago surely reached the step."""
KILL_BATCH_AFTER = 10.0
"""Seconds after a stop's grace at which the batch script is killed too, not only the job's
processes (whose end ends it)."""


def gang_stop(
    commands: SlurmCommands,
    run_dir: Path,
    launch: dict[str, Any],
    slurm_id: int,
    grace: float,
    now: float,
) -> None:
    """Stop every node, once, as a preemption, when one node's command checkpointed (its
    task recorded exit 75) while others still run and no other exited otherwise: its host
    sent SIGTERM to that node alone (a shutdown, a ``kill``), and the others would wait
    for it in their collectives. SIGTERM to the job's steps now, SIGKILL after ``grace`` (the
    job's preemption grace: its spec's, else the executor's), enforced at the polls as a stop
    danlu asked for is (:func:`enforce_stop`, with :func:`gang_stop_request`), though the
    run's stop reason stays None. A failure is not handled here: ``srun --kill-on-bad-exit``
    ends the others. The caller makes none while a stop danlu asked for is under way (every
    node is checkpointing, and its own grace stands) or Slurm is ending the job itself."""
    nodes = launch.get("nodes") or []
    if len(nodes) < 2:
        return
    codes = {name: code for name, (_, code) in node_exits(run_dir, launch).items()}
    if PREEMPTED_EXIT_CODE not in codes.values() or len(codes) >= len(nodes):
        return
    if any(code not in (0, PREEMPTED_EXIT_CODE) for code in codes.values()):
        return
    launch["gang_grace"] = max(0.0, grace)
    launch["gang_stopped_at"] = launch["term_due"] = now
    save_launch(run_dir, launch)  # else stopped again at the next poll
    # held (a resume): sent at the polls once the step surely runs; failed: raised, and sent
    # again at the polls
    send_term(commands, run_dir, launch, slurm_id, now)


def gang_stop_request(launch: Mapping[str, Any]) -> dict[str, Any]:
    """The executor's own stop of the run's nodes (:func:`gang_stop`) as a stop request for
    :func:`enforce_stop`; empty when it made none."""
    if "gang_stopped_at" not in launch:
        return {}
    return {
        "reason": StopReason.PREEMPT.value,
        "grace": float(launch.get("gang_grace", 0.0)),
        "requested_at": float(launch["gang_stopped_at"]),
    }


def enforce_stop(
    commands: SlurmCommands,
    run_dir: Path,
    launch: dict[str, Any],
    slurm_id: int,
    state: SlurmJob,
    stop: Mapping[str, Any],
    now: float,
) -> str:
    """Carry on the stop ``stop`` (a stop request; empty: none) of the run Slurm reports in
    ``state``, at a poll at ``now``: cancel a run that Slurm keeps waiting (not started, or
    held after a requeue: nothing of it runs); SIGTERM a running one whose SIGTERM could not
    be sent yet (its launch record's ``term_due`` is the stop's ``requested_at``; a failure
    is logged and tried again at the next poll; one resumed from a suspension only once its
    step surely runs again: :func:`send_term`); SIGKILL the processes of one whose grace is
    over, and the batch script too :data:`KILL_BATCH_AFTER` seconds later (a run stopped
    before its step started has no processes of its own yet). The grace counts from the
    request, however late its SIGTERM was sent.

    Returns a note for the run's status when Slurm refused a cancel or SIGKILL (a
    :class:`SlurmError` other than an unreachable controller: permission denied, a state it
    cannot signal), which is logged and asked again at the next poll; else ``""``. Raised,
    the refusal failed every poll of the run, which then never read as running nor ended.
    :class:`SlurmUnavailableError` is raised, as at the other Slurm calls of a poll."""
    if "reason" not in stop or state.state == "COMPLETING":
        return ""
    try:
        if slurm_waiting.waiting(state):
            commands.cancel(slurm_id)
            return ""
        overdue = now - stop.get("requested_at", 0.0) - stop.get("grace", 0.0)
        if overdue >= KILL_BATCH_AFTER:
            commands.cancel(slurm_id, "KILL", full=True)
        elif overdue >= 0:
            commands.cancel(slurm_id, "KILL")
    except SlurmUnavailableError:
        raise
    except SlurmError as exc:
        return refused(slurm_id, exc)
    if (
        overdue < 0
        and state.state == "RUNNING"
        and launch.get("term_due") == stop.get("requested_at")
    ):
        try:
            send_term(commands, run_dir, launch, slurm_id, now)
        except SlurmError as exc:
            log.warning("cannot send SIGTERM to Slurm job %s yet: %s", slurm_id, exc)
    return ""


def send_term(
    commands: SlurmCommands,
    run_dir: Path,
    launch: dict[str, Any],
    slurm_id: int,
    now: float,
) -> bool:
    """Send the due SIGTERM of the run's stop to its job's steps (``scancel --signal=TERM``)
    at ``now`` and record it sent (:func:`term_sent`), unless its step may not run yet and
    would drop it; returns whether it was sent. Held, it stays due (``term_due``), and
    :func:`enforce_stop` sends it at a later poll.

    It is held while the job was seen resuming (:func:`resuming`), and when Slurm, asked
    afresh (``scontrol show job``), reports the job :data:`SUSPENDED` (recorded:
    :func:`note_suspension`) or resumed within :data:`RESUME_RECENT` seconds by a resume no
    poll saw (one between two polls, or just before the stop): that resume is recorded as
    first seen now (``resumed_at``; ``slurm_resumed_at``: Slurm's time of it, waited for
    once) and the SIGTERM waits :data:`RESUME_SETTLE` seconds. A suspend or resume Slurm
    reports between that look and the ``scancel`` may have dropped the SIGTERM: it is sent
    again once the step surely runs (the job may then get two). A :class:`SlurmError` is
    raised, the SIGTERM still due."""
    if resuming(launch, now):
        return False
    before = commands.job(slurm_id)
    if before is not None and _resume_unseen(run_dir, launch, before, now):
        return False
    commands.cancel(slurm_id, "TERM")
    after = commands.job(slurm_id) if before is not None else None
    if before is not None and after is not None and after.suspend_time != before.suspend_time:
        log.warning(
            "Slurm job %s was suspended or resumed as its SIGTERM was sent, which its step "
            "may have dropped: sent again once the step surely runs",
            slurm_id,
        )
        _resume_unseen(run_dir, launch, after, now)
        return False
    term_sent(run_dir, launch)
    return True


def _resume_unseen(run_dir: Path, launch: dict[str, Any], job: SlurmJob, now: float) -> bool:
    """Whether a SIGTERM to the run's job, as Slurm reports it afresh in ``job`` at ``now``,
    must wait for its step (:func:`send_term`): the job is :data:`SUSPENDED`, or was resumed
    within :data:`RESUME_RECENT` seconds by a resume not seen yet (after the last one a poll
    saw running, ``resumed_at``, and not one waited for already, ``slurm_resumed_at``).
    Either is recorded in the launch record, for :func:`resuming`."""
    if job.state == SUSPENDED:
        note_suspension(run_dir, launch, job, now)
        return True
    resumed = job.suspend_time
    if (
        job.state != "RUNNING"
        or resumed is None
        or now - resumed >= RESUME_RECENT
        or resumed == launch.get("slurm_resumed_at")
        or resumed <= launch.get("resumed_at", -float("inf"))
    ):
        return False
    log.info(
        "Slurm job %s was resumed at %s: its SIGTERM waits %s s for its step to run again",
        job.job_id,
        resumed,
        RESUME_SETTLE,
    )
    launch["slurm_resumed_at"] = resumed
    launch["suspended_at"] = min(resumed, now)
    launch["resumed_at"] = now
    save_launch(run_dir, launch)  # else a restarted executor sends the SIGTERM too soon
    return True


def refused(slurm_id: int, exc: SlurmError) -> str:
    """Log that Slurm refused to stop job ``slurm_id`` (``exc``), to be asked again at the
    next poll, and say so in a note for the run's status message."""
    log.warning("Slurm refused to stop job %s (asked again at the next poll): %s", slurm_id, exc)
    return f"; Slurm refused to stop it, asked again at each poll: {exc}"


def term_due(run_dir: Path, launch: dict[str, Any]) -> None:
    """Record that the SIGTERM of the run's stop request (``stop.json``) is yet to be sent,
    before it is: :func:`enforce_stop` sends it at the polls until :func:`term_sent` records
    it sent (a request that was not recorded has no SIGKILL either; its SIGTERM is sent
    once)."""
    requested = records.read_stop(run_dir).get("requested_at")
    if requested is None:
        return
    launch["term_due"] = requested
    save_launch(run_dir, launch)  # then sent once, as before


def term_sent(run_dir: Path, launch: dict[str, Any]) -> None:
    """The run's due SIGTERM was sent (Slurm took the ``scancel``)."""
    if launch.pop("term_due", None) is not None:
        save_launch(run_dir, launch)  # else sent again at the next poll


def note_suspension(run_dir: Path, launch: dict[str, Any], state: SlurmJob, now: float) -> None:
    """Record in the launch record, at a look at the run's job in ``state`` at ``now``, when
    it was last seen :data:`SUSPENDED` (``suspended_at``) and first seen ``RUNNING`` since
    (``resumed_at``), for :func:`resuming`; the record is written only when they change."""
    if state.state == SUSPENDED:
        if "suspended_at" in launch and "resumed_at" not in launch:
            return
        launch["suspended_at"] = now
        launch.pop("resumed_at", None)
    elif state.state == "RUNNING" and "suspended_at" in launch and "resumed_at" not in launch:
        launch["resumed_at"] = now
    else:
        return
    save_launch(run_dir, launch)  # else a restarted executor sends the SIGTERM too soon


def resuming(launch: Mapping[str, Any], now: float) -> bool:
    """Whether the run's job was seen :data:`SUSPENDED` (:func:`note_suspension`) and has
    not been seen ``RUNNING`` for :data:`RESUME_SETTLE` seconds since: a SIGTERM sent now
    could reach its step still suspended on the node, and be lost."""
    if "suspended_at" not in launch:
        return False
    return now - float(launch.get("resumed_at", now)) < RESUME_SETTLE
