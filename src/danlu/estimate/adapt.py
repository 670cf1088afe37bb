"""In-process batch adaptation: the goodput-optimal global batch a job picks for itself from
what it measured, without a restart (what AdaptDL does inside Pollux's jobs).

One implementation for both sides: ``danlu.train``'s ``AdaptiveBatch("goodput", ...)`` runs it
inside a real job, and the simulator's adaptive jobs (``danlu.sim.progress.ProfiledProgress``)
run the same code on the profiles' step times, so what the simulator shows of in-process
adaptation is what production does.

The job knows only what it measured about itself:

- the compute time of one micro-batch (``step_time - sync_time``) at each micro-batch size
  it ran, on any placement (per-GPU work: the placement does not change it);
- the gradient-synchronisation time at each placement it ran on (the last measurement);
- the gradient statistics (``grad_sqr``, ``grad_var``) of the epoch it last trained.

From them it picks the goodput-optimal global batch for its *current* placement:
``gain(B) / ((accum + 1) * compute(b) + sync)`` over the batches its limits allow,
``compute(b) = alpha + beta * b`` fitted to its measured micro-batches (one point: a 20 %
fixed part), executed as ``danlu.train`` executes a global batch (fewest micro-batches that
fit memory, as ``danlu.sim.elastic.ApplicationProfile.rigid_config`` models it). Before it
has measured the sync time of a placement it keeps the batch it was given. The knowledge
survives restarts (it is part of the job's checkpointed state, as AdaptDL keeps its profile:
:meth:`SelfTuner.state_dict`).

The gradient statistics are in the gain's convention: ``sqr = |G|^2`` and ``var`` the
variance of one gradient at ``init_batch`` (``tr(Sigma) / init_batch``; see
:mod:`danlu.estimate.goodput`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from danlu.core.errors import ConfigError

_EPS = 1e-8


@dataclass(frozen=True, slots=True)
class BatchLimits:
    """What a job may choose: global batches in ``init_batch..max_batch`` (``init_batch``:
    the batch its hyper-parameters were tuned at), micro-batches in ``min_local..max_local``
    (``max_local``: what fits the GPU's memory)."""

    init_batch: int
    max_batch: int
    min_local: int = 1
    max_local: int = 2**31 - 1

    def __post_init__(self) -> None:
        if not 1 <= self.init_batch <= self.max_batch:
            raise ConfigError(
                f"batch limits: need 1 <= init_batch <= max_batch, got {self.init_batch}, "
                f"{self.max_batch}"
            )
        if not 1 <= self.min_local <= self.max_local:
            raise ConfigError(
                f"batch limits: need 1 <= min_local <= max_local, got {self.min_local}, "
                f"{self.max_local}"
            )


class SelfTuner:
    """One job's measurements of itself and its goodput-optimal batch choice."""

    __slots__ = ("_cache", "_compute", "_fit", "_stats", "_sync", "_version", "limits")

    def __init__(self, limits: BatchLimits) -> None:
        """Nothing measured yet; ``limits``: the job's batch and micro-batch range (what its
        own configuration and memory model give it)."""
        self.limits = limits
        self._compute: dict[int, float] = {}
        self._sync: dict[tuple[int, ...], float] = {}
        self._stats: tuple[float, float] | None = None
        self._fit: tuple[float, float] | None = None
        self._cache: dict[tuple[object, ...], int] = {}
        self._version = 0

    def measure(
        self,
        placement: tuple[int, ...],
        atomic: int,
        step: float,
        sync: float,
        stats: tuple[float, float],
    ) -> None:
        """Record one measurement: micro-batch ``atomic`` took ``step`` seconds per
        synchronised step (``sync`` of them in gradient sync) on ``placement``; the
        gradient statistics were ``stats`` = (sqr, var). Non-finite statistics (a step
        whose gradients overflowed) are ignored: the previous ones stay."""
        compute = max(step - sync, 1e-9)
        if self._compute.get(atomic) != compute:
            self._compute[atomic] = compute
            self._fit = None
            self._version += 1
        self._sync[placement] = sync
        if _finite(stats):
            self._stats = (float(stats[0]), float(stats[1]))

    def sync_time(self, placement: tuple[int, ...]) -> float | None:
        """The sync time last measured on ``placement`` (None: never measured there)."""
        return self._sync.get(placement)

    def choose(self, placement: tuple[int, ...]) -> int | None:
        """The goodput-optimal global batch on ``placement`` (GPUs per node, empty nodes
        dropped) by what the job measured; ``None`` before it measured sync there."""
        sync = self._sync.get(placement)
        if sync is None or self._stats is None or not self._compute:
            return None
        sqr, var = self._stats
        key = (placement, sync, _rounded(sqr), _rounded(var), self._version)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._best(sum(placement), sync, sqr, var)
            if len(self._cache) > 4096:
                self._cache.clear()
            self._cache[key] = hit
        return hit

    def _line(self) -> tuple[float, float]:
        if self._fit is None:
            self._fit = _fit_line(sorted(self._compute.items()))
        return self._fit

    def state_dict(self) -> dict[str, Any]:
        """What the job measured (plain values, for a checkpoint)."""
        return {
            "compute": [[atomic, seconds] for atomic, seconds in sorted(self._compute.items())],
            "sync": [[list(placement), seconds] for placement, seconds in self._sync.items()],
            "stats": list(self._stats) if self._stats is not None else None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output."""
        self._compute = {int(a): float(s) for a, s in state.get("compute", [])}
        self._sync = {tuple(int(n) for n in p): float(s) for p, s in state.get("sync", [])}
        stats = state.get("stats")
        loaded = (float(stats[0]), float(stats[1])) if stats else None
        self._stats = loaded if loaded is not None and _finite(loaded) else None
        self._fit = None
        self._cache.clear()
        self._version += 1

    def _best(self, replicas: int, sync: float, sqr: float, var: float) -> int:
        limits = self.limits
        init, top = limits.init_batch, limits.max_batch
        lo_local, hi_local = limits.min_local, limits.max_local
        totals = np.arange(max(1, math.ceil(init / replicas - _EPS)), top // replicas + 1)
        if totals.size == 0:
            return min(top, max(init, replicas * lo_local))
        # the executed split: the fewest micro-batches that fit, of equal size
        batch = totals * replicas
        local = np.ceil(batch / replicas - _EPS)
        accum = np.ceil(local / hi_local - _EPS) - 1
        if replicas == 1:
            accum = np.where(batch > init, np.maximum(accum, 1), accum)
        atomic = np.ceil(local / (accum + 1) - _EPS)
        atomic = np.minimum(atomic, np.floor(top / (replicas * (accum + 1))))
        executed = replicas * atomic * (accum + 1)
        ok = (atomic >= lo_local) & (executed >= init)
        if not np.any(ok):
            return min(top, max(init, replicas * lo_local))
        atomic, accum, executed = atomic[ok], accum[ok], executed[ok]
        alpha, beta = self._line()
        compute = alpha + beta * atomic
        iteration = (accum + 1) * compute + (sync if replicas > 1 else 0.0)
        if sqr <= 0 and var <= 0:
            gain = np.ones_like(executed)
        else:
            scale = executed / init
            gain = (var + sqr) / (var / scale + sqr)
        good = gain / iteration
        return int(executed[int(np.argmax(good))])


def _finite(stats: tuple[float, float]) -> bool:
    """True when both gradient statistics are finite numbers."""
    return all(math.isfinite(value) for value in stats)


def _rounded(value: float) -> float:
    """Gradient statistics to 2 % steps (the cache key; they drift every epoch). Defined for
    any float: ``inf`` keys as itself and NaN as -1 (neither is ever stored)."""
    if math.isnan(value):
        return -1.0
    if value <= 0:
        return 0.0
    if math.isinf(value):
        return math.inf
    return float(round(math.log(value) / math.log(1.02)))


def _fit_line(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares ``y = a + b x`` with ``a, b >= 0``; one point gives a 20 % fixed part."""
    if len(points) == 1:
        x, y = points[0]
        return 0.2 * y, 0.8 * y / x if x > 0 else 0.0
    xs = np.array([p[0] for p in points], dtype=float)
    ys = np.array([p[1] for p in points], dtype=float)
    mx, my = float(xs.mean()), float(ys.mean())
    sxx = float(((xs - mx) ** 2).sum())
    if sxx <= 0:
        return my, 0.0
    b = max(0.0, float(((xs - mx) * (ys - my)).sum()) / sxx)
    a = my - b * mx
    if a < 0:  # through the origin instead
        b = float((xs * ys).sum() / (xs**2).sum())
        a = 0.0
    return a, b
