"""Fair share between projects: the project furthest below its share starts its next job.

With one queue for everyone, a team that submits 500 jobs at once holds the cluster until
they are done, and a team that comes a minute later waits behind all of them. This policy
keeps one queue per project (``JobRequest.project``: the spec's ``project``) and, every time
it starts a job, gives the turn to the project with the lowest *standing*: the milli-GPUs it
holds at that moment (its running jobs plus what it started earlier in the round), plus its
recent usage when ``half_life`` is set, divided by its weight (ties go to the project whose
next job is older). Within a project, higher ``priority`` goes first, then submission order;
with ``users``, the project's GPUs are shared between its users the same way first (the
user holding the fewest of the project's GPUs starts their next job; ``JobRequest.user``).

Weights come from the view (:attr:`~danlu.sched.view.ClusterView.projects`: a project's
``share`` in the control plane, ``--project-share`` in the simulator; 1 by default): a
project of weight 2 takes turns until it holds twice what one of weight 1 holds. With
``half_life`` (seconds; 0, the default, keeps no history) a project's standing also counts
the GPUs it held in the past, a GPU-second ``half_life`` ago counting half as much as one
now (:mod:`danlu.sched.project_usage`), so a team that had the cluster to itself overnight
lets the others go first in the morning, as Slurm's decayed fair-share does.

By itself it equalises what each project *starts*: a project that took the whole cluster
while it was alone keeps it until its jobs end. With ``reclaim`` it also takes GPUs back, by
checkpoint: each project's fair share is its max-min share of the cluster (the GPUs split
among the projects that want them in proportion to their weights, a project wanting less
than its part leaving the rest to the others; a waiting job that could never start wants
none; history does not count here), and while a
project below its share has a job waiting, preemptible jobs of projects above theirs are
preempted to make room for it, youngest first, one waiting job per round. Neither side
crosses its share by it (the job started keeps its project within its share, each job
preempted keeps its project at or above its own), and only jobs that ran ``min_run``
seconds are preempted, so GPUs do not bounce between projects. With ``backfill`` (default)
a job that does not fit is passed by its project's next ones and by the other projects';
without it the first job that does not fit holds the queue, and with ``half_life`` the plan
is due again (``recheck_at``) when the decaying usage may let another project overtake the
blocked job's. Like every policy here it is a pure function of the view, so the simulator
runs it as the control plane does (a workload's ``project`` column names the projects).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from danlu.core.cluster import MILLI_PER_GPU
from danlu.sched.placement.drain import DrainingFree
from danlu.sched.placement.gang import FreeMap
from danlu.sched.placement.packing_memo import PackingMemo
from danlu.sched.policies.options import INF, OptionRange, check_options
from danlu.sched.policies.reservation import NeverFits, Shape, shape_of
from danlu.sched.policies.waiting import asks_no_gpu, job_of_project
from danlu.sched.share_size import least_share_milli
from danlu.sched.view import ClusterView, JobStatus, Plan, Preempt, Start


@dataclass(frozen=True)
class FairSharePolicy:
    """Start jobs project by project, the project holding the fewest GPUs first; with
    ``reclaim``, preempt over-share projects' jobs for under-share ones; see the module
    docstring. ``backfill=False``: the first job that does not fit stops the starts."""

    option_ranges: ClassVar[Mapping[str, OptionRange]] = {
        "min_run": (0.0, INF, (True, False)),
        "half_life": (0.0, INF, (True, False)),
    }
    """The numeric options' valid ranges, checked when the policy is built."""
    placement: str = "best-fit"
    _packing: PackingMemo = field(
        default_factory=PackingMemo, init=False, repr=False, compare=False
    )
    """What the ``fgd`` and ``danlu`` placements keep across rounds (the typical pods, the
    packing scorer)."""
    backfill: bool = True
    reclaim: bool = False
    min_run: float = 300.0
    """Seconds a job must have run in its current stretch before ``reclaim`` preempts it."""
    half_life: float = 0.0
    """Seconds after which past GPU use counts half in a project's standing; 0: no history."""
    users: bool = False
    """Within a project, the user holding the fewest of its GPUs goes first (else the
    project's jobs go by priority, then submission)."""
    name: str = "fair-share"

    def __post_init__(self) -> None:
        check_options(self, self.option_ranges)

    @property
    def usage_half_life(self) -> float:
        """The half-life of the recent usage adapters put in the view (0: none)."""
        return self.half_life

    def schedule(self, view: ClusterView) -> Plan:
        if not view.pending:
            return Plan(recheck_at=math.inf)
        held: dict[str, int] = {}
        for job in view.running:
            if job.id not in view.draining:  # on its way out: no longer its project's
                project = job.request.project
                held[project] = held.get(project, 0) + job.demand_milli
        drain = DrainingFree(FreeMap(view, self.placement, self._packing), view)
        starts, waiting, default, behind = self._starts(view, drain, held)
        preempts: tuple[Preempt, ...] = ()
        left_waiting = bool(waiting or default)
        recheck_at = math.inf
        if self.reclaim and left_waiting:
            # a waiting job may be made room for once a job has run min_run
            recheck_at = 0.0
            taken = self._reclaim(view, drain, held, {s.job_id for s in starts})
            if taken is not None:
                start, preempts = taken
                starts.append(start)
                waiting.pop(start.job_id, None)
        elif behind and self.half_life > 0:
            recheck_at = _overtaken_at(view, behind, starts, held, self.half_life)
        return Plan(
            starts=tuple(starts),
            preempts=preempts,
            waiting=waiting,
            waiting_default=default,
            recheck_at=recheck_at,
        )

    def _starts(
        self, view: ClusterView, drain: DrainingFree, held: dict[str, int]
    ) -> tuple[list[Start], dict[str, str], str, list[str]]:
        """Start jobs by turns while they fit; ``held`` is updated with what starts. Also
        returns, when a job that does not fit stopped the starts (no backfill), its project
        and then those with jobs left untried behind it (else an empty list)."""
        waiting_by_project: dict[str, list[JobStatus]] = {}
        for job in view.pending:
            waiting_by_project.setdefault(job.request.project, []).append(job)
        users: dict[tuple[str, str], int] | None = None
        if self.users:
            users = {}
            for job in view.running:
                if job.id not in view.draining:
                    key = (job.request.project, job.request.user)
                    users[key] = users.get(key, 0) + job.demand_milli
        lines = {p: _Line(p, jobs, users) for p, jobs in waiting_by_project.items()}
        turns: list[tuple[float, int, str]] = []
        for project, line in lines.items():
            turns.append((_standing(view, project, held), line.head_seq(), project))
        heapq.heapify(turns)
        starts: list[Start] = []
        waiting: dict[str, str] = {}
        default = ""
        never = NeverFits(view)
        while turns:
            if not drain.any_room():
                default = "no free GPUs"
                break
            _, _, project = heapq.heappop(turns)
            line = lines[project]
            job = line.take()
            alloc = drain.place(job.request)
            # what the start takes: a share sized by memory takes its part of the GPU's
            # compute, not the 1000 milli-GPU its request reads as
            taken = 0 if alloc is None else alloc.gpu_milli
            line.settle(job, taken)
            if alloc is not None:
                starts.append(Start(job.id, alloc))
                held[project] = held.get(project, 0) + taken
            else:
                waiting[job.id] = never.why_not(drain.now, job)
                if not self.backfill and not asks_no_gpu(job):  # one never starts: no block
                    default = f"queued behind {job_of_project(job)} (fair share, no backfill)"
                    return starts, waiting, default, [project, *(p for _, _, p in turns)]
            if line:
                turn = (_standing(view, project, held), line.head_seq(), project)
                heapq.heappush(turns, turn)
        return starts, waiting, default, []

    def _reclaim(
        self,
        view: ClusterView,
        drain: DrainingFree,
        held: dict[str, int],
        started: set[str],
    ) -> tuple[Start, tuple[Preempt, ...]] | None:
        """Preempt over-share jobs for the waiting job of the project furthest below its
        share that can be made room for (with backfill, a project's first such job in its
        own order; without, its first job or none); None when none can. Victims are
        released youngest first until the job fits; of those, only the ones whose GPUs it
        gets are preempted."""
        now = view.time
        # A job that could never start (more GPUs than the open cluster has, a GPU type none
        # has) wants nothing it could be given: counted, it raised its project's share by
        # GPUs the project could not use, cutting the others' shares (a project below its
        # share then waited beside GPUs held above theirs).
        never = NeverFits(view)
        waiting_jobs = sorted(
            (j for j in view.pending if j.id not in started and not never(j.request)),
            key=lambda j: (j.request.project, *_within_project(j)),
        )
        asks = {job.id: _least_taken(job, view) for job in waiting_jobs}
        demand = dict(held)
        for job in waiting_jobs:
            demand[job.request.project] = demand.get(job.request.project, 0) + asks[job.id]
        # what the projects can hold: not the free part of GPUs closed to new work (a
        # failed or cordoned node's), which no project can be given: counted, it was each
        # project's share too, and a project holding every open GPU stayed within its own
        total = view.cluster.total_gpus * MILLI_PER_GPU - drain.now.closed_free_milli()
        weights = {project: view.project(project).weight for project in demand}
        share = fair_shares(total, demand, weights)
        victims = sorted(
            (
                j
                for j in view.running
                if j.request.preemptible
                and j.id not in view.draining
                and j.last_start is not None
                and now - j.last_start >= self.min_run
            ),
            key=lambda j: (j.run_time_at(now), -j.request.seq),
        )
        lines: dict[str, list[JobStatus]] = {}
        for job in waiting_jobs:
            lines.setdefault(job.request.project, []).append(job)
        for project in sorted(lines, key=lambda p: held.get(p, 0) / max(share[p], 1.0)):
            # with backfill a project's later jobs may pass one that cannot be made room
            # for (one past its share, or of a GPU type no victim frees); without it, its
            # first job holds its line as it holds the queue
            tried: set[Shape] = set()  # what the placement reads of the requests refused
            for job in lines[project] if self.backfill else lines[project][:1]:
                if held.get(project, 0) + asks[job.id] > share[project]:
                    continue  # starting it would take the project past its share
                shape = shape_of(job.request)  # the same victims, the same placement
                if shape in tried:
                    continue
                taken = self._make_room(job, project, victims, drain, held, share)
                if taken is not None:
                    return taken
                tried.add(shape)
        return None

    @staticmethod
    def _make_room(
        job: JobStatus,
        project: str,
        victims: list[JobStatus],
        drain: DrainingFree,
        held: Mapping[str, int],
        share: Mapping[str, float],
    ) -> tuple[Start, tuple[Preempt, ...]] | None:
        """Release ``victims`` in order (each keeping its project at or above its share)
        until ``job`` fits; its start and the preemptions of those on its GPUs, or None."""
        room = (drain.soon or drain.now).copy()
        chosen: list[JobStatus] = []
        left = dict(held)
        for victim in victims:
            owner = victim.request.project
            if owner == project or left.get(owner, 0) - victim.demand_milli < share[owner]:
                continue
            room.release(victim.allocation)
            left[owner] -= victim.demand_milli
            chosen.append(victim)
            alloc = room.place(job.request) if room.could_fit_now(job.request) else None
            if alloc is not None:
                reason = f"fair share: GPUs reclaimed for {job_of_project(job)}"
                # Released while looking for room is not needed: only the victims on the
                # GPUs the job got are preempted, the others keep running.
                gpus = {(s.node, s.gpu) for s in alloc.shares}
                needed = [
                    v for v in chosen if any((s.node, s.gpu) in gpus for s in v.allocation.shares)
                ]
                return Start(job.id, alloc), tuple(Preempt(v.id, reason) for v in needed)
        return None


