"""The goodput-adaptive batch of ``AdaptiveBatch("goodput", ...)``: the job re-picks, in
process, the global batch with the most goodput on the GPUs it has, from what it measured of
itself -- the in-process adaptation that the ``danlu`` policy expects of jobs reporting
``adaptive`` (and that AdaptDL runs inside Pollux's jobs).

The choice is :class:`danlu.estimate.adapt.SelfTuner`, the same code the simulator's adaptive
jobs run. This module feeds it ``danlu.train``'s measurements:

- per configuration (micro-batch, accumulation, placement), the median over
  :data:`SAMPLES` steps (after :data:`SETTLE` steps that warm up a new shape) of the step time
  and the gradient-synchronisation time, turned into one micro-step: ``(step - sync) /
  accumulation + sync``;
- the gradient-noise estimator's ``|G|^2`` and ``tr(Sigma) / init_batch`` (the gain's
  convention).

The sync time of several ranks is exposed only by a step that accumulates (the last,
all-reducing micro-step against the others). So a run on several GPUs whose steps are one
micro-batch runs its first :data:`PROBE_STEPS` steps as two micro-batches of half the size
(the same global batch and gradient, within floating-point reassociation): they measure the
placement's sync and a second compute point; later steps of one micro-batch are measured
against that sync.

The gradient noise needs two batch sizes in one step: accumulation does it (one micro-batch
against the whole batch). A run that does not accumulate runs every ``gns_every``-th step as
two half micro-batches (a gradient-noise probe, ``TrainContext._probe``), so a single GPU
measures it too. Until it has measured the current placement and the gradient noise the
job keeps the batch it has.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from typing import Any

from danlu.estimate.adapt import BatchLimits, SelfTuner, usable_seconds

SAMPLES = 5
"""Steps of one configuration whose median is one measurement."""
SETTLE = 2
"""Steps of a new configuration left out (allocator and cache warm-up)."""
PROBE_STEPS = 20
"""First steps of a multi-GPU process run as two micro-batches when they would be one (a
count, the same on every rank: ranks must agree on their micro-steps)."""

Shape = tuple[int, int, tuple[int, ...]]


def placement_of(world_size: int, local_world_size: int) -> tuple[int, ...]:
    """GPUs per node of a run of ``world_size`` ranks, ``local_world_size`` per node."""
    per_node = max(1, min(local_world_size, world_size))
    full, rest = divmod(max(world_size, 1), per_node)
    return (per_node,) * full + ((rest,) if rest else ())


class GoodputTuner:
    """``danlu.train``'s measurements in, the goodput-optimal global batch out."""

    def __init__(self, init_batch: int, max_batch: int, max_micro: int) -> None:
        """``init_batch``: the batch the job's hyper-parameters were tuned at (the smallest it
        picks); ``max_batch``: the largest; ``max_micro``: the largest micro-batch known to fit
        memory (larger per-GPU batches accumulate)."""
        self.tuner = SelfTuner(self._limits(init_batch, max_batch, max_micro))
        self._shape: Shape | None = None
        self._seen = 0
        self._steps: list[float] = []
        self._syncs: list[float] = []
        self._stats: tuple[float, float] | None = None

    @staticmethod
    def _limits(init_batch: int, max_batch: int, max_micro: int) -> BatchLimits:
        return BatchLimits(init_batch, max(max_batch, init_batch), 1, max(1, max_micro))

    def cap_micro(self, max_micro: int) -> None:
        """A smaller micro-batch limit (after an out-of-memory error)."""
        limits = self.tuner.limits
        if max_micro < limits.max_local:
            fresh = SelfTuner(self._limits(limits.init_batch, limits.max_batch, max_micro))
            fresh.load_state_dict(self.tuner.state_dict())
            self.tuner = fresh

    def record(
        self,
        *,
        micro: int,
        accumulation: int,
        placement: tuple[int, ...],
        step_time: float,
        sync_time: float | None,
        grad_sqr: float | None,
        grad_var: float | None,
    ) -> None:
        """One optimizer step: ``accumulation`` micro-batches of about ``micro`` samples per
        rank took ``step_time`` seconds, ``sync_time`` of them in gradient sync (None: not
        measured; 0 on one GPU); ``grad_sqr`` / ``grad_var``: the gradient-noise estimator's
        ``|G|^2`` and per-sample ``tr(Sigma)`` (None before an estimate)."""
        self.note_stats(grad_sqr, grad_var)
        replicas = sum(placement)
        if replicas > 1 and sync_time is None:  # one micro-batch: the sync is not exposed
            sync_time = self.tuner.sync_time(placement)  # as measured by the probe steps
            if sync_time is None:
                return  # the model would read an unmeasured sync as free
        if not (math.isfinite(step_time) and step_time > 0):
            return
        if replicas > 1 and (sync_time is None or not usable_seconds(sync_time)):
            return  # a NaN, infinite or negative sync is no measurement (max(nan, 0) is nan)
        shape: Shape = (micro, accumulation, placement)
        if shape != self._shape:
            self._shape, self._seen = shape, 0
            self._steps.clear()
            self._syncs.clear()
        self._seen += 1
        if self._seen <= SETTLE:
            return
        sync = min(sync_time or 0.0, step_time) if replicas > 1 else 0.0
        self._steps.append(step_time)
        self._syncs.append(sync)
        if len(self._steps) > SAMPLES:  # waiting for gradient statistics: the newest SAMPLES
            del self._steps[:-SAMPLES], self._syncs[:-SAMPLES]
        if len(self._steps) < SAMPLES or self._stats is None:
            return
        step = statistics.median(self._steps)
        sync = statistics.median(self._syncs)
        compute = (step - sync) / max(accumulation, 1)
        self.tuner.measure(placement, micro, compute + sync, sync, self._stats)
        self._steps.clear()
        self._syncs.clear()

    def note_stats(self, grad_sqr: float | None, grad_var: float | None) -> None:
        """The gradient-noise estimator's latest ``|G|^2`` and per-sample ``tr(Sigma)`` alone
        (a step whose timing is not a sample of its shape); None, non-positive or not finite
        (an overflowed estimate): ignored."""
        if grad_sqr is not None and grad_var is not None and _usable_stats(grad_sqr, grad_var):
            init = self.tuner.limits.init_batch
            self._stats = (grad_sqr, grad_var / init)

    def choose(self, placement: tuple[int, ...]) -> int | None:
        """The goodput-optimal global batch on ``placement``; None before it measured it."""
        return self.tuner.choose(placement)

    def state_dict(self) -> dict[str, Any]:
        """What it measured (survives a restart, as AdaptDL keeps its profile), and the
        measurement under way (``window``: the configuration, its steps seen and the
        samples of its next median; None before the first), so that a resume on the same
        configuration goes on with it instead of settling and sampling it again."""
        window = None
        if self._shape is not None:
            micro, accumulation, placement = self._shape
            window = {
                "micro": micro,
                "accumulation": accumulation,
                "placement": list(placement),
                "seen": self._seen,
                "steps": list(self._steps),
                "syncs": list(self._syncs),
            }
        return {"tuner": self.tuner.state_dict(), "stats": self._stats, "window": window}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output: :meth:`parse_state_dict`'s checks, then the
        load. Nothing is changed when it raises."""
        self.parse_state_dict(state)()

    def parse_state_dict(self, state: dict[str, Any]) -> Callable[[], None]:
        """Read :meth:`state_dict` output and return the function that loads it, which cannot
        fail; nothing is changed until it is called. The measurements are read into a new
        :class:`~danlu.estimate.adapt.SelfTuner` of the same limits, which the load puts in
        place of the live one (whose own load set its compute times before it read the
        sync times: one that raised left it half loaded). Statistics that
        :meth:`note_stats` would have ignored, a NaN say, are left out: they would reach
        every measurement."""
        tuner = SelfTuner(self.tuner.limits)
        tuner.load_state_dict(state.get("tuner", {}))
        stats = state.get("stats")
        loaded = (float(stats[0]), float(stats[1])) if stats else None
        usable = loaded if loaded is not None and _usable_stats(*loaded) else None
        shape, seen, steps, syncs = _stored_window(state.get("window"))

        def load() -> None:
            self.tuner, self._stats = tuner, usable
            self._shape, self._seen = shape, seen
            self._steps[:], self._syncs[:] = steps, syncs

        return load


def _stored_window(value: Any) -> tuple[Shape | None, int, list[float], list[float]]:
    """The measurement under way that a :meth:`GoodputTuner.state_dict` holds (its
    ``window``): the shape, steps seen, step and sync samples. None (a checkpoint written
    before it was kept, or before a step was measured) is a fresh one, as before.
    ``ValueError`` naming the field for one no run writes (a damaged checkpoint): a count
    that is no whole number (>= 1; ``seen`` >= 0), a placement that is no list of GPU
    counts, samples that are not finite numbers >= 0 (a step time > 0), of unequal
    lengths or more than :data:`SAMPLES` of them."""
    if value is None:
        return None, 0, [], []
    if not isinstance(value, dict):
        raise ValueError(f"the goodput window {value!r:.80} is not a dict")

    def count(name: str, least: int) -> int:
        number = value.get(name)
        if isinstance(number, bool) or not isinstance(number, int) or number < least:
            raise ValueError(f"the goodput window's {name} {number!r:.80} is not a whole number")
        return number

    micro, accumulation, seen = count("micro", 1), count("accumulation", 1), count("seen", 0)
    where = value.get("placement")
    if (
        not isinstance(where, list)
        or not where
        or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in where)
    ):
        raise ValueError(f"the goodput window's placement {where!r:.80} is no list of GPU counts")
    samples: list[list[float]] = []
    for name in ("steps", "syncs"):
        listed = value.get(name)
        if not isinstance(listed, list) or len(listed) > SAMPLES:
            raise ValueError(f"the goodput window's {name} {listed!r:.80} is no list of samples")
        numbers = [math.nan if isinstance(v, bool) else float(v) for v in listed]
        if not all(math.isfinite(v) and v >= 0 for v in numbers):
            raise ValueError(f"the goodput window's {name} {listed!r:.80} are not all >= 0")
        samples.append(numbers)
    steps, syncs = samples
    if len(steps) != len(syncs) or not all(v > 0 for v in steps):
        raise ValueError("the goodput window's steps and syncs are not pairs of samples")
    return (micro, accumulation, tuple(where)), seen, steps, syncs


def probes_state(left: int, placement: tuple[int, ...]) -> dict[str, Any]:
    """What a checkpoint keeps of the sync probes (:data:`PROBE_STEPS`): how many are
    ``left`` and the ``placement`` they measure, for :func:`stored_probes`."""
    return {"left": left, "placement": list(placement)}


def stored_probes(value: Any, placement: tuple[int, ...]) -> int | None:
    """The sync probes left that a checkpoint's :func:`probes_state` holds, for a run on
    ``placement``: a resume on the same GPUs goes on with the count (it ran its first 20
    steps' probes again: not the uninterrupted run's micro-batches). None when the
    checkpoint holds none (one written before it kept them) or was written on another
    placement, whose sync is not this one's (it is measured afresh). ``ValueError`` for a
    damaged one: not a dict, a count that is no whole number in 0..PROBE_STEPS, a
    placement that is no list of GPU counts."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"its probes state {value!r:.80} is not a dict")
    left, where = value.get("left"), value.get("placement")
    if isinstance(left, bool) or not isinstance(left, int) or not 0 <= left <= PROBE_STEPS:
        raise ValueError(f"its probes left {left!r:.80} is not a whole number 0..{PROBE_STEPS}")
    if not isinstance(where, list) or not all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in where
    ):
        raise ValueError(f"its probes placement {where!r:.80} is not a list of GPU counts")
    return left if tuple(where) == tuple(placement) else None


def _usable_stats(grad_sqr: float, grad_var: float) -> bool:
    """True when both gradient statistics are finite and positive."""
    return all(math.isfinite(value) and value > 0 for value in (grad_sqr, grad_var))
