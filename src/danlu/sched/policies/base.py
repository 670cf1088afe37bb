"""The Policy interface and the helpers every kind of policy shares.

A policy is a plain object: configuration in its constructor, and
``schedule(view) -> Plan``, a pure, deterministic function of the frozen view.

The two round procedures most policies are made of live in their own modules, and are
re-exported here (their import path of old):

- :func:`~danlu.sched.policies.queue_round.queue_round` (and ``queue_pass``): start pending
  jobs in the policy's order while they fit, preempting no one;
- :func:`~danlu.sched.policies.ranked_round.ranked_round`: keep or start the best-ranked
  jobs that fit, preempt the rest;

and the reasons a job waits, :mod:`~danlu.sched.policies.waiting` (``why_not``,
``asks_no_gpu``, ``NO_GPU_ASKED``, ``beyond_reach``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from danlu.sched.placement.gang import FreeMap
from danlu.sched.policies.queue_round import queue_pass, queue_round
from danlu.sched.policies.ranked_round import ranked_round
from danlu.sched.policies.waiting import NO_GPU_ASKED, asks_no_gpu, beyond_reach, why_not
from danlu.sched.view import ClusterView, JobStatus, Plan, Start

__all__ = [
    "NO_GPU_ASKED",
    "Policy",
    "asks_no_gpu",
    "beyond_reach",
    "nothing_to_size",
    "place_shares_in_order",
    "queue_pass",
    "queue_round",
    "ranked_round",
    "split_running",
    "why_not",
]


class Policy(Protocol):
    """A scheduling policy: a pure function from a cluster view to a plan.

    A policy that chooses the GPU count of jobs whose request names one count (the traces'
    adaptive jobs, as Pollux does) says so with a class attribute ``sizes_jobs = True``:
    the simulator then admits such a job even when its request is wider than the cluster.
    """

    @property
    def name(self) -> str:
        """The registry name."""
        ...

    def schedule(self, view: ClusterView) -> Plan:
        """Decide which jobs start, stop or move in this round."""
        ...


def nothing_to_size(view: ClusterView) -> bool:
    """Whether nothing waits and no running job reports anything a policy could size or
    measure (rigid jobs only): then only a change of jobs can change a sizing policy's plan,
    which returns ``Plan(recheck_at=math.inf)`` (each round was empty: a rigid job of
    10^9 s alone was 17 million rounds in the simulator)."""
    return not view.pending and not any(job.observed for job in view.running)


def split_running(view: ClusterView) -> tuple[list[JobStatus], list[JobStatus]]:
    """The view's running jobs a sizing policy may move (resize or preempt: preemptible,
    whole-GPU, not draining) and the others, which keep their GPUs as they are. A draining
    job (:attr:`ClusterView.draining`) is on its way out and holds its GPUs until it exits:
    moving it again would hand out GPUs it still holds."""
    movable: list[JobStatus] = []
    fixed: list[JobStatus] = []
    draining = view.draining
    for job in view.running:
        req = job.request
        if req.preemptible and not req.shares_gpu and job.id not in draining:
            movable.append(job)
        else:
            fixed.append(job)
    return movable, fixed


def place_shares_in_order(
    free: FreeMap, shared: Sequence[JobStatus], starts: list[Start], waiting: dict[str, str]
) -> None:
    """Start each request for part of a GPU in ``shared`` on what ``free`` has left, first
    come first served (the sizing baselines place them after dividing the whole GPUs);
    those that find no room get a waiting reason."""
    for job in shared:
        part = free.place(job.request)
        if part is None:
            waiting[job.id] = "no GPU has the share it asks for left"
        else:
            starts.append(Start(job.id, part))
