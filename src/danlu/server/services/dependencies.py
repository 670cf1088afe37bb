"""Jobs that wait for other jobs: a spec's ``depends_on`` (:class:`~danlu.core.spec.Dependency`).

A job submitted with dependencies whose conditions are not all met yet is PENDING with
``waiting_on``, the id of one it still waits for; the snapshot's pending query passes such a
job by (:func:`danlu.server.services.view.key_row_queries`), as it does a held one. Every
pass of the reconcile loop judges the waiting jobs again (:func:`due`): once every condition
holds ``waiting_on`` is cleared and the next round schedules the job; once one can never hold
(the job it names ended in a state that rules it out) the job is cancelled, with that reason.
A dependency is checked once, before the job's first start: a job re-queued after a
preemption or a failure does not wait again.

Conditions (after Slurm's): ``succeeded`` (``afterok``), ``failed`` (``afternotok``: ended
FAILED or CANCELLED), ``finished`` (``afterany``), ``started`` (``after``: ran or runs).
The jobs named must exist and be visible to the submitter when the job is submitted (a user's
own jobs; an admin's, any), so dependencies never form a cycle. A sweep's (a job array's)
trial spec is checked so once, as its submitter, when the sweep is created, and stored with
the full ids: its later trials, submitted in its owner's name, wait for those ids, whose
owner is not checked again (:func:`resolve_for` with no viewer).

A dependency may also name a sweep or a job array (its id): it is judged on the whole, as
one job that runs while the sweep does (or one of its trials still runs: a cancelled sweep's
trials checkpoint before they end) and ends with it, SUCCEEDED when every trial
succeeded (or was stopped early by the sweep's rule), FAILED when one did not (or the sweep
ended FAILED), CANCELLED when the sweep was
cancelled; it has started once a trial has. ``--after ARRAY`` thus waits for every task.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, and_, func, not_, select
from sqlalchemy.orm import Session
from sqlalchemy.orm.exc import StaleDataError

from danlu.core.errors import SpecError
from danlu.core.spec import Dependency
from danlu.core.state import TERMINAL_STATES, JobState
from danlu.sched.sweep import STOPPED_EARLY
from danlu.server.db import Job, Sweep, User
from danlu.server.errors import ConflictError, NotFoundError, PermissionDenied
from danlu.server.services.common import IN_CHUNK, by_id

_VERB = {"succeeded": "succeed", "failed": "fail", "finished": "finish", "started": "start"}


@dataclass(frozen=True)
class Found:
    """What a dependency's condition is judged on: the job it names, as the store has it."""

    name: str
    state: JobState
    started: bool
    """Whether the job ever started (``started_at`` set)."""
    kind: str = "job"
    """``job``, or ``sweep`` / ``array`` for a sweep judged as a whole."""
    ended: str = ""
    """How a sweep ended, in words, when ``state`` (what its dependants judge) is not its own
    state: ``DONE (task 1 FAILED)``, ``DONE (every task succeeded)``; empty for a job."""


@dataclass(frozen=True)
class Verdict:
    """A waiting job's dependencies judged: ``waiting_on`` the first whose condition is not
    met yet (None: all are met), or ``never`` the reason one can never be met."""

    waiting_on: str | None
    reason: str
    """The pending reason while it waits; empty when nothing is left to wait for."""
    never: str | None = None


def met(condition: str, found: Found) -> bool | None:
    """True when ``condition`` holds for the job ``found``, False when it never will, None
    while it may still."""
    state = found.state
    if condition == "started" and found.started:
        return True
    if not state.terminal:
        return None
    if condition == "succeeded":
        return state is JobState.SUCCEEDED
    if condition == "failed":
        return state in (JobState.FAILED, JobState.CANCELLED)
    return condition == "finished"  # "started": it ended without ever starting


