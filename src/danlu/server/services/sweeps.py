"""Sweeps: hyper-parameter searches the control plane runs as trial jobs.

The adapter between the store and the searcher (:mod:`danlu.sched.sweep`): a sweep's row
(:class:`~danlu.server.db.Sweep`) holds its spec and how many trials were submitted; its
trials are ordinary jobs with ``sweep_id`` and ``trial`` set, scheduled like any other. Every
pass the reconcile loop calls :func:`advance` on each RUNNING sweep: it stops the trials the
median rule rules out (a cancel, with the reason; never a trial whose records say its
training is done; the metrics are read at most every :data:`JUDGE_EVERY_SECONDS`), submits
trials while fewer than ``parallel`` are unfinished, and marks the sweep DONE once every
trial has ended (its reason names the trials that failed: :func:`done_reason`). A trial
that cannot be submitted any more (its project's quota or the inventory changed, or a job
the trials wait for ended so that they never can run) fails the sweep with the reason; its
unfinished trials go on until they end or :func:`cancel` stops them.

The trials' objective is read from their metric records (``metric.name``); a trial that
never reported it has no result and ranks last. A record whose value of it is null (the
ingest stores NaN and infinities so: a diverged trial) is a report at its step that is never
the best: the median rule judges the trial at that step, and a trial with no finite report
has no result, ranks last and is worse than every other for the rule. A record without the
field is no report of it.
"""

from __future__ import annotations

import importlib.util
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from danlu.core.errors import DanluError, SpecError
from danlu.core.spec import parse_spec
from danlu.core.state import JobState
from danlu.core.sweep import (
    ARRAY_PARAMETER,
    EarlyStopping,
    Metric,
    Parameter,
    SweepSpec,
    parse_sweep,
    trial_checkpoint_dir,
    trial_name,
)
from danlu.sched.sweep import (
    STOPPED_EARLY,
    Curve,
    Ended,
    Value,
    curve,
    median_stop,
    trial_parameters,
)
from danlu.server.db import Job, JobMetric, Sweep, User
from danlu.server.errors import AdmissionError, ConflictError, NotFoundError, PermissionDenied
from danlu.server.services import dependencies, jobs, metrics, submission
from danlu.server.services.common import IN_CHUNK, by_id, resolve_now, state_values

RUNNING = "RUNNING"
DONE = "DONE"
CANCELLED = "CANCELLED"
FAILED = "FAILED"
SWEEP_STATES = (RUNNING, DONE, CANCELLED, FAILED)
JUDGE_EVERY_SECONDS = 10.0
"""How often the median rule reads a running sweep's metric records at most."""
SUMMARY_ROWS = 1000
"""The metric records a sweep's summary (:func:`results`) holds at once."""


@dataclass(frozen=True)
class TrialResult:
    """One trial as the sweep's summary shows it."""

    job_id: str
    trial: int
    state: str
    parameters: dict[str, Value]
    best: float | None
    """The best value of the sweep's metric it reported; None before any finite one."""
    step: int | None
    """The step of its last report of the metric (null, i.e. NaN or infinite, included)."""
    stopped_early: bool = False
    """It was cancelled by the sweep's early-stopping rule (its reason begins with
    :data:`~danlu.sched.sweep.STOPPED_EARLY`): it ended as the sweep meant it to."""


@dataclass(frozen=True)
class KindWords:
    """What a sweep's reasons call it and its trial jobs: a sweep and its trials, a job
    array (``array: true``, ``danlu submit --array``) and its tasks."""

    kind: str
    trial: str

    def count(self, n: int) -> str:
        """``n`` trial jobs: ``10 tasks``, ``1 trial``."""
        return f"{n} {self.trial}{'' if n == 1 else 's'}"


SWEEP_WORDS = KindWords("sweep", "trial")
ARRAY_WORDS = KindWords("array", "task")


def kind_words(spec: SweepSpec) -> KindWords:
    """The words of a sweep's reasons for ``spec``'s kind (:class:`KindWords`)."""
    return ARRAY_WORDS if spec.array else SWEEP_WORDS


