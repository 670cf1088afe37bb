"""Which waiting jobs fail once a simulation is stuck (:class:`StuckRule`).

The engine is stuck when nothing runs, no job is left to arrive and the policy starts
nothing (at once when its plan cannot change with time, else after
``SimConfig.idle_retries`` idle rounds). A job the policy never starts may hold back the
ones queued behind it (strict fifo's head-of-line blocking, or a policy that sizes jobs and
never starts a profiled one), so the rule fails as few jobs as it can and lets the run go on:

1. the waiting jobs that could not be placed even on the idle cluster (more GPUs than it
   has, or than it has of the memory they ask per GPU): all of them; when others are left,
   the run goes on;
2. else (every waiting job would fit the idle cluster: the policy holds them back) the
   first in submission order, the head of the queue: the run goes on without it;
3. the last resort, when the head failed in vain (no job started since a head failed):
   every waiting job fails and the run ends.

Each stuck point fails at least one job, so the run ends; the choice depends only on the
queue (in submission order) and the cluster, so a seed gives the same run.
"""

from __future__ import annotations

from collections.abc import Sequence

from danlu.core.cluster import Cluster
from danlu.sched.policies.reservation import NeverFits
from danlu.sched.view import ClusterView
from danlu.sim.simjob import SimJob

CANNOT_PLACE = "could not be placed even on an idle cluster"
"""The reason of a job no idle GPUs could hold, and of every job failed as the last resort."""
HEAD_HELD = (
    f"{CANNOT_PLACE} (the policy started nothing while it waited first in the queue; "
    "the jobs behind it went on without it)"
)
"""The reason of the head of a queue the policy held back on an idle cluster."""


class StuckRule:
    """Chooses the waiting jobs that fail at a stuck point (the module docstring's rule)."""

    def __init__(self, cluster: Cluster) -> None:
        self._cluster = cluster
        self._head_may_fail = True
        """False from a head's failure until the next start: another stuck point then is
        the last resort."""

    def started(self) -> None:
        """A job started: the next stuck point may fail the queue's head alone again."""
        self._head_may_fail = True

    def choose(self, waiting: Sequence[SimJob], now: float) -> list[tuple[SimJob, str]]:
        """The jobs of ``waiting`` (in submission order) that fail at a stuck point at
        ``now``, each with its reason; every one of them when the run is to end."""
        total = self._cluster.total_gpus
        never = NeverFits(ClusterView(now, self._cluster))
        failing: list[tuple[SimJob, str]] = []
        for job in waiting:
            gpus = job.request.gpus
            if gpus > total:  # a profiled job a policy that sizes jobs ran at its request
                reason = f"asks for {gpus} GPUs; the cluster has {total}"
                failing.append((job, f"{reason} (the policy ran it at its request)"))
            elif never(job.request):
                failing.append((job, CANNOT_PLACE))
        if failing or not waiting:
            return failing
        if self._head_may_fail and len(waiting) > 1:
            self._head_may_fail = False
            return [(waiting[0], HEAD_HELD)]
        return [(job, CANNOT_PLACE) for job in waiting]
