"""The ``danlu`` policy's last step: the plan for the GPU counts it chose (gangs placed on
the free GPUs, preempts, rebatches, the marks it writes), and the names of those marks.

A value-type split from :mod:`danlu.sched.policies.danlu` (the round), which calls
:func:`place_plan` with its knobs in a :class:`PlaceKnobs`, places the shares on what that
plan leaves, keeps the jobs it preempted for nothing (:func:`keep_unused`) and marks the
ones it still preempts (:func:`mark_stopped`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from danlu.core.cluster import Allocation
from danlu.sched.placement.gang import FreeMap
from danlu.sched.policies import danlu_loan as dl
from danlu.sched.policies import danlu_model as dm
from danlu.sched.policies.danlu_alloc import Option
from danlu.sched.policies.danlu_share import carry_out
from danlu.sched.policies.waiting import NO_GPU_ASKED, asks_no_gpu, why_not
from danlu.sched.view import ClusterView, JobStatus, Plan, Preempt, Rebatch, Resize, Start

BATCH = "danlu.batch"
"""The global batch the policy chose for the job."""
LR_FACTOR = "danlu.lr_factor"
"""The AdaScale learning-rate factor that batch implies (on the LR tuned at ``init_batch``)."""
LR_RULE = "danlu.lr_rule"
ADASCALE_RULE = 3.0
"""``danlu.lr_rule``'s value for AdaScale."""
MOVES = "danlu.moves"
"""How many times the policy moved the job (resizes and resumes after a preemption)."""
GREW_FROM = "danlu.grew"
"""The GPU count a running job had before it last grew (0: its last move was no growth)."""
STOPPED = "danlu.stopped"
"""When the policy last preempted the job: its wait for the starvation rule starts there."""
PROMOTED = "danlu.promoted"
"""When the starvation rule last started the job: it is held for ``starve_hold`` seconds
from there."""
OUTRANKED = "shorter-ranked jobs need its GPUs"


@dataclass(frozen=True, slots=True)
class PlaceKnobs:
    """The policy knobs :func:`place_plan` reads (see :class:`DanluPolicy`'s fields)."""

    placement: str
    adaptive_jobs: bool
    loan_rule: bool
    loan_weight: float


def is_adaptive(job: JobStatus, adaptive_jobs: bool) -> bool:
    """Whether ``job`` runs with in-process batch adaptation (``adaptive_jobs`` knob on)."""
    return adaptive_jobs and bool(job.observed.get("adaptive"))


def place_plan(
    view: ClusterView,
    jobs: list[JobStatus],
    first: int,
    options: list[list[Option]],
    chosen: list[int],
    marks: dict[str, dict[str, float]],
    knobs: PlaceKnobs,
    promoted: Collection[str] = (),
    reserve: int = 0,
) -> Plan:
    """The plan for the chosen options: ``chosen[j]`` is the index in ``options[j]`` of job
    ``jobs[j]``'s option, or -1 (``jobs[:first]`` run now: -1 preempts them; the others
    wait: -1 leaves them waiting). Gangs are placed biggest first on the GPUs left free (a
    job that cannot be placed at its option tries its smaller ones), the marks to write are
    added to ``marks`` (by job id); the waiting jobs in ``promoted`` (by id) that start are
    marked :data:`PROMOTED`; the preempted jobs are not marked yet (:func:`mark_stopped`).

    A running job at -1 is preempted only when a start or resize takes one of its GPUs, or
    when keeping it would leave fewer than ``reserve`` whole GPUs free (the walk's room for
    the starving shares placed after this plan; :func:`keep_unused` keeps it once they are
    placed, if none went on its GPUs): the walk counts GPUs, not where they are, so the move
    it made room for may not fit (a GPU type or memory the free GPUs lack, a shape they
    cannot hold), and preempting the job would only idle its GPUs."""
    free = FreeMap(view, knobs.placement)
    moves: list[tuple[JobStatus, list[Option], int]] = []
    victims: list[JobStatus] = []
    preempts: list[Preempt] = []
    rebatches: list[Rebatch] = []
    waiting: dict[str, str] = {}
    for j in range(first):
        job, opts, k = jobs[j], options[j], chosen[j]
        if k >= 0 and opts[k].keep:
            continue
        if k >= 0 and opts[k].in_place:
            _rebatch(job, opts[k], marks, rebatches, knobs.adaptive_jobs)
            continue
        free.release(job.allocation)
        if k >= 0:
            moves.append((job, opts, k))
        else:
            victims.append(job)
    picked = [j for j in range(first, len(jobs)) if chosen[j] >= 0]
    moves += [(jobs[j], options[j], chosen[j]) for j in picked]
    outranked = len(jobs) - first - len(picked)
    moves.sort(key=lambda m: (-m[1][m[2]].gpus, m[0].request.seq))
    starts: list[Start] = []
    resizes: list[Resize] = []
    for job, opts, k in moves:
        alloc: Allocation | None = None
        option = opts[k]
        for cand in range(k, -1, -1):
            if opts[cand].keep or opts[cand].in_place:
                continue
            option = opts[cand]
            alloc = free.place(job.request, option.gpus)
            if alloc is not None:
                break
        if alloc is None:
            if job.running:
                if free.can_take(job.allocation):
                    free.take(job.allocation)
                else:
                    preempts.append(Preempt(job.id, "no room after re-packing"))
            else:  # why its smallest option found no room (a GPU type none free has, too
                # few free: not always fragmentation), or that it asks for no GPU
                waiting[job.id] = why_not(free, job, option.gpus)
            continue
        note = marks.setdefault(job.id, {})
        if option.batch is not None:
            _note_batch(note, job, option.batch)
        adaptive = is_adaptive(job, knobs.adaptive_jobs)
        if job.running:
            note[MOVES] = job.marks.get(MOVES, 0.0) + 1
            grew = alloc.num_gpus > job.allocation.num_gpus
            if grew or job.marks.get(GREW_FROM):
                note[GREW_FROM] = float(job.allocation.num_gpus) if grew else 0.0
            if knobs.loan_rule:
                dl.record(job.marks, view.time, grew, knobs.loan_weight, note)
            resizes.append(Resize(job.id, alloc, option.batch, adaptive))
        else:
            if job.marks.get(GREW_FROM):
                note[GREW_FROM] = 0.0
            if job.preemptions or job.run_time:
                note[MOVES] = job.marks.get(MOVES, 0.0) + 1
            if job.id in promoted:
                note[PROMOTED] = view.time
            starts.append(Start(job.id, alloc, option.batch, adaptive))
    preempts += _displaced(free, victims, reserve)
    if outranked:  # a job asking for no GPU says so, not that others hold the GPUs (a
        # scan of the waiting jobs: 0.3 ms a round at 12,000)
        waiting.update((job.id, NO_GPU_ASKED) for job in jobs[first:] if asks_no_gpu(job))
    return Plan(
        starts=tuple(starts),
        preempts=tuple(preempts),
        resizes=tuple(resizes),
        rebatches=tuple(rebatches),
        waiting=waiting,
        waiting_default="shorter-ranked jobs hold the GPUs" if outranked else "",
        recheck_at=0.0,
        marks=marks,
    )


