"""Node and GPU failures in the simulator: when they fail and come back, and what a job loses.

Each node (or, with GPU failures, each GPU) fails at random, independently, as a Poisson
process: the time to its next failure is exponential with mean ``mtbf`` (its mean time
between failures), drawn from a generator seeded by ``seed``, unit by unit in index order
and then in the order the failures happen, so a seed gives the same failures under every
policy. Nodes and GPUs draw from two streams of the same seed, so turning GPU failures on
leaves the nodes' failure times as they were. A failed unit is out of service for
``repair`` seconds (it cannot fail again meanwhile), then takes work again and its next
failure is drawn. A GPU that fails takes only itself out: the rest of its node goes on
working (the control plane closes a GPU its health checks find faulty the same way).

A job with a GPU on a failing node, or on a failing GPU (a share of it too), loses its run
there, as the control plane sees a run lost with its node: it is re-queued to resume from
its last checkpoint, with no restart counted against it. A run checkpoints every
``checkpoint_every`` seconds of training (after its restart cost), and at every preemption
or resize (the simulator's are lossless), so it loses the training since its last
checkpoint: its next run redoes that first, as time without progress after the restart cost
(at the next run's speed the work may take a little more or less; the simulator counts the
seconds).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import numpy as np

from danlu.core.errors import ConfigError
from danlu.sim.setting_types import check_real, check_whole

MIN_FAILURE_SECONDS = 1e-3
"""The shortest ``mtbf + repair`` (a unit's mean cycle of failure and repair): with both at
``1e-300`` a unit failed and came back at one instant for ever (the simulation hung); from
a millisecond on, its cycles move the clock on (up to
:data:`~danlu.sim.workload_fields.MOST_SECONDS`, where floats are 1/8192 s apart), and
:class:`StallWatch` stops a run whose failures come too fast for progress."""


@dataclass(frozen=True, slots=True)
class Failures:
    """How nodes (``SimConfig.failures``) or GPUs (``SimConfig.gpu_failures``) fail:
    seconds, all finite and above 0."""

    mtbf: float
    """A node's (a GPU's) mean time between failures."""
    repair: float = 3600.0
    """How long a failed node (GPU) is out of service."""
    checkpoint_every: float = 1800.0
    """Seconds of training between two checkpoints of a job."""
    seed: int = 0
    """Seed of the failure times."""

    def __post_init__(self) -> None:
        for name in ("mtbf", "repair", "checkpoint_every"):
            value = getattr(self, name)
            check_real(f"failures: {name}", value, "3600.0 (seconds)")
            if not (math.isfinite(value) and value > 0):
                raise ConfigError(f"failures: {name} must be above 0 seconds, not {value}")
        if self.mtbf + self.repair < MIN_FAILURE_SECONDS:
            raise ConfigError(
                f"failures: mtbf ({self.mtbf:g} s) plus repair ({self.repair:g} s) must be at "
                f"least {MIN_FAILURE_SECONDS:g} s (a millisecond): a unit failed and came back "
                "at one instant for ever; give longer times"
            )
        check_whole("failures: seed (--failure-seed)", self.seed, "0")
        if self.seed < 0:
            raise ConfigError(f"failures: seed (--failure-seed) must be >= 0, not {self.seed}")


MOST_FRUITLESS_FAILURES = 100
"""A job that loses this many runs in a row to failures, none of them keeping new training,
stops the simulation with a :class:`ConfigError`: failures that come faster than its restart
and first checkpoint would otherwise re-queue it forever, with no end to the run. So does a
simulation in which this many failures in a row came too soon after their node (GPU) came
back for a run on it to save a checkpoint, while no job kept any training
(:class:`StallWatch`): it stops there rather than when one job has lost that many runs."""


NodeFailures = Failures
"""How nodes fail: the name :class:`Failures` had before GPUs could fail too."""


FAIL = 0
"""A :class:`FailureClock` event: the node (GPU) fails."""
REPAIRED = 1
"""A :class:`FailureClock` event: the node (GPU) takes work again."""


class FailureClock:
    """The failures and repairs of ``units`` units (nodes, or GPUs) under ``failures``, in
    time order, drawn from stream ``stream`` of its seed (0: the seed alone, as nodes draw).

    :meth:`next_time` is when the next event happens; :meth:`due` takes the events up to a
    time. The units out of service are :attr:`down`."""

    def __init__(self, failures: Failures, units: int, start: float = 0.0, stream: int = 0) -> None:
        self.failures = failures
        seed = failures.seed if stream == 0 else [failures.seed, stream]
        self._rng = np.random.default_rng(seed)
        self._events: list[tuple[float, int, int]] = []
        """(time, unit, FAIL or REPAIRED), a heap."""
        self.down: set[int] = set()
        """The units out of service now."""
        self.count = 0
        """Failures so far."""
        for unit in range(units):
            self._draw(unit, start)

    def _draw(self, unit: int, after: float) -> None:
        gap = float(self._rng.exponential(self.failures.mtbf))
        heapq.heappush(self._events, (after + gap, unit, FAIL))

    def next_time(self) -> float:
        """When the next failure or repair happens (infinite: never)."""
        return self._events[0][0] if self._events else math.inf

    def due(self, until: float) -> list[tuple[float, int, int]]:
        """The events at or before ``until``, in time order (ties by unit): each is
        ``(time, unit, FAIL or REPAIRED)``. :attr:`down` follows them; each failure's
        repair and each repair's next failure are scheduled."""
        taken: list[tuple[float, int, int]] = []
        while self._events and self._events[0][0] <= until:
            at, unit, kind = heapq.heappop(self._events)
            if kind == FAIL:
                self.down.add(unit)
                self.count += 1
                heapq.heappush(self._events, (at + self.failures.repair, unit, REPAIRED))
            else:
                self.down.discard(unit)
                self._draw(unit, at)
            taken.append((at, unit, kind))
        return taken