def fair_shares(
    total: int, demand: Mapping[str, int], weights: Mapping[str, float] | None = None
) -> dict[str, float]:
    """Weighted max-min fair shares of ``total`` among projects wanting ``demand`` each:
    the demands smallest for their weight are met in full, the rest split what is left in
    proportion to their weights (``weights``: 1 for a project missing, or for all)."""
    weight = weights or {}
    shares: dict[str, float] = {}
    left = float(total)
    ordered = sorted(demand, key=lambda p: (demand[p] / weight.get(p, 1.0), p))
    weight_left = sum(weight.get(p, 1.0) for p in ordered)
    for project in ordered:
        mine = weight.get(project, 1.0)
        part = min(float(demand[project]), left * mine / weight_left if weight_left > 0 else 0.0)
        shares[project] = part
        left -= part
        weight_left -= mine
    return shares


class _Line:
    """One project's waiting jobs in the order it starts them: by priority, then submission;
    with ``users`` (milli-GPUs held by (project, user)), its users take turns first, the
    one holding the fewest of the project's GPUs going next (ties: the older head job)."""

    def __init__(
        self, project: str, jobs: list[JobStatus], users: dict[tuple[str, str], int] | None
    ) -> None:
        self.project = project
        self.users = users
        self._queues: dict[str, deque[JobStatus]] = {}
        for job in sorted(jobs, key=_within_project):
            self._queues.setdefault(job.request.user if users is not None else "", deque()).append(
                job
            )
        self._turns = [
            (self._held(user), q[0].request.seq, user) for user, q in self._queues.items()
        ]
        heapq.heapify(self._turns)

    def _held(self, user: str) -> int:
        return 0 if self.users is None else self.users.get((self.project, user), 0)

    def __bool__(self) -> bool:
        return bool(self._turns)

    def head_seq(self) -> int:
        """The submission number of the job :meth:`take` gives next."""
        return self._turns[0][1]

    def take(self) -> JobStatus:
        """The next job (then :meth:`settle` it)."""
        _, _, user = heapq.heappop(self._turns)
        return self._queues[user].popleft()

    def settle(self, job: JobStatus, taken: int) -> None:
        """Count the milli-GPUs ``job``'s start has ``taken`` (0: it did not start) for its
        user, and give the user its next turn."""
        user = job.request.user if self.users is not None else ""
        if taken and self.users is not None:
            key = (self.project, user)
            self.users[key] = self.users.get(key, 0) + taken
        queue = self._queues[user]
        if queue:
            heapq.heappush(self._turns, (self._held(user), queue[0].request.seq, user))


