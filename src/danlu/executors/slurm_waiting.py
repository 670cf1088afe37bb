"""A run Slurm keeps without running it, and the Slurm executor's ``pending_limit`` on it
(:class:`~danlu.executors.slurm.SlurmExecutor`).

Slurm keeps a job waiting in two ways: ``PENDING``, not started yet (its partition down, the
job held with ``scontrol hold``) or started again (requeued without a hold: ``scontrol
requeue``), or held after a requeue (:data:`HELD_STATES`: ``REQUEUE_HOLD``, ``SPECIAL_EXIT``;
``RESV_DEL_HOLD`` once its reservation was deleted), which runs again only once someone
releases it (``scontrol release``). Either way the run keeps its GPUs in danlu, which counts
them busy while nothing runs on them. The executor gives such a run up once it has waited
``pending_limit`` seconds: the Slurm job is cancelled (again at each poll until Slurm reports
it ended) and the run ends as a failed launch (no exit code, no start), its error naming
Slurm's state and reason and the limit.

The wait counts

- from the run's submission (its launch record's ``launched_at``) while it was never seen
  held nor running: Slurm should start a run danlu placed on free nodes within a scheduling
  cycle or two;
- from when the executor first saw it held (``held_at``), not from its submission: a run
  held after it ran for hours has the whole limit from its hold. A release that puts it
  back ``PENDING`` does not restart the count;
- from when the executor first saw it ``PENDING`` again after it saw it run (``ran_at``:
  when it first saw it in a state it knows that is not a waiting one) for a run requeued
  without a hold (``requeued_at``): a run that ran for hours is not cancelled at the next
  poll. So too for a run never seen running whose nodes recorded exits (it ran while the
  control plane was away), counted from when the executor found them
  (:func:`note_unseen_run`).

Each is kept in the launch record, so that a new instance, after a restart, counts on; once
Slurm is seen running the run again, ``held_at`` and ``requeued_at`` are dropped and a later
hold or requeue counts anew. They also mark where the exits its nodes recorded before the
requeue end: those are none of the run started again's (its gang stop and its result ignore
them; :mod:`~danlu.executors.slurm_exits` keeps the mark as ``exits_since`` once it runs
again). Once the run is given up they stay as they were (its error says
how long it waited).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from danlu.executors.slurmctl import HELD_STATES, SlurmJob

PENDING = "PENDING"
AGAIN = ("held_at", "requeued_at")
"""The launch record's fields of a wait that began after the run was submitted."""


def waiting(state: SlurmJob) -> bool:
    """Whether Slurm keeps the job without running it: ``PENDING`` or held after a requeue
    (:data:`~danlu.executors.slurmctl.HELD_STATES`)."""
    return state.state == PENDING or state.state in HELD_STATES


def note_wait(launch: dict[str, Any], state: SlurmJob, now: float) -> bool:
    """Keep the run's ``ran_at``, ``held_at`` and ``requeued_at`` in ``launch`` up to date
    with Slurm's ``state`` (the module's docstring), all set to ``now`` when first due:
    ``held_at`` when the job is first seen held; ``requeued_at`` when it is first seen
    ``PENDING`` after it was seen running (and not held since); ``ran_at`` when it is first
    seen in a state danlu knows that is not a waiting one, which drops the other two (it runs
    again: a later hold or requeue counts anew). Nothing changes once the run is given up.
    Returns whether ``launch`` changed (the caller saves it)."""
    if "gave_up_at" in launch:
        return False
    if state.state in HELD_STATES:
        return _set(launch, "held_at", now)
    if state.state == PENDING:
        return "ran_at" in launch and "held_at" not in launch and _set(launch, "requeued_at", now)
    if not state.known:
        return False
    changed = _set(launch, "ran_at", now)
    for key in AGAIN:
        if key in launch:
            del launch[key]
            changed = True
    return changed


def note_unseen_run(launch: dict[str, Any], state: SlurmJob, now: float) -> bool:
    """Record that the ``PENDING`` run, whose nodes the caller found recorded exits, ran
    though it was never seen running (the control plane was away): Slurm requeued it, and
    its wait counts from ``now``, as when first seen ``PENDING`` again. Nothing changes for
    a run seen running or held before, or given up. Returns whether ``launch`` changed."""
    if state.state != PENDING or any(key in launch for key in ("ran_at", "gave_up_at", *AGAIN)):
        return False
    launch["ran_at"] = launch["requeued_at"] = now
    return True