NODE = 0
"""An :class:`Outages` event's scope: a node failed or was repaired."""
GPU = 1
"""An :class:`Outages` event's scope: a GPU (flat numbering of ``Cluster.gpu_offset``)."""


class OutageEvent(NamedTuple):
    """A failure or repair of :meth:`Outages.due`."""

    time: float
    scope: int
    """:data:`NODE` or :data:`GPU`."""
    unit: int
    """The node's index, or the GPU's flat index."""
    kind: int
    """:data:`FAIL` or :data:`REPAIRED`."""
    checkpoint_every: float
    """The checkpoint interval of the jobs whose runs a failure loses."""
    up_for: float = math.inf
    """A failure's: seconds the unit had been in service (since the first submission, or
    its last repair); infinite for a repair."""


class Outages:
    """The nodes' and the GPUs' failure clocks of one simulation together (either may be
    off): what the engine asks when its next instant comes and which units are closed."""

    def __init__(
        self,
        nodes: int,
        gpus: int,
        node_failures: Failures | None,
        gpu_failures: Failures | None,
        start: float,
    ) -> None:
        self.nodes = FailureClock(node_failures, nodes, start) if node_failures else None
        """The nodes' clock (``None``: nodes never fail)."""
        self.gpus = FailureClock(gpu_failures, gpus, start, stream=1) if gpu_failures else None
        """The GPUs' clock (``None``: GPUs never fail on their own)."""
        self._start = start
        self._up_since: dict[tuple[int, int], float] = {}
        """When each (scope, unit) repaired so far came back (the others: ``start``)."""

    def _clocks(self) -> tuple[tuple[int, FailureClock], ...]:
        return tuple((s, c) for s, c in ((NODE, self.nodes), (GPU, self.gpus)) if c)

    def next_time(self) -> float:
        """When the next failure or repair of either kind happens (infinite: never)."""
        return min((c.next_time() for _, c in self._clocks()), default=math.inf)

    def due(self, until: float) -> list[OutageEvent]:
        """The events of both clocks at or before ``until``, in time order (at one time,
        nodes first, then by index)."""
        taken = [
            OutageEvent(at, scope, unit, kind, clock.failures.checkpoint_every)
            for scope, clock in self._clocks()
            for at, unit, kind in clock.due(until)
        ]
        taken.sort(key=lambda event: event[:3])
        for index, event in enumerate(taken):
            unit = event.scope, event.unit
            if event.kind == REPAIRED:
                self._up_since[unit] = event.time
            else:
                up_for = event.time - self._up_since.get(unit, self._start)
                taken[index] = event._replace(up_for=up_for)
        return taken

    @property
    def any_down(self) -> bool:
        """Whether any node or GPU is out of service now."""
        return any(c.down for _, c in self._clocks())

    @property
    def closed_nodes(self) -> frozenset[int]:
        """The nodes out of service now (the view's ``closed_nodes``)."""
        return frozenset(self.nodes.down) if self.nodes else frozenset()

    @property
    def closed_gpus(self) -> frozenset[int]:
        """The GPUs out of service now (the view's ``closed_gpus``)."""
        return frozenset(self.gpus.down) if self.gpus else frozenset()

    @property
    def node_count(self) -> int:
        """Node failures so far."""
        return self.nodes.count if self.nodes else 0

    @property
    def gpu_count(self) -> int:
        """GPU failures so far."""
        return self.gpus.count if self.gpus else 0