def spec_of(sweep: Sweep) -> SweepSpec:
    """The stored spec (as accepted at submission). One that a check added since refuses
    (a range of ``-1e308..1e308``, accepted before 2026-12-01) is read as it was stored,
    without the checks, as a job's stored spec is (``parse_spec(stored=True)``): it was valid
    when accepted, and its sweep must still be listed, shown and run."""
    try:
        return SweepSpec.model_validate(sweep.spec)
    except ValidationError:
        return _as_stored(sweep.spec)


def _as_stored(stored: Mapping[str, Any]) -> SweepSpec:
    """``stored`` (a :class:`SweepSpec`'s stored ``model_dump``) as a :class:`SweepSpec`
    built without validation, its parameters, metric and early-stopping rule as their
    models."""
    data = dict(stored)
    parameters = data.get("parameters") or {}
    data["parameters"] = {
        key: Parameter.model_construct(**value) for key, value in parameters.items()
    }
    if isinstance(data.get("metric"), Mapping):
        data["metric"] = Metric.model_construct(**data["metric"])
    if isinstance(data.get("early_stopping"), Mapping):
        data["early_stopping"] = EarlyStopping.model_construct(**data["early_stopping"])
    known = {key: value for key, value in data.items() if key in SweepSpec.model_fields}
    return SweepSpec.model_construct(**known)


def notes_of(sweep: Sweep) -> list[str]:
    """What the sweep's submission told of its trials (how ``gpu_memory: auto`` was
    resolved, or why it could not be), stored with its ``estimate`` (``notes``) and added
    to every trial's pending reason, as a job's submission adds them to its own; none for a
    sweep stored before they were."""
    stored = (sweep.estimate or {}).get("notes")
    return [note for note in stored if isinstance(note, str)] if isinstance(stored, list) else []


def create(
    session: Session,
    data: Mapping[str, Any] | SweepSpec,
    user: User,
    *,
    estimate: Mapping[str, Any] | None = None,
    max_unfinished: int = 0,
    now: float | None = None,
) -> Sweep:
    """Validate and store a sweep submitted by ``user`` and submit its first trials (up to
    ``parallel``), so that a trial spec the cluster or the quota can never take is refused
    now with the field named (``trial.resources.gpus``). ``estimate``: what ``gpu_memory:
    auto`` resolved to, for every trial, with the ``notes`` for their pending reasons
    (:func:`notes_of`). The sweep is owned by its trials' owner, as a job
    is: the caller, or the user an admin names in ``trial.user`` (who then sees and
    cancels it, and in whose name its later trials are submitted).

    ``trial.depends_on`` is resolved here, as ``user`` may name the jobs and sweeps (as for
    a job ``user`` submits: an admin any, a user their own), and stored with the full ids:
    the later trials wait for those, whoever may see them then. ``max_unfinished``: the
    unfinished jobs the owner may have (``DANLU_MAX_JOBS_PER_USER``; 0: any): a
    :class:`ConflictError` when the first trials would pass it; the later ones are never
    refused for it."""
    t = resolve_now(now)
    spec = data if isinstance(data, SweepSpec) else parse_sweep(dict(data))
    if spec.method == "tpe" and importlib.util.find_spec("optuna") is None:
        raise SpecError(
            "method", "tpe needs Optuna on the server: pip install 'danlu[hpo]', or use random"
        )
    trial = spec.trial_spec()
    try:
        owner = submission.owner_of(session, trial, user)
        if max_unfinished:
            first = min(spec.parallel, spec.total)
            words = kind_words(spec)
            submission.check_unfinished(
                session,
                owner,
                max_unfinished,
                adding=first,
                adding_what=f"this {words.kind}'s first {words.count(first)}",
            )
        depends_on, _verdict = dependencies.resolve_for(session, trial.depends_on, user)
    except (SpecError, PermissionDenied, ConflictError) as exc:
        raise in_trial(exc) from None
    if depends_on:  # the full ids, for every trial (a prefix may name another job later)
        full = [dep.model_dump(mode="json") for dep in depends_on]
        spec = spec.model_copy(update={"trial": {**spec.trial, "depends_on": full}})
    sweep = Sweep(
        id=jobs.new_job_id(),
        name=spec.name,
        user_id=owner.id,
        spec=spec.model_dump(mode="json"),
        state=RUNNING,
        submitted=0,
        estimate=dict(estimate) if estimate else None,
        reason="",
        created_at=t,
    )
    try:
        with session.begin_nested():  # a refused trial leaves nothing behind
            session.add(sweep)
            session.flush()
            _submit_trials(
                session, sweep, spec, user, t, _Trials(session, sweep, spec), stored=False
            )
    except (SpecError, AdmissionError, PermissionDenied, ConflictError) as exc:
        raise in_trial(exc) from None
    return sweep


