"""Which waiting jobs fail once a simulation is stuck (:class:`StuckRule`).

The engine is stuck when nothing runs, no job is left to arrive and the policy starts
nothing (at once when its plan cannot change with time, else after
``SimConfig.idle_retries`` idle rounds). A job the policy never starts may hold back the
ones queued behind it (strict fifo's head-of-line blocking, or a policy that sizes jobs and
never starts a profiled one), and the head of the policy's queue need not be the first job
submitted (priority, sjf, tiresias' queues and fair-share order the queue their own way).
The rule fails as few jobs as it can and lets the run go on; to find them it asks the
policy what it would start on the idle cluster with only some of the waiting jobs pending
(``schedule`` on such a view: a plan read, never carried out, nor counted as a round; a
policy is a function of its view, so asking changes none of its later plans):

1. the waiting jobs that could not be placed even on the idle cluster (more GPUs than it
   has, or than it has of the memory they ask per GPU): all of them;
2. else the jobs the policy would not start even alone on the idle cluster, with a plan
   that cannot change with time (``Plan.recheck_at`` infinite): all of them, as they could
   never start (two such jobs in a row both go, and the jobs behind them run);
3. else, when the policy would start no waiting job alone, neither here nor at the stuck
   point before (no job started since): every waiting job (it starts nothing, whatever
   fails, and time did not change that);
4. else the first job (in submission order) the policy would not start alone for now (its
   plan may change with time: the others wait on, and may start later): it alone;
5. else (the policy would start each job alone) the first job, among the first
   :data:`MOST_PROBES` in submission order, without which the policy starts some of the
   others: it alone;
6. else, of more waiting, the last job of the shortest prefix of the queue (in submission
   order, found by bisection) from which the policy starts nothing, when without it the
   policy starts some of the others: it alone (a holder behind the first
   :data:`MOST_PROBES` was not looked for, and the first submitted failed in its place, one
   a stuck point, until it came in reach);
7. else the first in submission order: it alone.

A stuck point asks about each set of waiting jobs once (with two waiting, the plan without
the first is the second's alone, asked already). When jobs are left, the run goes on
without those failed. Each stuck point fails at least one job, so the run ends; the choice
depends only on the queue (in submission order), the cluster and the policy's plans, which
are functions of their views, so a seed gives the same run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from danlu.core.cluster import Cluster
from danlu.sched.policies.reservation import NeverFits
from danlu.sched.view import ClusterView, Plan
from danlu.sim.simjob import SimJob

CANNOT_PLACE = "could not be placed even on an idle cluster"
"""The reason of a job no idle GPUs could hold; every reason of this module starts so."""
REFUSED = (
    f"{CANNOT_PLACE} (the policy would not start it even alone on the idle cluster, and "
    "its plan could not change with time)"
)
"""The reason of a job the policy would never start, even alone on the idle cluster."""
HELD_BACK = (
    f"{CANNOT_PLACE} (the policy started nothing while it waited, and would start other "
    "jobs without it; they went on without it)"
)
"""The reason of the job without which the policy starts others."""
REFUSED_NOW = (
    f"{CANNOT_PLACE} (the policy started nothing while it waited, nor would it start it "
    "alone on the idle cluster; the jobs behind it went on without it)"
)
"""The reason of a job the policy would not start alone at the stuck point (its plan may
change with time)."""
HEAD_HELD = (
    f"{CANNOT_PLACE} (the policy started nothing while it waited first in the queue; "
    "the jobs behind it went on without it)"
)
"""The reason of the job failed when no plan asked for named one that holds the others
back."""
NONE_ALONE = (
    f"{CANNOT_PLACE} (the policy started nothing, nor would it start any waiting job alone, "
    "at two stuck points in a row)"
)
"""The reason of every job left when the policy would start none of them alone, twice."""
MOST_PROBES = 64
"""The most jobs (the first in submission order) of which a stuck point asks the policy
what it would start without that one job: each such plan is over the whole queue. Past
them, a bisection over the queue's prefixes names one job to ask about (rule 6)."""

AskPolicy = Callable[[Sequence[SimJob]], Plan]
"""The policy's plan on the idle cluster at the stuck point with only the given waiting
jobs (in submission order) pending: a plan for the rule to read, never carried out."""


class StuckRule:
    """Chooses the waiting jobs that fail at a stuck point (the module docstring's rule)."""

    def __init__(self, cluster: Cluster) -> None:
        self._cluster = cluster
        self._none_alone = False
        """Whether the last stuck point found no waiting job the policy would start alone,
        and no job started since."""

    def started(self) -> None:
        """A job started: the next stuck point is the first of a new streak."""
        self._none_alone = False

    def choose(
        self, waiting: Sequence[SimJob], now: float, ask: AskPolicy
    ) -> list[tuple[SimJob, str]]:
        """The jobs of ``waiting`` (in submission order) that fail at a stuck point at
        ``now``, each with its reason; ``ask``: the policy's plan with only some of them
        pending, on the idle cluster."""
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
        ask = _remembered(ask)
        alone = [ask([job]) for job in waiting]
        refused = [
            job
            for job, plan in zip(waiting, alone, strict=True)
            if not plan.starts and plan.recheck_at == math.inf
        ]
        none_alone = not any(plan.starts for plan in alone)
        if refused:
            self._none_alone = none_alone
            return [(job, REFUSED) for job in refused]
        if none_alone and self._none_alone:
            return [(job, NONE_ALONE) for job in waiting]
        self._none_alone = none_alone
        for job, plan in zip(waiting, alone, strict=True):
            if not plan.starts:  # refused for now: its plan may change with time
                return [(job, REFUSED_NOW)]
        if len(waiting) > 1:
            for index, job in enumerate(waiting[:MOST_PROBES]):
                if ask([*waiting[:index], *waiting[index + 1 :]]).starts:
                    return [(job, HELD_BACK)]
            holder = _holder_past_probes(waiting, ask)
            if holder is not None:
                return [(holder, HELD_BACK)]
        return [(waiting[0], HEAD_HELD)]


def _holder_past_probes(waiting: Sequence[SimJob], ask: AskPolicy) -> SimJob | None:
    """A job past the first :data:`MOST_PROBES` of ``waiting`` without which the policy
    starts some of the others; None when none is found. Each job alone starts and the whole
    queue starts nothing, so some prefix (in submission order) is the shortest the policy
    starts nothing from: its last job is found by bisection (a prefix plan each halving)
    and confirmed by the plan without it, as the first jobs are."""
    if ask(waiting).starts:
        return None  # the whole queue starts a job here: no prefix stops it
    starts, stops = 1, len(waiting)  # a prefix this long starts a job / starts none
    while stops - starts > 1:
        middle = (starts + stops) // 2
        if ask(waiting[:middle]).starts:
            starts = middle
        else:
            stops = middle
    index = stops - 1
    if index < MOST_PROBES:
        return None  # asked about already
    if ask([*waiting[:index], *waiting[index + 1 :]]).starts:
        return waiting[index]
    return None


def _remembered(ask: AskPolicy) -> AskPolicy:
    """``ask``, asking the policy once per set of waiting jobs (a plan is a function of its
    view: with two jobs waiting, the plan without the first is the second's alone)."""
    plans: dict[tuple[str, ...], Plan] = {}

    def remembered(jobs: Sequence[SimJob]) -> Plan:
        key = tuple(job.id for job in jobs)
        plan = plans.get(key)
        if plan is None:
            plan = plans[key] = ask(jobs)
        return plan

    return remembered