def judge(dependencies: Sequence[Dependency], found: Mapping[str, Found]) -> Verdict:
    """Judge ``dependencies`` against the jobs ``found`` (by id; one missing is a job that
    no longer exists, which rules its condition out)."""
    waiting: tuple[str, str] | None = None
    for dep in dependencies:
        job = found.get(dep.job)
        verb = _VERB[dep.condition]
        if job is None:
            return Verdict(None, "", f"the job {dep.job} it depends on no longer exists")
        outcome = met(dep.condition, job)
        if outcome is False:
            return Verdict(
                None,
                "",
                f"the {job.kind} {dep.job} ({job.name}) it depends on ended "
                f"{job.ended or job.state.value} and will never {verb}",
            )
        if outcome is None and waiting is None:
            waiting = (dep.job, f"waiting for {job.kind} {dep.job} ({job.name}) to {verb}")
    if waiting is None:
        return Verdict(None, "")
    return Verdict(waiting[0], waiting[1])


def resolve(
    dependencies: Sequence[Dependency],
    lookup: Callable[[str], Job],
    lookup_sweep: Callable[[str], tuple[str, Found]] | None = None,
) -> tuple[list[Dependency], Verdict]:
    """A new job's dependencies with full ids, and their verdict. ``lookup`` finds a job by
    id or unique prefix as the submitter may see it (:func:`~danlu.server.services.jobs.
    get_job` with the submitter as viewer); ``lookup_sweep`` a sweep when no job has the
    id (:func:`sweep_found`). Raises :class:`SpecError` naming the entry for a job that is
    not there, not the submitter's to see, named ambiguously (a prefix of two jobs, of two
    sweeps, or of a job and a sweep), or whose condition can already never hold."""
    resolved: list[Dependency] = []
    found: dict[str, Found] = {}
    for i, dep in enumerate(dependencies):
        field = f"depends_on.{i}.job"
        try:
            try:
                job = lookup(dep.job)
                started = job.started_at is not None
                full, seen = job.id, Found(job.name, JobState(job.state), started)
                if full != dep.job and lookup_sweep is not None:  # a prefix: of a sweep too?
                    _only_job(dep.job, full, lookup_sweep)
            except NotFoundError:
                if lookup_sweep is None:
                    raise
                full, seen = lookup_sweep(dep.job)
        except NotFoundError:
            raise SpecError(
                field,
                f"no job, sweep or job array {dep.job!r}; give the id of one submitted before",
            ) from None
        except PermissionDenied:
            raise SpecError(
                field, f"{dep.job} belongs to another user: a job may depend on its owner's"
            ) from None
        except ConflictError as exc:
            raise SpecError(field, str(exc)) from None
        resolved.append(dep.model_copy(update={"job": full}))
        found[full] = seen
        clash = _contradicted(resolved)
        if clash is not None:
            raise SpecError(
                f"depends_on.{i}.condition",
                f"{seen.kind} {full} is named at depends_on.{clash} too, with condition "
                f"{resolved[clash].condition!r}: it cannot both succeed and fail, so this job "
                "could never run; keep one of them (finished: either way)",
            )
        verdict = judge(resolved[-1:], found)
        if verdict.never is not None:
            raise SpecError(field, f"{verdict.never}: this job could never run")
    return resolved, judge(resolved, found)


_EXCLUSIVE = frozenset({"succeeded", "failed"})
"""Conditions no job meets both of: one of them named with the other, on the same job,
leaves a job that waits until that job ends, then is cancelled."""


def _contradicted(resolved: Sequence[Dependency]) -> int | None:
    """The index of an earlier entry of ``resolved`` (full ids) whose condition on the same
    job the last entry's rules out (``succeeded`` with ``failed``), or None."""
    last = resolved[-1]
    if last.condition not in _EXCLUSIVE:
        return None
    for index, other in enumerate(resolved[:-1]):
        if other.job == last.job and other.condition in _EXCLUSIVE - {last.condition}:
            return index
    return None


def _only_job(prefix: str, job_id: str, lookup_sweep: Callable[[str], tuple[str, Found]]) -> None:
    """:class:`ConflictError` when the id ``prefix`` that named the job ``job_id`` names a
    sweep (or a job array) too: ambiguous, as a prefix of two jobs is."""
    try:
        sweep_id, sweep = lookup_sweep(prefix)
        other = f"{sweep.kind} {sweep_id}"
    except (NotFoundError, PermissionDenied):
        return
    except ConflictError:
        other = "several sweeps"
    raise ConflictError(
        f"id prefix {prefix!r} is ambiguous (job {job_id} and {other}); give more characters"
    )


