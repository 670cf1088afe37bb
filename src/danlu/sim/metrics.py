"""Simulation results: per-job records, the cluster timeline, and summary metrics."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from danlu.core.cluster import MILLI_PER_GPU
from danlu.core.state import Event

FINISHED: Final = "finished"
RUNNING: Final = "running"
PENDING: Final = "pending"
REJECTED: Final = "rejected"
"""The values of :attr:`JobRecord.state`."""


@dataclass(frozen=True, slots=True)
class JobRecord:
    """What happened to one job: a finished one (:attr:`SimResult.jobs`), or one the clock
    stopped before it ended (:attr:`SimResult.unfinished_records`: no ``end_time``, its GPU
    time, restarts and slowdowns up to the stop)."""

    id: str
    submit_time: float
    start_time: float | None
    end_time: float | None
    gpus: int
    gpu_seconds: float
    """GPU-seconds held, restarts included."""
    restart_gpu_seconds: float
    preemptions: int
    resizes: int = 0
    """Times it was moved to other GPUs while running (each one a restart)."""
    interference_seconds: float = 0.0
    """Seconds of running lost to jobs sharing its GPU (``SimConfig.interference``)."""
    interference_gpu_seconds: float = 0.0
    """The same in GPU-seconds, at the share of a GPU it held."""
    timed_out: bool = False
    """Cancelled on reaching its time limit: its GPU time counts as held, not as useful, and
    its JCT is the time to the cancellation."""
    failures: int = 0
    """Runs it lost with a failing node (``SimConfig.failures``)."""
    lost_seconds: float = 0.0
    """Seconds of training those runs lost since their last checkpoint (redone, and counted
    in ``restart_gpu_seconds`` at the GPUs of the run that redid them)."""
    project: str = "default"
    user: str = ""
    released_at: float | None = None
    """When the last of its runs that ended let its GPUs go (the end, for a finished job;
    None: no run of it ended). The summary's window reaches it for a job rejected after it
    ran."""
    state: str = FINISHED
    """Where the job stood when the run ended: ``finished`` (it ended: done, or cancelled
    at its time limit, :attr:`timed_out`), ``running`` or ``pending`` (the clock stopped at
    ``SimConfig.max_time`` while it ran or waited), or ``rejected`` (it could never run on
    the cluster: :attr:`SimResult.rejected` says why)."""

    @property
    def restarts(self) -> int:
        """Its starts after the first: one per resize, one per resume after a preemption or
        a node's failure (a finished job resumed after every one)."""
        return self.preemptions + self.resizes + self.failures

    @property
    def jct(self) -> float:
        """Job completion time: end minus submission (NaN while it has no end; an end at
        0.0 is a time, whose JCT read NaN)."""
        return (self.end_time if self.end_time is not None else math.nan) - self.submit_time

    @property
    def queueing_delay(self) -> float:
        """Wait from submission to the first start."""
        return (self.start_time if self.start_time is not None else math.nan) - self.submit_time