TrialError = SpecError | AdmissionError | PermissionDenied | ConflictError
"""The refusals of a sweep's trial spec that may name one of its fields."""


def in_trial(exc: TrialError) -> TrialError:
    """The error of a sweep's trial spec, its field named where the sweep spec has it, under
    ``trial.`` (a job's ``user`` is the sweep's ``trial.user``), each error of its kind: an
    :class:`AdmissionError` (the trial can never fit the cluster or the quota, or run as its
    owner's OS account) stays one, as a job that can never fit is refused (the client raises
    ``UnschedulableRequestError`` for it, ``InvalidRequestError`` for a :class:`SpecError`),
    a :class:`PermissionDenied` (``trial.user`` naming another user, ``trial.project`` one
    its owner is no member of) and a :class:`ConflictError` (``trial.user`` naming a
    disabled user) stay one too; those two naming no field (the owner's unfinished jobs
    too many) are returned as they are."""
    if isinstance(exc, PermissionDenied | ConflictError):
        if not exc.field:
            return exc
        kind = PermissionDenied if isinstance(exc, PermissionDenied) else ConflictError
        return kind(exc.message, field=f"trial.{exc.field}")
    field = f"trial.{exc.field}".rstrip(".")
    if isinstance(exc, AdmissionError):
        return AdmissionError(field, exc.message)
    return SpecError(field, exc.message)


def refusal_words(exc: DanluError) -> str:
    """A later trial's refusal ``exc`` as the reason of the sweep it fails says it: its
    words, then the field of the sweep's spec it names (:func:`in_trial`) in parentheses
    (``can never start: ... (field trial.resources.gpus)``), not glued before them as the
    error's text has it, where it read as prose (``project: 'alice' is not a member ...``);
    an error naming no field as its text says it."""
    if isinstance(exc, SpecError | AdmissionError | PermissionDenied | ConflictError):
        field = in_trial(exc).field
        if exc.field and field:
            return f"{exc.message} (field {field})"
    return str(exc)


def get(session: Session, sweep_id: str, viewer: User | None = None) -> Sweep:
    """The sweep with id ``sweep_id`` or a unique prefix of 4+ of its characters (a non-admin
    ``viewer`` sees only their own)."""
    return by_id(session, Sweep, "sweep", sweep_id, viewer)


def list_sweeps(
    session: Session,
    viewer: User | None = None,
    limit: int = 100,
    states: Iterable[str] | None = None,
) -> list[Sweep]:
    """Sweeps, newest first (a non-admin ``viewer``'s own), in one of ``states`` (names in
    any case; None: every state); :class:`SpecError` on ``state`` naming the valid ones for
    a name that is no sweep state."""
    if not 1 <= limit <= jobs.MAX_LIMIT:
        raise SpecError("limit", f"must be between 1 and {jobs.MAX_LIMIT}")
    query = select(Sweep).order_by(Sweep.seq.desc()).limit(limit)
    if states is not None:
        query = query.where(Sweep.state.in_(state_values(states, SWEEP_STATES, "sweep")))
    if viewer is not None and not viewer.is_admin:
        query = query.where(Sweep.user_id == viewer.id)
    return list(session.scalars(query))


