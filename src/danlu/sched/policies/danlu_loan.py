"""How long a job's loans last, from its own history (the ``danlu`` policy's ``loan_rule``).

GPUs a running job grows into are *lent* (mark ``danlu.grew``): the next arrival ranked
ahead of it takes them back, and the job pays two restarts, one to grow and one to shrink.
Whether a growth pays depends on how long the loan lasts, which the job's own past loans
tell: the policy keeps, in the job's marks, when its current loan began (``danlu.lent_at``)
and an exponentially weighted mean of how long its past loans lasted (``danlu.loan``,
``danlu.loans`` counts them). A scheduler has all of this: it is its own decisions' record.

A growth from remaining time ``T_c`` (current size, no restart) to ``T_b`` (bigger size,
restart ``R`` excluded; speed-up ``r = T_c / T_b``) that is taken back after a loan of
``L`` seconds trains ``L - R`` seconds at ``r`` times the speed and pays two restarts, so
it saves ``(L - R) (r - 1) - 2 R`` seconds. With ``loan_rule`` a running job is offered a
bigger size only when what it gains over its expected loan length is at least ``margin``
times the two restarts: ``(L - R) (r - 1) >= margin * 2 R`` (:func:`repays`). The loan
length ``L`` is the job's own mean; ``L - R`` is capped at ``T_b`` (the loan outlasts
the job).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from danlu.sched.policies.danlu_alloc import Option

LENT_AT = "danlu.lent_at"
"""When the job's current loan began (its last growth); absent or 0: not on a loan."""
LOAN = "danlu.loan"
"""Exponentially weighted mean of how long the job's past loans lasted (seconds)."""
LOANS = "danlu.loans"
"""How many of the job's loans have ended (by a shrink or a preemption)."""


def loan_time(marks: Mapping[str, float], min_loans: int = 1) -> float | None:
    """The job's expected loan length, or ``None`` before ``min_loans`` loans ended."""
    if marks.get(LOANS, 0.0) < max(min_loans, 1):
        return None
    return marks.get(LOAN)


def end_loan(marks: Mapping[str, float], now: float, weight: float, note: dict[str, float]) -> None:
    """Record in ``note`` that the job's current loan (if any) ends at ``now``: its length
    enters the weighted mean with ``weight`` (the first one sets it)."""
    began = marks.get(LENT_AT, 0.0)
    if began <= 0.0:
        return
    length = max(0.0, now - began)
    count = marks.get(LOANS, 0.0)
    mean = marks.get(LOAN)
    note[LOAN] = length if mean is None or count <= 0 else weight * length + (1 - weight) * mean
    note[LOANS] = count + 1.0
    note[LENT_AT] = 0.0


def start_loan(now: float, note: dict[str, float]) -> None:
    """Record in ``note`` that a loan begins at ``now`` (the job grows)."""
    note[LENT_AT] = max(now, 1e-9)


def record(
    marks: Mapping[str, float], now: float, grew: bool, weight: float, note: dict[str, float]
) -> None:
    """Loan marks (into ``note``) of a running job with ``marks`` that moves at ``now``: a
    growth opens a loan, any other move (a shrink, a move at the same size, a preemption)
    ends the open one."""
    if grew:
        start_loan(now, note)
    else:
        end_loan(marks, now, weight, note)


def repays(keep: float, bigger: float, loan: float, restart: float, margin: float = 1.0) -> bool:
    """Whether growing from ``keep`` seconds at the current size to an option of ``bigger``
    seconds (restart included) saves, over a loan of ``loan`` seconds, ``margin`` times
    the two restarts it costs: ``(L - R) (r - 1) >= margin * 2 R``."""
    run = bigger - restart
    if run >= keep:
        return False
    trained = min(loan, run + restart) - restart
    return trained * (keep / max(run, 1e-9) - 1.0) >= margin * 2.0 * restart


def worth_lending(
    options: Sequence[Option], keep: float, loan: float, restart: float, margin: float = 1.0
) -> list[Option]:
    """The options (bigger than the job's current size) whose growth :func:`repays`."""
    return [o for o in options if repays(keep, o.seconds, loan, restart, margin)]


def drop_unpaid(
    options: Sequence[Option], current: int, loan: float, restart: float, margin: float = 1.0
) -> list[Option]:
    """``options`` without the options bigger than ``current`` GPUs whose growth does not
    :func:`repays` (all of them kept when the job has no keep option)."""
    keep = next((o.seconds for o in options if o.keep), None)
    if keep is None:
        return list(options)
    return [
        o
        for o in options
        if o.gpus <= current or o.keep or repays(keep, o.seconds, loan, restart, margin)
    ]