def resolve_for(
    session: Session, dependencies: Sequence[Dependency], viewer: User | None
) -> tuple[list[Dependency], Verdict]:
    """:func:`resolve` in ``session``, the jobs and sweeps named as ``viewer`` may name
    them (the submitter: a non-admin their own, an admin anyone's); None names any, for
    dependencies resolved before (a sweep's, stored with full ids when it was created)."""
    return resolve(
        dependencies,
        lambda ref: by_id(session, Job, "job", ref, viewer),
        lambda ref: sweep_found(session, ref, viewer),
    )


def stored(spec: Mapping[str, Any]) -> list[Dependency]:
    """The dependencies of a stored spec (full ids, as :func:`resolve` left them)."""
    return [Dependency.model_validate(item) for item in spec.get("depends_on") or ()]


def lookup_found(session: Session, ids: Iterable[str]) -> dict[str, Found]:
    """The jobs (or sweeps) with ``ids``, as :class:`Found` by id (the ones that no longer
    exist left out)."""
    wanted = sorted(set(ids))
    out: dict[str, Found] = {}
    for i in range(0, len(wanted), IN_CHUNK):
        query = select(Job.id, Job.name, Job.state, Job.started_at).where(
            Job.id.in_(wanted[i : i + IN_CHUNK])
        )
        for job_id, name, state, started_at in session.execute(query):
            out[job_id] = Found(name, JobState(state), started_at is not None)
    others = [job_id for job_id in wanted if job_id not in out]
    for i in range(0, len(others), IN_CHUNK):
        for sweep in session.scalars(select(Sweep).where(Sweep.id.in_(others[i : i + IN_CHUNK]))):
            out[sweep.id] = _sweep_as_found(session, sweep)
    return out


_SWEEP_ENDS = {"CANCELLED": JobState.CANCELLED, "FAILED": JobState.FAILED}


LISTED_TRIALS = 5
"""How many of a DONE sweep's trials that did not succeed its dependants' reason names
(:func:`_not_succeeded`); the rest are counted."""


def _sweep_as_found(session: Session, sweep: Sweep) -> Found:
    """A sweep judged as one job (see the module docstring), with how it really ended
    (``Found.ended``): one-row reads while it runs, and a few rows (its first trials that
    did not succeed) once it is DONE, whatever the number of trials (every pass judges the
    jobs waiting on it)."""
    trials = select(Job.seq).where(Job.sweep_id == sweep.id).limit(1)
    started = session.scalar(trials.where(Job.started_at.is_not(None))) is not None
    kind = "array" if (sweep.spec or {}).get("array") else "sweep"
    ended = ""
    if sweep.state == "RUNNING" or _trial_unfinished(session, trials):
        # a cancelled sweep's trials run on until their runs exit (checkpointing, on their
        # GPUs), as a cancelled job does: the sweep ends with the last of them
        state = JobState.RUNNING
    elif sweep.state == "DONE":
        bad = _not_succeeded(session, sweep.id, "task" if kind == "array" else "trial")
        state = JobState.SUCCEEDED if bad is None else JobState.FAILED
        if bad is None:
            every = "task succeeded" if kind == "array" else "trial succeeded or stopped early"
            bad = f"every {every}"
        ended = f"DONE ({bad})"
    else:
        state = _SWEEP_ENDS.get(sweep.state, JobState.FAILED)
        ended = f"{sweep.state} ({sweep.reason})" if sweep.reason else sweep.state
    return Found(sweep.name, state, started, kind, ended)