def cancel(session: Session, sweep_id: str, viewer: User, now: float | None = None) -> Sweep:
    """Cancel a sweep's unfinished trials: a RUNNING sweep ends CANCELLED; one that ended
    with trials left (FAILED: a trial could no longer be submitted) keeps its state and
    reason, and its trials still queued or running are cancelled all the same. A sweep with
    nothing left to cancel (every trial ended, or its stop already asked for) is a conflict.
    A trial that ended meanwhile (its own cancel, committed while this waited for its row)
    is left as it ended."""
    t = resolve_now(now)
    sweep = _locked(session, get(session, sweep_id, viewer).id)
    spec = spec_of(sweep)
    kind = kind_words(spec).kind
    unfinished = _Trials(session, sweep, spec).unfinished()
    if sweep.state == RUNNING:
        _end(sweep, CANCELLED, f"cancelled by {viewer.name}", t)
    else:
        unfinished = [job for job in unfinished if job.cancel_requested_at is None]
        if not unfinished:
            raise ConflictError(
                f"{kind} {sweep.id} already ended ({sweep.state}); nothing to cancel"
            )
    reason = f"its {kind} was cancelled by {viewer.name}"
    for job in unfinished:
        try:
            jobs.cancel_job(session, job.id, reason=reason, now=t)
        except ConflictError:
            if not JobState(job.state).terminal:  # read again under its lock
                raise
    session.flush()
    return sweep


def running_ids(session: Session) -> list[str]:
    """The RUNNING sweeps, oldest first (for the reconcile loop)."""
    query = select(Sweep.id).where(Sweep.state == RUNNING).order_by(Sweep.seq)
    return list(session.scalars(query))


def advance(
    session: Session, sweep_id: str, now: float | None = None
) -> tuple[list[str], list[str]]:
    """One step of a RUNNING sweep: stop the trials the median rule rules out, submit trials
    up to ``parallel`` unfinished, mark it DONE when every trial has ended, FAILED when a
    trial can no longer be submitted. Returns (trials stopped, trials submitted) as job ids."""
    t = resolve_now(now)
    sweep = _locked(session, get(session, sweep_id).id)
    if sweep.state != RUNNING:
        return [], []
    spec = spec_of(sweep)
    trials = _Trials(session, sweep, spec)
    stopped = _stop_early(session, sweep, trials, t)
    try:
        submitted = _submit_trials(session, sweep, spec, sweep.user, t, trials)
    except ConflictError:
        raise  # a concurrent change: the next pass tries again
    except DanluError as exc:  # the spec, the quota, the inventory or the owner's rights
        said = f"{kind_words(spec).trial} {sweep.submitted} could not be submitted"
        _end(sweep, FAILED, f"{said}: {refusal_words(exc)}", t)
        session.flush()
        return stopped, []
    if sweep.submitted >= spec.total and not trials.unfinished():
        _end(sweep, DONE, done_reason(kind_words(spec), sweep.submitted, trials.jobs), t)
    session.flush()
    return stopped, submitted


LISTED_FAILED = 5
"""How many failed trials a DONE sweep's reason names by number (:func:`done_reason`); the
rest are counted."""


def done_reason(words: KindWords, submitted: int, trials: Sequence[Job]) -> str:
    """The reason of a sweep that ended DONE: how many trials ended, then the ones that
    failed, by number (the first :data:`LISTED_FAILED`, then how many more):
    ``6 tasks ended (task 3 FAILED)``, ``12 trials ended (trials 0, 2 and 5 FAILED)``. It
    said ``6 tasks ended`` alone, so that an array with a failed task read DONE in
    ``danlu sweep show`` and the API as one whose tasks all did their work. Trials cancelled
    (by the early-stopping rule, or by a user) are not named: they ended as someone meant."""
    ended = f"{words.count(submitted)} ended"
    failed = sorted(job.trial or 0 for job in trials if job.state == JobState.FAILED.value)
    if not failed:
        return ended
    numbers = [str(n) for n in failed[:LISTED_FAILED]]
    listed = numbers[0] if len(numbers) == 1 else f"{', '.join(numbers[:-1])} and {numbers[-1]}"
    plural = "s" if len(numbers) > 1 else ""
    more = len(failed) - len(numbers)
    rest = f"; {more} more FAILED" if more else ""
    return f"{ended} ({words.trial}{plural} {listed} FAILED{rest})"