class Timeline:
    """Piecewise-constant cluster state sampled at every simulated instant."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.allocated_gpus: list[float] = []
        self.pending: list[int] = []
        self.running: list[int] = []
        self.fragmentation: list[float] = []

    def record(
        self,
        now: float,
        used_milli: npt.NDArray[np.int64],
        offsets: Sequence[int],
        pending: int,
        running: int,
        measure_fragmentation: bool = True,
    ) -> None:
        """Add a point. ``measure_fragmentation=False`` carries the last fragmentation value
        forward (the engine measures it at scheduling instants, not at every completion)."""
        allocated = float(used_milli.sum()) / MILLI_PER_GPU
        if self.times and self.times[-1] == now:
            self.times.pop()
            self.allocated_gpus.pop()
            self.pending.pop()
            self.running.pop()
            self.fragmentation.pop()
        self.times.append(now)
        self.allocated_gpus.append(allocated)
        self.pending.append(pending)
        self.running.append(running)
        if not pending:
            frag = 0.0
        elif measure_fragmentation or not self.fragmentation:
            frag = fragmentation(used_milli, offsets)
        else:
            frag = self.fragmentation[-1]
        self.fragmentation.append(frag)


def fragmentation(used_milli: npt.NDArray[np.int64], offsets: Sequence[int]) -> float:
    """Share of the free whole GPUs that sit on partly used nodes (0 = no fragmentation).

    Free GPUs on partly used nodes cannot serve a gang that wants a whole node; the share is
    computed only while jobs are waiting, when fragmentation can hurt.
    """
    if used_milli.size == 0:
        return 0.0
    free_whole = (used_milli == 0).astype(np.int64)
    idx = np.asarray(offsets, dtype=np.int64)
    sizes = np.diff(np.append(idx, used_milli.size))
    # bincount, not reduceat: reduceat miscounts nodes without GPUs (and fails on a last one)
    node_of_gpu = np.repeat(np.arange(idx.size), sizes)
    free_per_node = np.bincount(node_of_gpu, weights=free_whole, minlength=idx.size)
    total_free = int(free_per_node.sum())
    if total_free == 0:
        return 0.0
    partial = free_per_node[(free_per_node > 0) & (free_per_node < sizes)].sum()
    return float(partial) / total_free


def _time_mean(
    times: Sequence[float], values: Sequence[float], window: tuple[float, float] | None
) -> float:
    """Time average of a step function (``values[i]`` holds from ``times[i]`` to the next
    instant) over ``window`` = (start, end), the makespan: the timeline's trailing rounds
    after the last job ended (and any instants before the first submission) do not count.
    The last value holds until ``end``. ``window`` None: over the timeline's own span.
    0.0 when the span is empty."""
    if len(times) == 0:
        return 0.0
    t = np.asarray(times, dtype=float)
    v = np.asarray(values, dtype=float)
    if window is None:
        if t.size < 2:
            return 0.0
        start, end = float(t[0]), float(t[-1])
    else:
        start, end = window
    if end <= start:
        return 0.0
    begins = np.clip(t, start, end)
    ends = np.clip(np.append(t[1:], max(end, float(t[-1]))), start, end)
    widths = ends - begins
    total = float(widths.sum())
    return float((v * widths).sum()) / total if total > 0 else 0.0


def finite_or_none(value: float | None) -> float | None:
    """``value`` for JSON: None (``null``) for NaN or an infinity, which JSON cannot hold
    (a mean over no finished job, the JCT of a job that never ended)."""
    return value if value is None or math.isfinite(value) else None


COUNT_FIGURES: Final = frozenset(
    {
        "jobs",
        "preemptions",
        "resizes",
        "restarts",
        "max_job_restarts",
        "rounds",
        "timed_out",
        "node_failures",
        "gpu_failures",
        "lost_runs",
        "unfinished",
        "running",
        "pending",
        "rejected",
    }
)
"""The figures of :meth:`SimResult.summary` and :meth:`SimResult.by_project` that count
things (jobs, events, rounds): floats there, as the other figures, and whole numbers in
the JSON (:func:`json_summary`)."""


def json_summary(summary: Mapping[str, float]) -> dict[str, float | int | None]:
    """A :meth:`SimResult.summary` (or a row of :meth:`SimResult.by_project`) for JSON: its
    non-finite values as None (``null``), and its counts (:data:`COUNT_FIGURES`) as whole
    numbers (``"jobs": 2``, where ``2.0`` was written); the other figures stay floats."""
    return {key: _json_figure(key, value) for key, value in summary.items()}


def _json_figure(key: str, value: float) -> float | int | None:
    """One figure of :func:`json_summary`."""
    if key in COUNT_FIGURES and math.isfinite(value) and float(value).is_integer():
        return int(value)
    return finite_or_none(value)


def _mean(values: Sequence[float]) -> float:
    """The mean of ``values``, NaN for none (numpy's mean of nothing warns)."""
    return float(np.mean(values)) if values else math.nan


def _percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q)) if values else math.nan


