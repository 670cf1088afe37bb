"""Fair share between projects: the project holding the fewest GPUs starts its next job.

With one queue for everyone, a team that submits 500 jobs at once holds the cluster until
they are done, and a team that comes a minute later waits behind all of them. This policy
keeps one queue per project (``JobRequest.project``: the spec's ``project``) and, every time
it starts a job, gives the turn to the project that holds the fewest GPUs at that moment
(its running jobs plus what it started earlier in the round, in milli-GPU; ties go to the
project whose next job is older). Within a project, higher ``priority`` goes first, then
submission order. Projects have equal shares: set priorities or quotas on a project to
favour it or bound it.

It equalises what each project *starts*, and never preempts: a project that took the whole
cluster while it was alone keeps it until its jobs end (with ``DANLU_POLICY=danlu`` or
``priority``, preemption by checkpoint reclaims GPUs faster). With ``backfill`` (default) a
job that does not fit is passed by its project's next ones and by the other projects'.
Like every policy here it is a pure function of the view, so the simulator runs it as the
control plane does (a workload's ``project`` column names the projects).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from danlu.sched.placement.gang import FreeMap
from danlu.sched.policies.base import why_not
from danlu.sched.policies.options import OptionRange, check_options
from danlu.sched.view import ClusterView, JobStatus, Plan, Start


@dataclass(frozen=True)
class FairSharePolicy:
    """Start jobs project by project, the project holding the fewest GPUs first; see the
    module docstring. ``backfill=False``: the first job that does not fit stops the round."""

    option_ranges: ClassVar[Mapping[str, OptionRange]] = {}
    """The numeric options' valid ranges, checked when the policy is built."""
    placement: str = "best-fit"
    backfill: bool = True
    name: str = "fair-share"

    def __post_init__(self) -> None:
        check_options(self, self.option_ranges)

    def schedule(self, view: ClusterView) -> Plan:
        if not view.pending:
            return Plan(recheck_at=math.inf)
        held: dict[str, int] = {}
        for job in view.running:
            project = job.request.project
            held[project] = held.get(project, 0) + job.demand_milli
        queues: dict[str, list[JobStatus]] = {}
        for job in view.pending:
            queues.setdefault(job.request.project, []).append(job)
        turns: list[tuple[int, int, str]] = []
        lines: dict[str, deque[JobStatus]] = {}
        for project, jobs in queues.items():
            jobs.sort(key=_within_project)
            lines[project] = deque(jobs)
            turns.append((held.get(project, 0), jobs[0].request.seq, project))
        heapq.heapify(turns)
        free = FreeMap(view, self.placement)
        starts: list[Start] = []
        waiting: dict[str, str] = {}
        default = ""
        while turns:
            if free.total_free == 0 and not free.any_capacity():
                default = "no free GPUs"
                break
            _, _, project = heapq.heappop(turns)
            line = lines[project]
            job = line.popleft()
            alloc = free.place(job.request) if free.could_fit_now(job.request) else None
            if alloc is not None:
                starts.append(Start(job.id, alloc))
                held[project] = held.get(project, 0) + job.demand_milli
            else:
                waiting[job.id] = why_not(free, job)
                if not self.backfill:
                    default = f"queued behind {job.id} (fair share, no backfill)"
                    break
            if line:
                heapq.heappush(turns, (held.get(project, 0), line[0].request.seq, project))
        return Plan(
            starts=tuple(starts), waiting=waiting, waiting_default=default, recheck_at=math.inf
        )


def _within_project(job: JobStatus) -> tuple[int, int, str]:
    """A project's own order: higher priority first, then submission."""
    req = job.request
    return (-req.priority, req.seq, req.id)