def _set(launch: dict[str, Any], key: str, now: float) -> bool:
    """Set ``launch[key]`` to ``now`` unless it is set; whether it was not."""
    if key in launch:
        return False
    launch[key] = now
    return True


def waiting_since(launch: Mapping[str, Any]) -> float:
    """When the run's wait began (the module's docstring): when it was first seen held, else
    when it was first seen ``PENDING`` again after it ran, else its submission."""
    return float(launch.get("held_at", launch.get("requeued_at", launch["launched_at"])))


def over_limit(launch: Mapping[str, Any], limit: float | None, now: float) -> bool:
    """Whether the waiting run has waited ``limit`` seconds or more (never when None)."""
    return limit is not None and now - waiting_since(launch) >= limit


def give_up(launch: dict[str, Any], state: SlurmJob, limit: float, now: float) -> bool:
    """Record in ``launch`` that the executor gives the run up (once: when, Slurm's state and
    reason then, and the limit it passed), for its result to say why it ended. Returns
    whether ``launch`` changed (the caller saves it)."""
    if "gave_up_at" in launch:
        return False
    launch["gave_up_at"] = now
    launch["pending_reason"] = state.reason
    launch["pending_state"] = state.state
    launch["pending_limit"] = limit
    return True


def given_up_held(launch: Mapping[str, Any]) -> bool:
    """Whether the executor gave the run up after a hold (held then, or ``PENDING`` again
    after a release)."""
    return "gave_up_at" in launch and (
        "held_at" in launch or launch.get("pending_state") in HELD_STATES
    )


def given_up_again(launch: Mapping[str, Any]) -> bool:
    """Whether the executor gave the run up while it waited again: after a hold
    (:func:`given_up_held`) or a requeue. A failed launch whatever its nodes recorded before."""
    return given_up_held(launch) or ("gave_up_at" in launch and "requeued_at" in launch)


def given_up_note(launch: Mapping[str, Any], state: SlurmJob, limit: float) -> str:
    """What the status message of a run being given up adds to Slurm's state."""
    waited = f"; waited {limit:g} s (the pending limit) since it was first seen"
    if "held_at" in launch or state.state in HELD_STATES:
        return f"{waited} held: cancelled"
    if "requeued_at" in launch:
        return f"{waited} {PENDING} again after it ran (requeued): cancelled"
    return f"; not started within {limit:g} s (the pending limit) of its submission: cancelled"


def given_up_error(slurm_id: int, launch: Mapping[str, Any]) -> str:
    """The error of a run the executor gave up (:func:`give_up`): Slurm's state and reason
    then, how long it waited and the limit."""
    waited = float(launch["gave_up_at"]) - waiting_since(launch)
    why = given_reason(launch.get("pending_reason", "")) or "no reason given"
    state = launch.get("pending_state", PENDING)
    limit = launch.get("pending_limit")
    over = f", past the executor's pending limit of {float(limit):g} s" if limit else ""
    gave_up = "it was cancelled and the run counts as a failed launch"
    if given_up_held(launch):
        return (
            f"Slurm kept job {slurm_id} {state} ({why}) {waited:.0f} s after it was first "
            f"seen held{over}; {gave_up}. A held job runs again only once released (scontrol "
            f"release {slurm_id}); a longer pending_limit (DANLU_SLURM_PENDING_LIMIT) leaves "
            "more time for that"
        )
    if given_up_again(launch):
        return (
            f"Slurm kept job {slurm_id} {state} ({why}) {waited:.0f} s after it was first "
            f"seen {PENDING} again after it ran (requeued){over}; {gave_up}. Check the job's "
            f"reason (scontrol show job {slurm_id}) and the partition's state"
        )
    return (
        f"Slurm did not start job {slurm_id} within {waited:.0f} s of its submission "
        f"({state}: {why}){over}; {gave_up}. Check the partition's state (scontrol show "
        "partition) and the job's reason; a longer pending_limit (DANLU_SLURM_PENDING_LIMIT) "
        "waits longer"
    )


def given_reason(reason: str) -> str:
    """Slurm's reason for a job's state, or ``""`` for the words it prints for none."""
    return "" if reason in ("", "None", "(null)") else reason