def _locked(session: Session, sweep_id: str) -> Sweep:
    """The sweep ``sweep_id`` (a full id) read again with its row locked until the
    transaction ends (``FOR UPDATE`` on PostgreSQL; SQLite's writers are serialised anyway):
    :func:`advance` and :func:`cancel` each read its state and write it, so one waits for
    the other to commit, then sees what it wrote (a cancelled sweep gets no new trial and
    is not marked DONE or FAILED over; a cancel sees the trials just submitted). The sweep's
    row only (``FOR UPDATE OF sweeps``), not its owner's, loaded joined: a cancel of one of
    the owner's jobs locks the job's row, then the owner's, and this transaction locks the
    trials' rows after the sweep's; locking the owner here too took the two in opposite
    orders (PostgreSQL: a deadlock)."""
    query = (
        select(Sweep)
        .where(Sweep.id == sweep_id)
        .with_for_update(of=Sweep)
        .execution_options(populate_existing=True)
    )
    sweep = session.scalar(query)
    if sweep is None:  # deleted meanwhile
        raise NotFoundError("sweep", sweep_id)
    return sweep


def _end(sweep: Sweep, state: str, reason: str, t: float) -> None:
    sweep.state = state
    sweep.reason = reason
    sweep.finished_at = t


class _Trials:
    """A sweep's trial jobs in trial order, read once for a call of this module, and their
    curves of the metric, read at most once and only when asked for."""

    def __init__(self, session: Session, sweep: Sweep, spec: SweepSpec) -> None:
        self.session = session
        self.spec = spec
        query = select(Job).where(Job.sweep_id == sweep.id).order_by(Job.trial)
        self.jobs = list(session.scalars(query))
        self._curves: dict[str, Curve] | None = None

    def unfinished(self) -> list[Job]:
        return [job for job in self.jobs if not JobState(job.state).terminal]

    def curves(self) -> dict[str, Curve]:
        """Each trial's curve of the sweep's metric (those with no report left out)."""
        if self._curves is None:
            self._curves = _read_curves(self.session, self.jobs, self.spec)
        return self._curves

    def value(self, job_id: str) -> float | None:
        """The best value of the metric trial ``job_id`` reported (None before any finite
        one)."""
        found = self.curves().get(job_id)
        metric = self.spec.metric
        if found is None or metric is None or math.isinf(found.best[-1]):
            return None
        return metric.sign * found.best[-1]


def _submit_trials(
    session: Session,
    sweep: Sweep,
    spec: SweepSpec,
    caller: User,
    t: float,
    trials: _Trials,
    *,
    stored: bool = True,
) -> list[str]:
    """Submit trials, as ``caller``, while fewer than ``parallel`` are unfinished and some
    are left; a trial spec's ``checkpoint_dir`` becomes each trial's own directory under it
    (:func:`~danlu.core.sweep.trial_checkpoint_dir`), written into the trial's job spec so
    that ``danlu show`` shows it and a rerun of the trial resumes from it. ``stored``: the
    sweep was accepted before (its later trials), so its trials are read as stored specs
    (``parse_spec(stored=True)``): a check added for new specs since does not fail it;
    False for its first trials, checked as new specs when it is submitted.

    The trials differ in their names and environments only: the trial spec is admitted once
    for them all (:func:`~danlu.server.services.submission.admit`: one read of the
    inventory) and its dependencies, stored with full ids, judged once."""
    active = len(trials.unfinished())
    estimate = sweep.estimate or {}
    out: list[str] = []
    if active >= spec.parallel or sweep.submitted >= spec.total:
        return out
    base = spec.trial_spec(stored=stored)
    admitted = submission.admit(
        session,
        base,
        caller,
        gpu_memory=estimate.get("gpu_memory"),
        micro_batch_limit=estimate.get("micro_batch_limit"),
        family=estimate.get("family"),
        now=t,
    )
    # resolved when the sweep was created, as its submitter could name them: not again
    depends_on, waiting = dependencies.resolve_for(session, base.depends_on, None)
    queued: list[Job] = []
    ended: list[Ended] = []
    running: list[dict[str, Value]] = []
    if spec.method == "tpe":
        ended = _ended(trials)
        running = [_parameters(job) for job in trials.unfinished()]
    checkpoint_dir = base.checkpoint_dir
    notes = notes_of(sweep)
    while active < spec.parallel and sweep.submitted < spec.total:
        n = sweep.submitted
        params = trial_parameters(spec, n, ended, running)
        running.append(params)
        name = trial_name(spec.name, n)
        trial = {
            **spec.trial,
            "name": name,
            "env": {
                **spec.trial.get("env", {}),
                "DANLU_HPARAMS": json.dumps(params, sort_keys=True),
                "DANLU_SWEEP_ID": sweep.id,
                "DANLU_TRIAL": str(n),
                **({"DANLU_ARRAY_INDEX": str(params[ARRAY_PARAMETER])} if spec.array else {}),
            },
        }
        if checkpoint_dir is not None:  # a directory of its own, in its spec (show, rerun)
            trial["checkpoint_dir"] = trial_checkpoint_dir(checkpoint_dir, name)
        job = submission.queue(
            session,
            admitted,
            jobs.new_job_id(),
            parse_spec(trial, stored=stored),
            depends_on=depends_on,
            waiting=waiting,
            now=t,
        )
        submission.add_notes(job, notes)
        job.sweep_id = sweep.id
        job.trial = n
        sweep.submitted = n + 1
        active += 1
        queued.append(job)
        out.append(job.id)
    submission.announce(session, admitted, queued, t)
    trials.jobs.extend(queued)
    return out


