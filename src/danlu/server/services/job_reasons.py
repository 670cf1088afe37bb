"""Why a job is where it is (:func:`why`, :func:`end_reasons`; a launch refused as other jobs'
runs still hold its GPUs: :func:`busy_reason`), and the jobs whose limits call for a stop
(:func:`expired`, :func:`over_time`) or whose cancellation waits for the reconcile loop
(:func:`cancellations`). Re-exported by :mod:`danlu.server.services.jobs`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from sqlalchemy import case, func, select, update
from sqlalchemy.orm import Session

from danlu.core.cluster import MILLI_PER_GPU
from danlu.core.state import JobState
from danlu.core.units import format_bytes, format_duration
from danlu.server.db.models import Gpu, Job, JobEvent, Node, Project
from danlu.server.services import dependencies
from danlu.server.services.cluster import ABSENT, over_committed
from danlu.server.services.common import resolve_now
from danlu.server.services.projects import HOLDING

NODE_FAULT = "the node could not launch it"
"""How the reason of a launch that failed for the node's reasons begins
(:func:`~danlu.server.services.jobs.requeue_unlaunched`)."""
CHECKPOINT_DIR_FAULT = "the control plane could not make its checkpoint directory"
"""How the reason of a launch begins that the control plane did not make, as it could not
make the job's checkpoint directory
(:func:`~danlu.server.services.jobs.requeue_unlaunched`): no node is to blame."""
PARTITION_CLOSED = "its partition takes no job"
"""How the reason of a launch begins that the cluster refused as its partition takes no job
now (:class:`~danlu.executors.PartitionClosedError`: Slurm's partition drained, inactive or
down, or gone): no node is to blame, and the error names the partition and its state."""
UNLAUNCHED_CAUSES = (NODE_FAULT, CHECKPOINT_DIR_FAULT, PARTITION_CLOSED)
"""The reasons a job is re-queued without a launch begin with (:func:`why` tells its
backoff with the reason)."""
UNREACHED = "not launched: the cluster cannot be reached"
"""How the ``pending_reason`` of a RUNNING job begins whose launch the executor could not make
as it cannot reach its cluster (:class:`~danlu.executors.ExecutorUnavailableError`: Slurm's
controller down): placed, it keeps its GPUs and its launch is tried at every pass; the
reason is cleared once the launch goes through (:mod:`~danlu.server.launching`)."""
LIMIT_STOPS = ("deadline passed", "time limit reached")
"""How the cancel reasons of a deadline's and a time limit's stops begin (:func:`expired`,
:func:`over_time`): such a stop gives the job its preemption grace to checkpoint."""
NOT_LAUNCHED = Job.launched_attempt.is_not(None) & (Job.launched_attempt < Job.attempt)
"""The SQL of :func:`not_launched`: the jobs whose current run the executor has not taken."""
WAITS_FOR_LAUNCH = NOT_LAUNCHED & Job.moved_from.is_(None)
"""The SQL of :func:`waits_for_launch`."""


def not_launched(job: Job) -> bool:
    """Whether the executor has not taken the launch of ``job``'s current run
    (``launched_attempt`` below ``attempt``): it holds its GPUs but runs nothing yet (it waits
    for GPUs another run still holds), so no energy is charged to it, and a stop before its
    launch charges it no GPU-hours. Each new run of a job sets ``launched_attempt`` to 0 while
    it was null (:func:`~danlu.server.services.jobs._new_attempt`), so a null one is a run
    recorded before the column (migration 0032) whose launch is not known: counted as
    launched, as it was before."""
    return job.launched_attempt is not None and job.launched_attempt < job.attempt


def waits_for_launch(job: Job) -> bool:
    """Whether no run of ``job`` runs while it holds GPUs: its current run is not launched
    (:func:`not_launched`) and no run a move left still stops (``moved_from`` null). Its
    wait counts toward neither its ``time_limit`` nor its GPU-hours: its run's clock
    starts at its launch (which moves ``last_start`` to then), and a stop before that
    charges it nothing. A run a move left goes on while the new one waits: that wait
    counts (the new run's stretch begins at the move)."""
    return not_launched(job) and job.moved_from is None


def run_time_at(job: Job, t: float) -> float:
    """Seconds ``job``'s runs have run by ``t``, toward its ``time_limit``: those ended
    (``run_time``) and the current one since its start, unless it waits for its launch
    (:func:`waits_for_launch`). :func:`over_time` counts the same in SQL."""
    ran = job.run_time
    if job.state in HOLDING and job.last_start is not None and not waits_for_launch(job):
        ran += max(0.0, t - job.last_start)
    return ran


def expired(session: Session, now: float | None = None) -> list[tuple[str, str]]:
    """The unfinished jobs whose deadline has passed and that are not being cancelled yet,
    in submission order: each job's id and the reason to cancel it with."""
    t = resolve_now(now)
    query = select(Job.id, Job.deadline_at, Job.submitted_at).where(  # ix_jobs_state_deadline_at
        Job.state.in_([s.value for s in JobState if not s.terminal]),
        Job.deadline_at <= t,
        Job.cancel_requested_at.is_(None),
    )
    rows = session.execute(query.order_by(Job.seq)).all()
    return [
        (
            job_id,
            f"{LIMIT_STOPS[0]}: not finished {_seconds(deadline - submitted)} after submission",
        )
        for job_id, deadline, submitted in rows
        if deadline is not None  # always: the query compares it
    ]


def _seconds(span: float) -> str:
    """``span`` as ``Ns`` to the millisecond, never in exponent form (``:g`` wrote a 14-day
    deadline as ``1.2096e+06s``): what the deadline's reason says (docs/api.md)."""
    return f"{round(span, 3):.15g}s"


def over_time(session: Session, now: float | None = None) -> list[tuple[str, str]]:
    """The unfinished jobs that have held GPUs for their ``time_limit`` (the runs ended so
    far plus the current one since its launch: :func:`run_time_at`) and that are not being
    cancelled yet, in submission order: each job's id and the reason to cancel it with. A
    queued job whose runs already used the whole limit (re-queued by a preemption just
    before it) is among them."""
    t = resolve_now(now)
    running = Job.state.in_(HOLDING) & Job.last_start.is_not(None) & ~WAITS_FOR_LAUNCH
    # a start after ``t`` (the wall clock set back since) adds 0, as in run_time_at: a
    # negative span took the earlier runs' time off, and the job ran past its limit
    current = case((running & (Job.last_start < t), t - Job.last_start), else_=0.0)
    used = Job.run_time + current
    query = select(Job.id, Job.time_limit, used).where(  # ix_jobs_state_time_limit
        Job.state.in_([s.value for s in JobState if not s.terminal]),
        Job.time_limit.is_not(None),
        Job.cancel_requested_at.is_(None),
        used >= Job.time_limit,
    )
    rows = session.execute(query.order_by(Job.seq)).all()
    return [
        (job_id, f"{LIMIT_STOPS[1]}: ran {format_duration(ran)} of {format_duration(limit)}")
        for job_id, limit, ran in rows
        if limit is not None  # always: the query compares it
    ]


def shift_clocks(session: Session, step: float, before: float) -> int:
    """Move the times that measure a span from the past by ``step`` seconds, after the wall
    clock jumped by that much (:class:`~danlu.server.loops.ClockSteps`), so that the jump
    counts as no time: the holding jobs' ``last_start`` (their current run's time toward
    ``time_limit``, their GPU-hours and recent usage keep what they had, neither ended
    early by a step forward nor run past the limit after one back) and the backoff of the
    jobs still waiting for it at ``before`` (the last reading before the jump:
    ``next_attempt_at``, so that a clock set back an hour holds none back an hour more).
    Deadlines are wall-clock times and stay. Core UPDATEs that leave ``version``; returns
    the rows moved."""
    values = {"last_start": Job.last_start + step}
    moved = session.execute(
        update(Job)
        .where(Job.state.in_(HOLDING), Job.last_start.is_not(None))
        .values(values)
        .execution_options(synchronize_session=False)
    )
    backoff = session.execute(
        update(Job)
        .where(Job.state == JobState.PENDING.value, Job.next_attempt_at > before)
        .values(next_attempt_at=Job.next_attempt_at + step)
        .execution_options(synchronize_session=False)
    )
    return int(getattr(moved, "rowcount", 0) or 0) + int(getattr(backoff, "rowcount", 0) or 0)


def cancellations(session: Session) -> list[Job]:
    """Jobs holding GPUs whose cancellation was requested (for the reconcile loop)."""
    query = select(Job).where(Job.state.in_(HOLDING), Job.cancel_requested_at.is_not(None))
    return list(session.scalars(query.order_by(Job.seq)))


MOVED = "moved by the scheduler to other GPUs (a resize or a re-packing)"
"""What :func:`stop_reason` says of the run a move (:func:`~danlu.server.services.jobs.resize`)
stops: the job runs on, relaunched from its checkpoint on its new GPUs."""


def stop_reason(session: Session, job: Job) -> str | None:
    """Why the control plane is stopping ``job``'s run now, in the words its log line gives
    (danlu.train asks on its SIGTERM, with the run's token, and logs ``stop requested
    (REASON)``): the reason of its cancellation (``cancelled by alice``, its ``deadline``'s or
    ``time_limit``'s: :data:`LIMIT_STOPS`, a sweep's stop), else of its preemption (the reason
    of its newest edge into PREEMPTING, ``preempted: `` before it unless it says so: a
    policy's, a drain's, a hold's), else :data:`MOVED` while the run a move left still
    stops (``moved_from``). Each is recorded before the run is signalled. None when the
    control plane is stopping no run of the job (a SIGTERM from elsewhere: a host shutting
    down, a ``kill``, Slurm's own time limit), and for a job that holds no GPUs."""
    if job.state not in HOLDING:
        return None
    if job.cancel_requested_at is not None:
        return job.cancel_reason or "cancelled"
    if job.state == JobState.PREEMPTING.value:
        said = session.scalar(
            select(JobEvent.reason)
            .where(JobEvent.job_id == job.id, JobEvent.new == JobState.PREEMPTING.value)
            .order_by(JobEvent.id.desc())
            .limit(1)
        )
        if not said:
            return "preempted"
        return said if "preempt" in said.lower() else f"preempted: {said}"
    if job.moved_from is not None:
        return MOVED
    return None


def why(session: Session, job: Job, now: float | None = None) -> str:
    """Explain in one sentence why ``job`` is where it is (mainly: why it is pending); a
    pending job names the nodes closed to new work, a running one each of its GPUs whose
    jobs hold more memory than the inventory now gives it (:func:`over_committed`), and an
    unfinished job with a deadline says when it will be cancelled. A RUNNING job says
    ``running on n1:0`` only once its current run is launched; before, ``placed on n1:0``
    and why nothing runs yet (:func:`_unlaunched`)."""
    t = resolve_now(now)
    reason = _why(session, job, t)
    if job.state == JobState.PENDING.value:
        # not nodes or GPUs gone from the inventory (their rows kept for an admin's close):
        # nothing is scheduled there anyway
        query = (
            select(Node.name)
            .where(Node.cordoned_at.is_not(None), Node.position != ABSENT)
            .order_by(Node.position)
        )
        closed = list(session.scalars(query.limit(_NAMED_NODES + 1)))
        gpus = (
            select(Node.name, Gpu.index)
            .join(Gpu, Gpu.node_id == Node.id)
            .where(Gpu.cordoned_at.is_not(None), Node.cordoned_at.is_(None))
            .where(Node.position != ABSENT, Gpu.memory != ABSENT)
            .order_by(Node.position, Gpu.index)
        )
        closed += [f"{n} GPU {i}" for n, i in session.execute(gpus.limit(_NAMED_NODES + 1))]
        if closed:
            names = ", ".join(closed[:_NAMED_NODES]) + (
                ", ..." if len(closed) > _NAMED_NODES else ""
            )
            reason += f"; cordoned (no new work): {names}"
    if job.state in HOLDING:
        for gpu in over_committed(session):
            if job.id in gpu.jobs:
                reason += f"; {gpu.describe()} (the inventory reported it smaller): {_OVER}"
    if job.deadline_at is not None and not JobState(job.state).terminal:
        left = job.deadline_at - t
        reason += f"; cancelled at its deadline in {left:.0f}s" if left > 0 else "; deadline passed"
    if job.time_limit is not None and not JobState(job.state).terminal:
        left = job.time_limit - run_time_at(job, t)
        reason += (
            f"; {format_duration(left)} left of its time limit of {format_duration(job.time_limit)}"
            if left > 0
            else "; time limit reached"
        )
    return reason


def end_reasons(session: Session, jobs: Iterable[Job]) -> dict[str, str]:
    """Why each of ``jobs`` that ended (SUCCEEDED, FAILED, CANCELLED) ended, by job id: the
    reason of its newest event into the state it is in; one query for them all. A job whose
    ending event says nothing is left out."""
    ended = [job.id for job in jobs if JobState(job.state).terminal]
    if not ended:
        return {}
    newest = (
        select(func.max(JobEvent.id))
        .join(Job, (Job.id == JobEvent.job_id) & (Job.state == JobEvent.new))
        .where(JobEvent.job_id.in_(ended))
        .group_by(JobEvent.job_id)
    )
    rows = session.execute(select(JobEvent.job_id, JobEvent.reason).where(JobEvent.id.in_(newest)))
    return {job_id: reason for job_id, reason in rows if reason}


_OVER = "it runs on, nothing new is placed there until they hold no more than it has"
"""What :func:`why` says of a running job's GPU that is over-committed."""

_NAMED_NODES = 5
"""Cordoned nodes :func:`why` names at most."""


def _why(session: Session, job: Job, t: float) -> str:
    """:func:`why` without the deadline."""
    state = JobState(job.state)
    if state is JobState.PENDING and job.held_at is not None:
        return f"{job.pending_reason or 'held'}: not scheduled until released (danlu release)"
    if state is JobState.PENDING and job.waiting_on is not None:
        return dependencies.explain(session, job)
    if state is JobState.PENDING:
        if job.next_attempt_at is not None and job.next_attempt_at > t:
            wait = f"eligible again in {job.next_attempt_at - t:.0f}s"
            if job.pending_reason and job.pending_reason.startswith(UNLAUNCHED_CAUSES):
                return f"{job.pending_reason}; {wait}"
            return f"backing off after restart {job.restarts}: {wait}"
        # the policy's reason says what holds it back: the order it ranks the queue in is
        # its own (priorities, aging, fair shares), not the order of submission
        return job.pending_reason or "waiting for the next scheduling round"
    if state.value in HOLDING:
        where = ", ".join(
            f"{s['node']}:{s['gpu']}"
            + (f" ({format_bytes(s['memory'])})" if int(s["milli"]) < MILLI_PER_GPU else "")
            for s in job.allocation or ()
        )
        verb = "running" if state is JobState.RUNNING else "checkpointing before re-queue"
        said = f"{verb} on {where or 'no GPUs'}"
        if not_launched(job) and (job.pending_reason or "").startswith(UNREACHED):
            said = f"{job.pending_reason}; placed on {where or 'no GPUs'}"  # nothing runs
        elif state is JobState.RUNNING and not_launched(job):
            said = _unlaunched(session, job, where or "no GPUs")
        elif waits_for_launch(job):  # stopped before its launch: nothing ran to checkpoint
            said = f"placed on {where or 'no GPUs'}, {STOPPED_UNLAUNCHED}"
        extra = "; cancellation requested" if job.cancel_requested_at is not None else ""
        if job.held_at is not None and not extra:  # a stopping one is preempted already
            stop = "" if state is JobState.PREEMPTING else "preempted by checkpoint next round, "
            extra = f"; held: {stop}it waits until released"
        return f"{said}{extra}"
    if state is JobState.RESTARTING:
        return f"restarting after a failure (restart {job.restarts})"
    last = session.scalar(
        select(JobEvent.reason).where(JobEvent.job_id == job.id).order_by(JobEvent.id.desc())
    )
    said, ended = last or "finished", state.value.lower()
    # "failed (exit code 3)" says the state already: not "failed: failed (exit code 3)"
    return said if said.lower().startswith(ended) else f"{ended}: {said}"


LAUNCHING = "launching"
"""What :func:`why` says after ``placed on GPUS, `` of a RUNNING job whose run is not
launched yet (:func:`not_launched`) when nothing known holds it back: the executor's next
pass launches it."""
NOT_LAUNCHED_YET = "not launched yet"
"""What :func:`why` says after ``placed on GPUS, `` of a RUNNING job whose run is not
launched yet while a run it waits for is known: ``: moved, waiting for ...`` or ``: waiting
for job X to free n1:0``."""
WAITING_FOR_RUNS = f"{NOT_LAUNCHED_YET}: waiting for "
"""How the ``pending_reason`` begins of a RUNNING job whose launch the executor refused as
runs of other jobs still hold some of its GPUs (:func:`busy_reason`); cleared once its launch
goes through (:mod:`~danlu.server.launching`)."""
STOPPED_UNLAUNCHED = (
    "not launched: stopped before its launch, nothing ran to checkpoint (its GPUs are freed "
    "at the next pass)"
)
"""What :func:`why` says after ``placed on GPUS, `` of a PREEMPTING job whose run was never
launched (:func:`waits_for_launch`: preempted, held or cancelled before its launch): the next
pass settles it with no run to wait for."""


def _unlaunched(session: Session, job: Job, where: str) -> str:
    """Why RUNNING ``job``, placed on ``where``, runs nothing yet (:func:`not_launched`; not
    for a cluster that cannot be reached: its ``pending_reason`` says that). The launch step
    (:mod:`~danlu.server.launching`) launches a moved job's new run once the run the move
    left has exited (``moved_from``), and any run once no other job's run still holds one of
    its GPUs (the executor's :class:`~danlu.executors.GpusBusyError`): the stopping jobs
    whose stored allocation shares a GPU with ``job``'s are named
    (:func:`_stopping_holders`), else those the executor named when it last refused the
    launch (its ``pending_reason``: :func:`busy_reason`), which include a run the store
    records on no GPU (one that another job's move left, stopping within its grace). Else,
    as between the placement and the executor's next pass, it says ``launching``."""
    placed = f"placed on {where}"
    if job.moved_from is not None:
        return f"{placed}, {NOT_LAUNCHED_YET}: moved, waiting for the run it left to exit"
    holders = _stopping_holders(session, job)
    if not holders:
        told = job.pending_reason or ""
        return f"{placed}, {told if told.startswith(WAITING_FOR_RUNS) else LAUNCHING}"
    return f"{placed}, {WAITING_FOR_RUNS}{_freeing(holders)}"


def _freeing(holders: list[tuple[str, list[str]]]) -> str:
    """``holders`` (each job as :func:`_holder_name` names it, with the GPUs it holds) as
    ``job X to free n1:0 and job Y to free n1:1``, the first :data:`_NAMED_NODES` of them."""
    named = [f"{held} to free {', '.join(gpus)}" for held, gpus in holders[:_NAMED_NODES]]
    more = len(holders) - len(named)
    return " and ".join(named) + (f" and {more} more job(s)" if more else "")


def _holder_name(job: Job, other_id: str, other_user_id: int, other_project: str) -> str:
    """How a reason given to ``job`` names another job that holds its GPUs: ``job ID`` when
    its owner owns that one too, else by its project (``a job of project vision``), never
    by an id the owner may not see, as the scheduler's reasons name other jobs
    (:func:`~danlu.sched.policies.waiting.job_of_project`)."""
    if other_user_id == job.user_id:
        return f"job {other_id}"
    return f"a job of project {other_project}"


def busy_reason(session: Session, job: Job, holders: Mapping[str, Sequence[str]]) -> str | None:
    """The ``pending_reason`` of RUNNING ``job`` whose launch the executor refused as the
    live runs of other jobs still hold some of its GPUs (:class:`~danlu.executors.GpusBusyError`):
    ``holders``, each job's id with those GPUs (``n1:0``). ``not launched yet: waiting for
    job X to free n1:0``, each job named by :func:`_holder_name` (one the store does not have
    as ``a job this control plane does not know``); the run may be one the store records on
    no GPU, as one a move left. None when ``holders`` is empty (the executor named none)."""
    if not holders:
        return None
    query = (
        select(Job.id, Job.user_id, Project.name)
        .join(Project, Project.id == Job.project_id)
        .where(Job.id.in_(list(holders)))
    )
    known = {held: (user_id, project) for held, user_id, project in session.execute(query)}
    named: list[tuple[str, list[str]]] = []
    for held in sorted(holders, key=lambda held: (sorted(holders[held]), held)):
        owner = known.get(held)
        name = (
            _holder_name(job, held, *owner)
            if owner is not None
            else "a job this control plane does not know"
        )
        named.append((name, list(holders[held])))
    return f"{WAITING_FOR_RUNS}{_freeing(named)}"


def _stopping_holders(session: Session, job: Job) -> list[tuple[str, list[str]]]:
    """The other jobs with a launched run being stopped (PREEMPTING, or a cancellation or a
    limit's stop requested) whose stored allocation shares a GPU with ``job``'s, in
    submission order, each named by :func:`_holder_name` with those GPUs (``n1:0``): a memory
    share placed beside a stopping one waits for it to exit
    (:func:`~danlu.executors.base.busy_gpus`). One query for the few stopping jobs."""
    mine = list(dict.fromkeys((str(s["node"]), int(s["gpu"])) for s in job.allocation or ()))
    if not mine:
        return []
    stopping = (Job.state == JobState.PREEMPTING.value) | (
        (Job.state == JobState.RUNNING.value) & Job.cancel_requested_at.is_not(None)
    )
    query = (
        select(Job.id, Job.user_id, Project.name, Job.allocation)
        .join(Project, Project.id == Job.project_id)
        .where(Job.state.in_(HOLDING), stopping, ~NOT_LAUNCHED, Job.id != job.id)
    )
    holders: list[tuple[str, list[str]]] = []
    for held, user_id, project, allocation in session.execute(query.order_by(Job.seq)):
        theirs = {(str(s["node"]), int(s["gpu"])) for s in allocation or ()}
        shared = [gpu for gpu in mine if gpu in theirs]  # in the order of job's allocation
        if shared:
            name = _holder_name(job, held, user_id, project)
            holders.append((name, [f"{node}:{gpu}" for node, gpu in shared]))
    return holders