def keep_unused(view: ClusterView, plan: Plan) -> Plan:
    """``plan`` without the preempts of jobs the walk outranked (:data:`OUTRANKED`) whose
    GPUs none of its starts and resizes takes (the shares' starts included): those keep
    running. For a plan :func:`place_plan` preempted jobs in to leave room for starving
    shares, once the shares are placed."""
    victims = [p for p in plan.preempts if p.reason == OUTRANKED]
    if not victims:
        return plan
    running = {job.id: job for job in view.running}
    free = FreeMap(view)
    carry_out(free, plan, running)
    kept: set[str] = set()
    for p in victims:
        alloc = running[p.job_id].allocation
        if free.can_take(alloc):
            free.take(alloc)
            kept.add(p.job_id)
    if not kept:
        return plan
    preempts = tuple(p for p in plan.preempts if p.job_id not in kept)
    return dataclasses.replace(plan, preempts=preempts)


def mark_stopped(
    view: ClusterView, plan: Plan, running: Sequence[JobStatus], knobs: PlaceKnobs
) -> None:
    """Mark the jobs ``plan`` preempts (``running``: the round's movable jobs) in its marks:
    when they stopped (:data:`STOPPED`, where their wait for the starvation rule starts)
    and, with the loan rule, the end of their loans. Once the plan's preempts are final."""
    marks = plan.marks
    for p in plan.preempts:
        marks.setdefault(p.job_id, {})[STOPPED] = view.time
    if not knobs.loan_rule or not plan.preempts:
        return
    stopped = {p.job_id for p in plan.preempts}
    for job in (j for j in running if j.id in stopped):  # ends its loan too
        dl.record(job.marks, view.time, False, knobs.loan_weight, marks[job.id])


def _displaced(free: FreeMap, victims: list[JobStatus], reserve: int) -> list[Preempt]:
    """The preempts of the running ``victims`` (released on ``free``, the moves placed) whose
    GPUs a move took, or that ``reserve`` whole GPUs left free need; the others take their
    GPUs back on ``free`` and keep running (in order, while ``reserve`` allows)."""
    preempts: list[Preempt] = []
    for job in victims:
        alloc = job.allocation
        if free.can_take(alloc):
            free.take(alloc)
            if free.total_free >= reserve:
                continue
            free.release(alloc)
        preempts.append(Preempt(job.id, OUTRANKED))
    return preempts


def _rebatch(
    job: JobStatus,
    option: Option,
    marks: dict[str, dict[str, float]],
    out: list[Rebatch],
    adaptive_jobs: bool,
) -> None:
    """A batch-only change: the job keeps its GPUs and process (no restart, not a move)."""
    if option.batch is None or float(option.batch) == job.observed.get("batch_size"):
        return
    _note_batch(marks.setdefault(job.id, {}), job, option.batch)
    out.append(Rebatch(job.id, option.batch, is_adaptive(job, adaptive_jobs)))


def _note_batch(note: dict[str, float], job: JobStatus, batch: int) -> None:
    """Record a chosen global batch in the job's marks, with the LR factor it implies."""
    note[BATCH] = float(batch)
    note[LR_FACTOR] = dm.lr_factor(job.observed, job.marks, batch)
    note[LR_RULE] = ADASCALE_RULE
