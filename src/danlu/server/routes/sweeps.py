"""``/api/v1/sweeps``: submit, list, get and cancel hyper-parameter sweeps."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Query

from danlu.core.errors import SpecError
from danlu.core.sweep import SWEEP_LIMITS, fixed_batch_note, parse_sweep
from danlu.core.values import check_values
from danlu.server.db import Sweep
from danlu.server.errors import AdmissionError
from danlu.server.routes.deps import Caller, State, body_named, checked_name, single_valued
from danlu.server.routes.estimation import resolve_memory, submission_notes
from danlu.server.routes.schemas import SweepOut
from danlu.server.run_as import check_account
from danlu.server.services import jobs, sweeps
from danlu.server.services.cluster import load_cluster

router = APIRouter(prefix="/sweeps", tags=["sweeps"], dependencies=[Depends(single_valued)])


def sweep_out(sweep: Sweep, trials: list[sweeps.TrialResult] | None = None) -> dict[str, Any]:
    """The API form of a sweep; with ``trials``, its trials and the best one."""
    spec = sweeps.spec_of(sweep)
    out: dict[str, Any] = {
        "id": sweep.id,
        "name": sweep.name,
        "user": sweep.user.name,
        "state": sweep.state,
        "reason": sweep.reason,
        "metric": None if spec.metric is None else spec.metric.name,
        "goal": None if spec.metric is None else spec.metric.goal,
        "array": spec.array,
        "total": spec.total,
        "submitted": sweep.submitted,
        "created_at": sweep.created_at,
        "finished_at": sweep.finished_at,
        "spec": sweep.spec,
        "notes": sweeps.notes_of(sweep),
    }
    if trials is not None:
        out["trials"] = [vars(t) for t in trials]
        top = sweeps.best(spec, trials)
        out["best"] = None if top is None else vars(top)
    return out


@router.post("", status_code=201, response_model=SweepOut, summary="Submit a sweep")
def submit_sweep(
    user: Caller, state: State, body: Annotated[dict[str, Any], Body()]
) -> dict[str, Any]:
    """Validate a sweep spec and submit its first trials; 422 names the field of an invalid
    spec or of a trial spec the cluster or the quota can never take (``trial.resources``);
    409 when the first trials would take their owner past ``DANLU_MAX_JOBS_PER_USER``, or
    their owner (``trial.user``) is disabled."""
    # before parse_sweep, not redundant with its own check (run after pydantic read the
    # spec): pydantic's errors would come first and say less, and a body too large or too
    # deep must not reach it (tests/server/test_sweep_body_check_review74.py)
    check_values(body, limits=SWEEP_LIMITS)
    try:
        spec = parse_sweep(body)
    except SpecError as refused:
        raise body_named(refused) from None
    trial = spec.trial_spec()
    with state.db.read_session() as session:
        cluster = load_cluster(session)
    # no transaction: a trace for ``gpu_memory: auto``, once for every trial
    estimate, micro = resolve_memory(
        trial, cluster, state.estimate_timeout, state.tracers, state.settings.trace_module_names
    )
    resolved: dict[str, Any] = {
        "gpu_memory": estimate.gpu_memory,
        "micro_batch_limit": micro,
        "family": estimate.family,
    }
    notes = submission_notes(trial, estimate)
    batch_note = fixed_batch_note(spec, trial)  # a searched batch that changes nothing
    if batch_note is not None:
        notes.append(batch_note)
    if notes:  # what POST /jobs tells in the job's pending reason: every trial's tells it
        resolved["notes"] = notes
    with state.db.session() as session:
        sweep = sweeps.create(
            session,
            spec,
            user,
            estimate=resolved,
            max_unfinished=state.settings.max_jobs_per_user,
        )
        trials = sweeps.results(session, sweep)
        # DANLU_RUN_AS=user: the OS account of the trials' owner (an admin may name another)
        try:
            check_account(state.settings, jobs.get_job(session, trials[0].job_id).user.account)
        except AdmissionError as refused:  # the owner is the sweep's trial.user
            raise sweeps.in_trial(refused) from None
        out = sweep_out(sweep, trials)
    if state.wake is not None:
        state.wake()
    return out


@router.get("", response_model=list[SweepOut], summary="List sweeps, newest first")
def list_sweeps(
    user: Caller,
    state: State,
    states: Annotated[
        list[str] | None,
        Query(alias="state", description="a sweep state; repeat for several"),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[dict[str, Any]]:
    """Sweeps in the state(s) given (``RUNNING``, ``DONE``, ``CANCELLED``, ``FAILED``; any
    case; else every one); non-admins see only their own (without their trials: get one for
    those)."""
    with state.db.read_session() as session:
        rows = sweeps.list_sweeps(session, user, limit, states=states)
        return [sweep_out(s) for s in rows]


@router.get("/{sweep_id}", response_model=SweepOut, summary="Get a sweep with its trials")
def get_sweep(sweep_id: str, user: Caller, state: State) -> dict[str, Any]:
    """One sweep, its trials (parameters, state, best value of the metric) and the best."""
    checked_name(sweep_id, "sweep")
    with state.db.read_session() as session:
        sweep = sweeps.get(session, sweep_id, user)
        return sweep_out(sweep, sweeps.results(session, sweep))


@router.post("/{sweep_id}/cancel", response_model=SweepOut, summary="Cancel a sweep")
def cancel_sweep(sweep_id: str, user: Caller, state: State) -> dict[str, Any]:
    """Cancel a sweep's unfinished trials (finished trials keep their results; a running
    sweep ends CANCELLED, an ended one keeps its state); 409 when nothing is left."""
    checked_name(sweep_id, "sweep")
    with state.db.session() as session:
        sweep = sweeps.cancel(session, sweep_id, user)
        out = sweep_out(sweep, sweeps.results(session, sweep))
    if state.wake is not None:
        state.wake()
    return out