def _not_succeeded(session: Session, sweep_id: str, noun: str) -> str | None:
    """The trials of the DONE sweep ``sweep_id`` that did not succeed, in words by their
    numbers and states (``tasks 0 and 3 FAILED, task 2 CANCELLED``: the first
    :data:`LISTED_TRIALS` by number, then how many more), or None when every trial succeeded
    or was stopped early by the sweep's rule (it ended as the sweep meant it to)."""
    stopped_early = and_(
        Job.state == JobState.CANCELLED.value,
        func.coalesce(Job.cancel_reason, "").like(f"{STOPPED_EARLY}%"),  # NULL: not the rule
    )
    bad = (
        select(Job.trial, Job.state)
        .where(Job.sweep_id == sweep_id, Job.state != JobState.SUCCEEDED.value)
        .where(not_(stopped_early))
    )
    listed = session.execute(bad.order_by(Job.trial, Job.seq).limit(LISTED_TRIALS + 1)).all()
    if not listed:
        return None
    more = 0
    if len(listed) > LISTED_TRIALS:
        listed = listed[:LISTED_TRIALS]
        total = session.scalar(select(func.count()).select_from(bad.subquery()))
        more = int(total or 0) - LISTED_TRIALS
    by_state: dict[str, list[str]] = {}
    for trial, state in listed:
        by_state.setdefault(state, []).append("?" if trial is None else str(trial))
    parts = [
        f"{noun}{'s' if len(numbers) > 1 else ''} {_and_list(numbers)} {state}"
        for state, numbers in by_state.items()
    ]
    words = ", ".join(parts)
    return f"{words}; {more} more did not succeed" if more else words


def _and_list(items: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _trial_unfinished(session: Session, trials: Select[int]) -> bool:
    """Whether one of the trials ``trials`` selects has not ended yet (one-row read)."""
    ended = [state.value for state in TERMINAL_STATES]
    return session.scalar(trials.where(Job.state.not_in(ended))) is not None


def sweep_found(session: Session, ref: str, viewer: User | None) -> tuple[str, Found]:
    """The sweep with id (or unique prefix) ``ref`` that ``viewer`` may see (None: any), as
    its full id and :class:`Found`; :class:`NotFoundError` or :class:`PermissionDenied`
    otherwise."""
    sweep = by_id(session, Sweep, "sweep", ref, viewer)
    return sweep.id, _sweep_as_found(session, sweep)


def due(session: Session) -> list[tuple[str, Verdict]]:
    """The waiting PENDING jobs whose verdict changed, in submission order: those with
    nothing left to wait for, those now waiting for another job, and those that can never
    run."""
    query = (
        select(Job.id, Job.spec, Job.waiting_on)
        .where(Job.state == JobState.PENDING.value, Job.waiting_on.is_not(None))
        .order_by(Job.seq)
    )
    rows = [(job_id, stored(spec), waiting) for job_id, spec, waiting in session.execute(query)]
    found = lookup_found(session, (dep.job for _, deps, _ in rows for dep in deps))
    out = []
    for job_id, deps, waiting in rows:
        verdict = judge(deps, found)
        if verdict.never is not None or verdict.waiting_on != waiting:
            out.append((job_id, verdict))
    return out


def record(session: Session, job_id: str, verdict: Verdict) -> bool:
    """Store a waiting job's new ``verdict`` (one that it can still run on); False when the
    job no longer waits (started, cancelled or judged by another pass meanwhile). A held
    job's reason is left naming who held it."""
    job = session.scalar(select(Job).where(Job.id == job_id))
    if job is None or job.state != JobState.PENDING.value or job.waiting_on is None:
        return False
    job.waiting_on = verdict.waiting_on
    if job.held_at is None:  # a held job keeps saying who held it; its release says the rest
        job.pending_reason = verdict.reason or "dependencies met: waiting for the next round"
    try:
        session.flush()
    except StaleDataError:
        raise ConflictError(f"job {job_id} changed concurrently; retry") from None
    return True


def explain(session: Session, job: Job) -> str:
    """Why a waiting job waits, with the state of the job it waits for now."""
    deps = stored(job.spec)
    found = lookup_found(session, (dep.job for dep in deps))
    verdict = judge(deps, found)
    if verdict.never is not None:
        return f"{verdict.never}: cancelled at the next pass"
    if verdict.waiting_on is None:
        return "dependencies met: scheduled from the next pass on"
    state = found[verdict.waiting_on].state.value
    return f"{verdict.reason} (it is {state}): not scheduled until it does"