def _read_curves(session: Session, trials: Sequence[Job], spec: SweepSpec) -> dict[str, Curve]:
    """Each trial's curve of the sweep's metric (those with no report left out; none for a
    sweep without a metric; a null value, stored for NaN or an infinity, is a report of NaN,
    a record without the field none), ``done`` when the trial's latest record carrying ``progress``
    (by step, then by arrival) says 1 or more: danlu.train's fraction done, so the median
    rule leaves a trial that finished its training to exit on its own. The records a later
    attempt of a trial, or a later rollback generation of its attempt, went back over
    (:mod:`~danlu.server.services.metrics`: superseded) are left out, as the trial's metric
    list leaves them out."""
    if spec.metric is None:
        return {}
    name, goal = spec.metric.name, spec.metric.goal
    points: dict[str, list[tuple[int, float]]] = {}
    latest: dict[str, tuple[int, int, float]] = {}  # job id: (step, record id, progress)
    ids = [job.id for job in trials]
    for i in range(0, len(ids), IN_CHUNK):
        query = select(
            JobMetric.job_id,
            JobMetric.step,
            JobMetric.id,
            JobMetric.data,
            JobMetric.attempt,
            JobMetric.rollback,
        ).where(JobMetric.job_id.in_(ids[i : i + IN_CHUNK]))
        rows = list(session.execute(query))
        first: dict[str, dict[int, int]] = {}  # job id: attempt (from 1): its smallest step
        # job id: (attempt, rollback generation from 1): its smallest step
        generations: dict[str, dict[tuple[int, int], int]] = {}
        for job_id, step, _, _, attempt, rollback in rows:
            if attempt:
                steps = first.setdefault(job_id, {})
                steps[attempt] = min(step, steps.get(attempt, step))
            if rollback:
                replays = generations.setdefault(job_id, {})
                key = (attempt or 0, rollback)
                replays[key] = min(step, replays.get(key, step))
        runs = {
            job_id: metrics.supersession_of(
                sorted(first.get(job_id, {}).items()),
                sorted((a, r, s) for (a, r), s in generations.get(job_id, {}).items()),
            )
            for job_id in first.keys() | generations.keys()
        }
        for job_id, step, row_id, data, attempt, rollback in rows:
            if not isinstance(data, dict):
                continue
            seen = runs.get(job_id)
            if seen is not None and seen.superseded(attempt, step, rollback):
                continue
            value = data.get(name)
            if _number(value):
                points.setdefault(job_id, []).append((step, float(value)))
            elif value is None and name in data:  # diverged: counts at its step
                points.setdefault(job_id, []).append((step, math.nan))
            progress = data.get("progress")
            if _number(progress) and (step, row_id) > latest.get(job_id, (-1, -1, 0.0))[:2]:
                latest[job_id] = (step, row_id, float(progress))
    return {
        job_id: curve(p, goal, done=job_id in latest and latest[job_id][2] >= 1.0)
        for job_id, p in points.items()
        if p
    }


