"""Node failures in the simulator: when nodes fail and come back, and what a job loses.

Each node fails at random, independently, as a Poisson process: the time to its next
failure is exponential with mean ``mtbf`` (a node's mean time between failures), drawn from a
generator seeded by ``seed``, node by node in index order and then in the order the failures
happen, so a seed gives the same failures under every policy. A failed node is out of service
for ``repair`` seconds (it cannot fail again meanwhile), then takes work again and its next
failure is drawn.

A job with a GPU on a failing node loses its run there, as the control plane sees a run lost
with its node: it is re-queued to resume from its last checkpoint, with no restart counted
against it. A run checkpoints every ``checkpoint_every`` seconds of training (after its
restart cost), and at every preemption or resize (the simulator's are lossless), so it loses
the training since its last checkpoint: its next run redoes that first, as time without
progress after the restart cost (at the next run's speed the work may take a little more or
less; the simulator counts the seconds).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from danlu.core.errors import ConfigError


@dataclass(frozen=True, slots=True)
class NodeFailures:
    """How nodes fail (``SimConfig.failures``): seconds, all finite and above 0."""

    mtbf: float
    """A node's mean time between failures."""
    repair: float = 3600.0
    """How long a failed node is out of service."""
    checkpoint_every: float = 1800.0
    """Seconds of training between two checkpoints of a job."""
    seed: int = 0
    """Seed of the failure times."""

    def __post_init__(self) -> None:
        for name in ("mtbf", "repair", "checkpoint_every"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ConfigError(f"failures: {name} must be above 0 seconds, not {value}")


FAIL = 0
"""A :class:`FailureClock` event: the node fails."""
REPAIRED = 1
"""A :class:`FailureClock` event: the node takes work again."""


class FailureClock:
    """The failures and repairs of ``nodes`` nodes under ``failures``, in time order.

    :meth:`next_time` is when the next event happens; :meth:`due` takes the events up to a
    time. The nodes out of service are :attr:`down`."""

    def __init__(self, failures: NodeFailures, nodes: int, start: float = 0.0) -> None:
        self.failures = failures
        self._rng = np.random.default_rng(failures.seed)
        self._events: list[tuple[float, int, int]] = []
        """(time, node, FAIL or REPAIRED), a heap."""
        self.down: set[int] = set()
        """The nodes out of service now."""
        self.count = 0
        """Failures so far."""
        for node in range(nodes):
            self._draw(node, start)

    def _draw(self, node: int, after: float) -> None:
        gap = float(self._rng.exponential(self.failures.mtbf))
        heapq.heappush(self._events, (after + gap, node, FAIL))

    def next_time(self) -> float:
        """When the next failure or repair happens (infinite: never)."""
        return self._events[0][0] if self._events else math.inf

    def due(self, until: float) -> list[tuple[float, int, int]]:
        """The events at or before ``until``, in time order (ties by node): each is
        ``(time, node, FAIL or REPAIRED)``. :attr:`down` follows them; each failure's
        repair and each repair's next failure are scheduled."""
        taken: list[tuple[float, int, int]] = []
        while self._events and self._events[0][0] <= until:
            at, node, kind = heapq.heappop(self._events)
            if kind == FAIL:
                self.down.add(node)
                self.count += 1
                heapq.heappush(self._events, (at + self.failures.repair, node, REPAIRED))
            else:
                self.down.discard(node)
                self._draw(node, at)
            taken.append((at, node, kind))
        return taken


def lost_training(trained: float, checkpoint_every: float) -> float:
    """Seconds of training a run loses when it fails after ``trained`` seconds of training,
    checkpointing every ``checkpoint_every`` seconds of it."""
    return math.fmod(max(0.0, trained), checkpoint_every)