@dataclass
class SimResult:
    """Everything a simulation produced, with summary metrics."""

    policy: str
    workload: str
    total_gpus: int
    jobs: list[JobRecord]
    unfinished: list[str] = field(default_factory=list)
    """Jobs submitted that had not finished when the clock stopped (``SimConfig.max_time``)."""
    unfinished_records: list[JobRecord] = field(default_factory=list)
    """The :attr:`unfinished` jobs' records, in the same order, up to the stop (no end): the
    summary's window and utilisation count them, its JCTs and waits do not."""
    stopped_at: float | None = None
    """The instant the clock stopped at ``SimConfig.max_time`` with jobs still to finish or
    to come (None: every job it let in had ended, or failed, by then)."""
    not_submitted: list[str] = field(default_factory=list)
    """Jobs submitted after the clock stopped (``SimConfig.max_time``), in submission order:
    never queued, nor rejected (one that could never have run included). With
    :attr:`jobs`, :attr:`unfinished` and :attr:`rejected`, every job of the workload is
    listed once."""
    rejected: list[tuple[str, str]] = field(default_factory=list)
    """Jobs that could never run on the cluster: (id, reason), in the order rejected."""
    timeline: Timeline = field(default_factory=Timeline)
    rounds: int = 0
    preemptions: int = 0
    events: list[Event] = field(default_factory=list)
    node_failures: int = 0
    """Nodes that failed (``SimConfig.failures``)."""
    gpu_failures: int = 0
    """GPUs that failed on their own (``SimConfig.gpu_failures``)."""
    rejected_records: list[JobRecord] = field(default_factory=list)
    """The :attr:`rejected` jobs' records (state ``rejected``), in the same order: their
    project and user, and any GPU time they held before (none for a job rejected at its
    submission). The summary does not count them."""

    @property
    def jcts(self) -> list[float]:
        return [r.jct for r in self.jobs]

    def summary(self) -> dict[str, float]:
        """Headline metrics (seconds, ratios in 0..1).

        ``jobs`` and the JCT and queueing figures are over the finished jobs. ``makespan``
        is the window the ratios are taken over: from the first submission of a job that
        finished or was unfinished at the stop, to the last end, or to the stop
        (``SimConfig.max_time``) while jobs were unfinished there (they held GPUs until
        then). ``gpu_allocation_ratio`` is the time average of the GPUs allocated over that
        window, of all GPUs; ``gpu_utilization`` the GPU-seconds of useful work done in it
        (finished and unfinished jobs' held GPU time, less restarts, slowdowns by sharing
        and the work of jobs cancelled at their time limit), of all GPU-seconds in it: at
        most the allocation ratio. ``fragmentation`` is averaged over the same window. A
        job rejected after it ran (:attr:`rejected_records`) held GPUs too: the window
        reaches from its submission to the end of its last run, and its GPU time counts as
        allocated, not as useful work (it never finished; before, a run of such a job
        before the first kept job's submission or after the last end fell outside the
        window, and the allocation ratio left it out).

        The counters of what happened to jobs (``resizes``, ``restarts``,
        ``max_job_restarts``, ``interference_seconds``, ``lost_runs``,
        ``lost_training_seconds``) count every job the run let in (:meth:`all_records`:
        finished, unfinished at the stop, rejected after running), as ``preemptions``,
        ``node_failures`` and ``gpu_failures`` count every event: with ``max_time`` they
        counted the finished jobs alone (13 node failures showed 2 lost runs, 26 lost, and
        the utilisation already left out all 26). ``timed_out`` counts jobs cancelled at
        their time limit, which are finished.
        """
        jcts = self.jcts
        delays = [r.queueing_delay for r in self.jobs]
        ran = [*self.jobs, *self.unfinished_records]
        # rejected after they ran: they held GPUs in the window too
        given_up = [r for r in self.rejected_records if r.released_at is not None]
        first_submit = min((r.submit_time for r in (*ran, *given_up)), default=0.0)
        last_end = max((r.end_time or 0.0 for r in self.jobs), default=0.0)
        if self.unfinished_records and self.stopped_at is not None:
            last_end = max(last_end, self.stopped_at)
        last_end = max([last_end, *(r.released_at or 0.0 for r in given_up)])
        makespan = last_end - first_submit
        held = sum(r.gpu_seconds for r in ran)
        lost = sum(r.restart_gpu_seconds + r.interference_gpu_seconds for r in ran)
        killed = sum(
            r.gpu_seconds - r.restart_gpu_seconds - r.interference_gpu_seconds
            for r in self.jobs
            if r.timed_out
        )
        useful = held - lost - killed  # no restarts, slowdowns by sharing, nor work cancelled
        capacity = self.total_gpus * makespan
        times = self.timeline.times
        window = (first_submit, last_end) if (ran or given_up) and makespan > 0 else None
        alloc_mean = _time_mean(times, self.timeline.allocated_gpus, window)
        mean_alloc = alloc_mean / max(self.total_gpus, 1)
        mean_frag = _time_mean(times, self.timeline.fragmentation, window)
        every = self.all_records()
        return {
            "jobs": float(len(self.jobs)),
            "avg_jct": float(np.mean(jcts)) if jcts else math.nan,
            "median_jct": _percentile(jcts, 50),
            "p99_jct": _percentile(jcts, 99),
            "makespan": makespan,
            "avg_queueing_delay": float(np.mean(delays)) if delays else math.nan,
            "p99_queueing_delay": _percentile(delays, 99),
            "gpu_allocation_ratio": mean_alloc,
            "gpu_utilization": useful / capacity if capacity > 0 else 0.0,
            "fragmentation": mean_frag,
            "preemptions": float(self.preemptions),
            "resizes": float(sum(r.resizes for r in every)),
            "restarts": float(sum(r.restarts for r in every)),
            "max_job_restarts": float(max((r.restarts for r in every), default=0)),
            "rounds": float(self.rounds),
            "interference_seconds": float(sum(r.interference_seconds for r in every)),
            "timed_out": float(sum(r.timed_out for r in self.jobs)),
            "node_failures": float(self.node_failures),
            "gpu_failures": float(self.gpu_failures),
            "lost_runs": float(sum(r.failures for r in every)),
            "lost_training_seconds": float(sum(r.lost_seconds for r in every)),
        }

    def all_records(self) -> list[JobRecord]:
        """Every job the run let in or rejected, each with its :attr:`JobRecord.state`:
        the finished ones (in the order they ended), then those the clock stopped before
        they ended (``running``, then ``pending``), then the rejected ones. The jobs
        submitted after the stop (:attr:`not_submitted`) are not among them."""
        return [*self.jobs, *self.unfinished_records, *self.rejected_records]

    def by_project(self) -> dict[str, dict[str, float]]:
        """Per project (the workload's ``project`` names, sorted): its finished jobs
        (``jobs``), their average JCT and wait (NaN when none finished), the GPU-hours they
        held and its share of all of them (what a quota or a fair-share weight changes);
        and its jobs that did not finish: ``unfinished`` (``running`` plus ``pending``
        when the clock stopped at ``SimConfig.max_time``, holding ``unfinished_gpu_hours``
        up to the stop) and ``rejected``. A project whose jobs all ran past the stop, or
        were rejected, is listed too (it used to be left out, as if it had no jobs)."""
        groups: dict[str, list[JobRecord]] = {}
        for record in self.all_records():
            groups.setdefault(record.project, []).append(record)
        total = sum(r.gpu_seconds for r in self.jobs)
        out: dict[str, dict[str, float]] = {}
        for name in sorted(groups):
            records = [r for r in groups[name] if r.state == FINISHED]
            unfinished = [r for r in groups[name] if r.state in (RUNNING, PENDING)]
            held = sum(r.gpu_seconds for r in records)
            out[name] = {
                "jobs": float(len(records)),
                "avg_jct": _mean([r.jct for r in records]),
                "avg_queueing_delay": _mean([r.queueing_delay for r in records]),
                "gpu_hours": held / 3600.0,
                "gpu_share": held / total if total > 0 else 0.0,
                "unfinished": float(len(unfinished)),
                "running": float(sum(r.state == RUNNING for r in unfinished)),
                "pending": float(sum(r.state == PENDING for r in unfinished)),
                "unfinished_gpu_hours": sum(r.gpu_seconds for r in unfinished) / 3600.0,
                "rejected": float(sum(r.state == REJECTED for r in groups[name])),
            }
        return out

    def to_json(self, timeline: bool = False) -> dict[str, Any]:
        """A JSON-ready dict: the summary at top level, per-job JCTs, and optionally the
        timeline. A figure that is not a finite number (the average JCT when no job
        finished) is None (``null``): strict JSON has no NaN. ``per_job`` lists every job
        of :meth:`all_records`, each with its ``state`` (a job still running or waiting at
        ``max_time``, or rejected, has no end and a ``null`` JCT); ``job_jcts`` the
        finished ones."""
        out: dict[str, Any] = {
            "policy": self.policy,
            "workload": self.workload,
            "total_gpus": self.total_gpus,
            **json_summary(self.summary()),
            "unfinished": self.unfinished,
            "not_submitted": self.not_submitted,
            "rejected": [{"id": i, "reason": r} for i, r in self.rejected],
            "job_jcts": {r.id: finite_or_none(r.jct) for r in self.jobs},
            "projects": {name: json_summary(row) for name, row in self.by_project().items()},
            "per_job": [
                {
                    "id": r.id,
                    "submit_time": r.submit_time,
                    "start_time": r.start_time,
                    "end_time": r.end_time,
                    "jct": finite_or_none(r.jct),
                    "queueing_delay": finite_or_none(r.queueing_delay),
                    "gpus": r.gpus,
                    "preemptions": r.preemptions,
                    "resizes": r.resizes,
                    "restarts": r.restarts,
                    "interference_seconds": r.interference_seconds,
                    "timed_out": r.timed_out,
                    "failures": r.failures,
                    "lost_seconds": r.lost_seconds,
                    "project": r.project,
                    "user": r.user,
                    "state": r.state,
                    "gpu_seconds": r.gpu_seconds,
                }
                for r in self.all_records()
            ],
        }
        if timeline:
            out["timeline"] = {
                "time": self.timeline.times,
                "allocated_gpus": self.timeline.allocated_gpus,
                "pending": self.timeline.pending,
                "running": self.timeline.running,
                "fragmentation": self.timeline.fragmentation,
            }
        return out