def lost_training(trained: float, checkpoint_every: float) -> float:
    """Seconds of training a run loses when it fails after ``trained`` seconds of training,
    checkpointing every ``checkpoint_every`` seconds of it."""
    return math.fmod(max(0.0, trained), checkpoint_every)


class RunRecord(Protocol):
    """What :class:`StallWatch` reads of a job's progress (its ``Progress``)."""

    @property
    def kept_runs(self) -> int:
        """The job's ended runs that kept new training (saved beyond what they redid)."""
        ...

    def keeps_training(self, now: float, checkpoint_every: float) -> bool:
        """Whether its current run (if it has one) would keep new training if it failed
        at ``now``: it saved a checkpoint beyond what it had to redo."""
        ...


class StallWatch:
    """Tells a simulation that failures keep from progressing at all, long before one job
    has lost :data:`MOST_FRUITLESS_FAILURES` runs: with nodes that fail a second after
    each repair, jobs rarely even get to run, and that took hundreds of simulated days
    (minutes of rounds).

    A failure is *early* when its unit had been in service less than the restart cost
    plus the checkpoint interval: a restarted run there cannot have saved a checkpoint.
    :meth:`stalled` is true after :data:`MOST_FRUITLESS_FAILURES` early failures in a row
    during which no run ended keeping new training (a job's first run, which pays no
    restart, a preempted run or a finished job does) and when no running job would keep
    any now. A failure after a longer time in service starts the count over, as does one
    while no job is pending or running (:meth:`idle`)."""

    def __init__(self, restart_cost: float) -> None:
        self.restart_cost = restart_cost
        self.early = 0
        """Early failures in a row so far."""
        self._kept_runs = 0
        """The jobs' kept runs at the first early failure of the row."""

    def early_within(self, event: OutageEvent) -> float:
        """The time in service under which ``event``'s failure is early."""
        return self.restart_cost + event.checkpoint_every

    def message(self, event: OutageEvent, where: str) -> str:
        """Why the simulation stalled at ``event``, the failure of ``where`` (a node or a
        GPU, in words), without the advice."""
        return (
            f"the last {MOST_FRUITLESS_FAILURES} failures (the last of {where}) each came "
            f"less than {self.early_within(event):g} s (the restart cost and a checkpoint "
            "interval) after their node or GPU came back, too soon for a run there to save "
            "a checkpoint, and no job kept any new training meanwhile: nodes or GPUs fail "
            "too often for jobs to progress"
        )

    def idle(self) -> None:
        """A failure while no job is pending or running (between a workload's arrivals):
        the row starts over, as nothing could have progressed."""
        self.early = 0

    def stalled(self, event: OutageEvent, jobs: Callable[[], Iterable[RunRecord]]) -> bool:
        """Count the failure ``event`` (its lost runs already ended); whether the
        simulation stalled (see the class). ``jobs`` gives every job's progress (it is
        called at the first early failure of a row and when the row is long enough)."""
        if event.up_for >= self.early_within(event):
            self.early = 0
            return False
        self.early += 1
        if self.early == 1:
            self._kept_runs = sum(job.kept_runs for job in jobs())
            return False
        if self.early < MOST_FRUITLESS_FAILURES:
            return False
        records = list(jobs())
        kept = sum(job.kept_runs for job in records)
        every = event.checkpoint_every
        if kept > self._kept_runs or any(r.keeps_training(event.time, every) for r in records):
            self.early, self._kept_runs = 1, kept  # it progressed: a new row from here
            return False
        return True