def _standing(view: ClusterView, project: str, held: Mapping[str, int]) -> float:
    """What decides a project's turn, lowest first: the milli-GPUs it holds plus its recent
    usage, over its weight."""
    share = view.project(project)
    return (held.get(project, 0) + share.recent_milli) / share.weight


def _overtaken_at(
    view: ClusterView,
    behind: list[str],
    starts: list[Start],
    held: Mapping[str, int],
    half_life: float,
) -> float:
    """When the first project of ``behind`` (its next job blocks the queue: it does not fit)
    may first lose its turn to one of the others, as their recent usage decays; inf: never.

    Until a job arrives, ends or is cancelled, each project holds what it holds after this
    round, ``H`` (every running job's milli-GPUs, a draining one's too, plus those it
    started), and by the definition of recent usage (:mod:`danlu.sched.project_usage`) its
    recent usage ``r`` goes to ``H`` as ``H + (r - H) x``, where ``x = 2 ** (-age /
    half_life)`` falls from 1 to 0. So every standing is ``a + b x`` (``a = (held + H) /
    weight``, ``b = (r - H) / weight``), and a rival overtakes at the ``x`` where the two
    lines meet: only the rivals whose limit ``a`` is below the blocked project's do.
    Before that the round tries the same blocked job first and starts nothing (a job that
    did not fit still does not: the free GPUs only change with the jobs), so the rounds up
    to it may be skipped. The time is a microsecond early, so that rounding never makes it
    late; a round asked then that finds the turn unchanged gives the time again."""
    holding: dict[str, int] = {}
    for job in view.running:
        project = job.request.project
        holding[project] = holding.get(project, 0) + job.allocation.gpu_milli
    if starts:
        projects = {job.id: job.request.project for job in view.pending}
        for start in starts:
            project = projects[start.job_id]
            holding[project] = holding.get(project, 0) + start.allocation.gpu_milli

    def line(project: str) -> tuple[float, float]:
        share = view.project(project)
        target = holding.get(project, 0)
        limit = (held.get(project, 0) + target) / share.weight
        return limit, (share.recent_milli - target) / share.weight

    blocked_limit, blocked_slope = line(behind[0])
    soonest = math.inf
    for rival in behind[1:]:
        limit, slope = line(rival)
        ahead = blocked_limit - limit  # how far below the blocked project's the rival ends
        if ahead <= 0:
            continue
        # the lines meet at x = ahead / (slope - blocked_slope); x >= 1: it is level now
        gap = slope - blocked_slope
        x = ahead / gap if gap > ahead else 1.0
        soonest = min(soonest, view.time + half_life * -math.log2(x))
    return soonest - 1e-6


def _least_taken(job: JobStatus, view: ClusterView) -> int:
    """The least milli-GPUs the waiting ``job``'s start takes: a share sized by memory its
    part of the largest GPU it may use, not the 1000 its request reads as (counted as a
    whole GPU, a share of 8 GiB past its project's fair share of 0.1 GPU was never made
    room for)."""
    if job.demand_milli >= MILLI_PER_GPU and job.request.shares_gpu:
        return least_share_milli(job.request, view.cluster)
    return job.demand_milli


def _within_project(job: JobStatus) -> tuple[int, int, str]:
    """A project's own order: higher priority first, then submission."""
    req = job.request
    return (-req.priority, req.seq, req.id)