def _number(value: object) -> TypeGuard[int | float]:
    """``value`` is a number as a metric record holds one (not a boolean)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def _ended(trials: _Trials) -> list[Ended]:
    """The sweep's ended trials with a value of the metric (what ``tpe`` learns from)."""
    return [
        Ended(_parameters(job), value)
        for job in trials.jobs
        if JobState(job.state).terminal and (value := trials.value(job.id)) is not None
    ]


def _parameters(job: Job) -> dict[str, Value]:
    """A trial's parameters, from its ``DANLU_HPARAMS``."""
    params: dict[str, Value] = json.loads(jobs.job_spec(job).env.get("DANLU_HPARAMS", "{}"))
    return params


def _stop_early(session: Session, sweep: Sweep, trials: _Trials, t: float) -> list[str]:
    spec = trials.spec
    rule = spec.early_stopping
    if rule is None or spec.metric is None:
        return []
    if t - (sweep.judged_at or -JUDGE_EVERY_SECONDS) < JUDGE_EVERY_SECONDS:
        return []
    sweep.judged_at = t
    curves = trials.curves()
    stopped = []
    for job in trials.jobs:
        mine = curves.get(job.id)
        if job.state != JobState.RUNNING.value or job.cancel_requested_at is not None:
            continue
        if mine is None:
            continue
        others = [c for job_id, c in curves.items() if job_id != job.id]
        reason = median_stop(rule, mine, others, spec.metric.goal)
        if reason is not None:
            jobs.cancel_job(session, job.id, reason=reason, now=t)
            stopped.append(job.id)
    return stopped


def results(session: Session, sweep: Sweep) -> list[TrialResult]:
    """The sweep's trials in trial order, with their parameters and best values (read by
    :func:`_summary`, a trial at a time, holding at most :data:`SUMMARY_ROWS` records: not
    every trial's curve, which ``GET /sweeps/{id}`` held in memory whole)."""
    spec = spec_of(sweep)
    trials = _Trials(session, sweep, spec)
    out = []
    for job in trials.jobs:
        best_value, last_step = _summary(session, job.id, spec)
        out.append(
            TrialResult(
                job_id=job.id,
                trial=job.trial or 0,
                state=job.state,
                parameters=_parameters(job),
                best=best_value,
                step=last_step,
                stopped_early=job.state == JobState.CANCELLED.value
                and (job.cancel_reason or "").startswith(STOPPED_EARLY),
            )
        )
    return out


def _summary(session: Session, job_id: str, spec: SweepSpec) -> tuple[float | None, int | None]:
    """A trial's best value of the sweep's metric (None before a finite one) and the step of
    its last report of it (None before any), as its curve (:func:`_read_curves`) has them:
    the superseded records left out, a null value a report that is never the best. Its
    records are read :data:`SUMMARY_ROWS` at a time and only these two kept."""
    metric = spec.metric
    if metric is None:
        return None, None
    name, sign = metric.name, metric.sign
    query = select(JobMetric.step, JobMetric.data).where(JobMetric.job_id == job_id)
    shown = metrics.supersession(session, job_id).clause()
    if shown is not None:
        query = query.where(shown)
    best_value, last_step = math.inf, -1  # lower is better (``sign``), as in a curve
    rows = session.execute(query.execution_options(yield_per=SUMMARY_ROWS))
    for step, data in rows:
        if not isinstance(data, dict) or name not in data:
            continue
        value = data[name]
        if _number(value):
            if math.isfinite(value):  # (a record stored before NaN was stored as null)
                best_value = min(best_value, sign * float(value))
        elif value is not None:  # text or a boolean: no report of it
            continue
        last_step = max(last_step, step)
    if last_step < 0:
        return None, None
    return (None if math.isinf(best_value) else sign * best_value), last_step


def best(spec: SweepSpec, trials: Sequence[TrialResult]) -> TrialResult | None:
    """The trial with the best value of the sweep's metric (the lowest trial number among
    equals); None before any reported it."""
    reported = [r for r in trials if r.best is not None]
    if not reported or spec.metric is None:
        return None
    sign = spec.metric.sign
    return min(reported, key=lambda r: (sign * (r.best or 0.0), r.trial))
