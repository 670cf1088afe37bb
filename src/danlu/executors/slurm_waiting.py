"""A run Slurm keeps without running it, and the Slurm executor's ``pending_limit`` on it
(:class:`~danlu.executors.slurm.SlurmExecutor`).

Slurm keeps a job waiting in two ways: ``PENDING``, not started yet (its partition down, the
job held with ``scontrol hold``), or held after a requeue (:data:`HELD_STATES`:
``REQUEUE_HOLD``, ``SPECIAL_EXIT``; ``RESV_DEL_HOLD`` once its reservation was deleted), which
runs again only once someone releases it (``scontrol release``). Either way the run keeps its
GPUs in danlu, which counts them busy while nothing runs on them. The executor gives such a
run up once it has waited ``pending_limit`` seconds: the Slurm job is cancelled (again at each
poll until Slurm reports it ended) and the run ends as a failed launch (no exit code, no
start), its error naming Slurm's state and reason and the limit.

The wait counts

- from the run's submission (its launch record's ``launched_at``) while it was never seen
  held: Slurm should start a run danlu placed on free nodes within a scheduling cycle or two;
- from when the executor first saw it held (``held_at``, kept in the launch record so that
  a new instance, after a restart, counts on), not from its submission: a run held after it
  ran for hours has the whole limit from its hold. A release that puts it back ``PENDING``
  does not restart the count; once Slurm is seen running it again, ``held_at`` is dropped and
  a later hold counts anew.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from danlu.executors.slurmctl import HELD_STATES, SlurmJob

PENDING = "PENDING"


def waiting(state: SlurmJob) -> bool:
    """Whether Slurm keeps the job without running it: ``PENDING`` or held after a requeue
    (:data:`~danlu.executors.slurmctl.HELD_STATES`)."""
    return state.state == PENDING or state.state in HELD_STATES


def note_hold(launch: dict[str, Any], state: SlurmJob, now: float) -> bool:
    """Keep the run's ``held_at`` in ``launch`` up to date with Slurm's ``state``: set to
    ``now`` when the job is first seen held, dropped once it is seen in a state danlu knows
    that is not a waiting one (it runs again: a later hold counts anew). Returns whether
    ``launch`` changed (the caller saves it)."""
    if state.state in HELD_STATES:
        if "held_at" in launch:
            return False
        launch["held_at"] = now
        return True
    if "held_at" in launch and state.known and not waiting(state):
        del launch["held_at"]
        return True
    return False


def waiting_since(launch: Mapping[str, Any]) -> float:
    """When the run's wait began (the module's docstring): when it was first seen held, else
    its submission."""
    return float(launch.get("held_at", launch["launched_at"]))


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
    after a release): a failed launch whatever its nodes recorded before the hold."""
    return "gave_up_at" in launch and (
        "held_at" in launch or launch.get("pending_state") in HELD_STATES
    )


def given_up_note(launch: Mapping[str, Any], state: SlurmJob, limit: float) -> str:
    """What the status message of a run being given up adds to Slurm's state."""
    if "held_at" in launch or state.state in HELD_STATES:
        return f"; waited {limit:g} s (the pending limit) since it was first seen held: cancelled"
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
    return (
        f"Slurm did not start job {slurm_id} within {waited:.0f} s of its submission "
        f"({state}: {why}){over}; {gave_up}. Check the partition's state (scontrol show "
        "partition) and the job's reason"
    )


def given_reason(reason: str) -> str:
    """Slurm's reason for a job's state, or ``""`` for the words it prints for none."""
    return "" if reason in ("", "None", "(null)") else reason
