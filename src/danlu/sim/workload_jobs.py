"""What a workload holds (:mod:`danlu.sim.workload` reads one from a file): its jobs, each a
request the scheduler sees and the work the simulator runs, and the jobs a trace lists that
are not simulated."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from danlu.sched.view import JobRequest


@dataclass(frozen=True, slots=True)
class RigidWork:
    """A job that needs ``duration`` seconds of running on its requested GPUs."""

    duration: float
    model: str = ""
    """The model it trains, as the simulator's interference data names it (e.g. Gavel's
    ``"ResNet-18 (batch size 64)"``); empty: only its family is known. The scheduler never
    sees it."""


@dataclass(frozen=True, slots=True)
class ProfiledWork:
    """A job of a profiled application trained at a fixed global ``batch_size``."""

    application: str
    batch_size: int


Work = RigidWork | ProfiledWork


@dataclass(frozen=True, slots=True)
class WorkloadJob:
    """One job of a workload: what the scheduler sees and what the simulator runs."""

    request: JobRequest
    work: Work
    time_limit: float | None = None
    """Seconds it may hold GPUs over all its runs; reached, it is cancelled (None: never)."""


@dataclass(frozen=True)
class Workload:
    """A named list of jobs sorted by submission."""

    name: str
    format: str
    jobs: tuple[WorkloadJob, ...]
    never_scheduled: tuple[str, ...] = ()
    """The GPU pods of an openb list that the trace never scheduled (``pod_phase`` Pending,
    no ``scheduled_time``), in file order: left out of :attr:`jobs`, having no known
    running time."""
    no_gpu: tuple[str, ...] = ()
    """The jobs that ask for no GPU (an openb list's CPU-only pods, by name; a Philly
    trace's ``num_gpus`` 0 jobs, by the ``philly-N`` name of their row), in file order:
    left out of :attr:`jobs`, as they are no part of a GPU schedule."""
    unread_columns: tuple[str, ...] = ()
    """The columns of a plain (``danlu`` format) file that the format does not read
    (:func:`~danlu.sim.workload_columns.unread_plain_columns`), in header order: they
    change nothing, and ``danlu sim`` says so."""


def in_submission_order(jobs: list[WorkloadJob]) -> tuple[WorkloadJob, ...]:
    """Sort by submission time (file order breaks ties) and number ``seq`` in that order."""
    jobs.sort(key=lambda j: (j.request.submit_time, j.request.seq))
    return tuple(
        dataclasses.replace(j, request=dataclasses.replace(j.request, seq=i))
        for i, j in enumerate(jobs)
    )
