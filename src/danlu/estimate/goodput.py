"""Statistical efficiency and goodput (McCandlish et al. 2018; Pollux, OSDI 2021).

Training with a global batch ``B`` larger than the batch ``B0`` a job was tuned with makes
more progress per step but less per sample. With the gradient statistics measured at
``B0`` -- ``sqr = |E[g]|^2`` (squared norm of the true gradient) and ``var`` (variance of
the gradient estimate at batch ``B0``, i.e. ``tr(Sigma) / B0``) -- and ``scale = B / B0``,
Pollux's gain (equal to AdaScale's gain ratio, Johnson et al. 2020) is::

    gain(B) = (var + sqr) / (var / scale + sqr)          in [1, scale]

and the statistical efficiency, the progress per sample relative to ``B0``::

    E(B) = gain(B) / scale = (B_noise + B0) / (B_noise + B)

where ``B_noise = B0 * var / sqr`` is the (simple) gradient noise scale of McCandlish et
al., "An Empirical Model of Large-Batch Training" (2018). Goodput is throughput times
efficiency (Pollux section 3): ``GOODPUT = THROUGHPUT(b, N, R, s) * E(R * b * s)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from danlu.core.errors import SpecError
from danlu.core.values import MAX_INT, check_positive_int, quoted
from danlu.estimate.checks import as_float, check_bool, check_count, check_finite
from danlu.estimate.optimize import MemoryModel, memory_capped_batch
from danlu.estimate.throughput import ThroughputModel

__all__ = [
    "GoodputChoice",
    "GoodputModel",
    "GradientStats",
    "efficiency",
    "gain",
    "optimize_goodput",
]

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class GradientStats:
    """Gradient statistics at the initial batch size: ``sqr = |E g|^2``, ``var`` the
    variance of the mini-batch gradient at that batch (both >= 0, finite)."""

    sqr: float
    var: float

    def __post_init__(self) -> None:
        for name in ("sqr", "var"):
            # a string or None raised a bare TypeError, and True counted as 1
            check_finite(f"grad_stats.{name}", getattr(self, name), positive=False)

    def noise_scale(self, init_batch_size: int) -> float:
        """``B_noise = B0 * var / sqr`` (McCandlish et al. 2018); ``inf`` when ``sqr = 0``.

        Raises :class:`SpecError` unless ``init_batch_size`` is a positive integer (one a
        float holds)."""
        _check_init_batch(init_batch_size)  # before the sqr = 0 shortcut
        if self.sqr == 0:
            return math.inf
        return init_batch_size * self.var / self.sqr


def _check_init_batch(init_batch_size: int) -> None:
    """Raise :class:`SpecError` on ``init_batch_size`` unless it is a positive integer that
    a float holds (``10**400`` raised a bare OverflowError in the division by it)."""
    check_positive_int("init_batch_size", init_batch_size)
    if math.isinf(as_float(init_batch_size)):
        raise SpecError(
            "init_batch_size",
            f"must be a batch size in samples, got {quoted(init_batch_size)}: beyond any batch",
        )


def _scale(batch_size: float, init_batch_size: int) -> float:
    """``batch_size / init_batch_size``; :class:`SpecError` unless ``init_batch_size`` is a
    positive integer (the batch the statistics were measured at; 2.5 was let through) and
    ``batch_size`` a positive finite number (NaN passed ``<= 0`` and came back as a gain of
    1; a string raised a bare TypeError)."""
    _check_init_batch(init_batch_size)
    return check_finite("batch_size", batch_size, positive=True) / init_batch_size


def _gain(stats: GradientStats, scale: FloatArray) -> FloatArray:
    var, sqr = stats.var, stats.sqr
    if math.isinf(var + sqr):
        # both near a float's largest (1e308 each): var + sqr overflowed and the gain was
        # inf, an infinite AdaScale learning rate. Halved (exactly), the ratio is the same.
        var, sqr = var / 2, sqr / 2
    denom = var / scale + sqr
    safe = np.where(denom > 0, denom, 1.0)
    out: FloatArray = np.where(denom > 0, (var + sqr) / safe, 1.0)
    return out


def gain(stats: GradientStats, batch_size: float, init_batch_size: int) -> float:
    """``gain = (var + sqr) / (var / scale + sqr)``, ``scale = B / B0`` (Pollux eq. 6;
    AdaScale's gain ratio). 1 when both statistics are 0."""
    scale = _scale(batch_size, init_batch_size)
    return float(_gain(stats, np.array([scale]))[0])


def efficiency(stats: GradientStats, batch_size: float, init_batch_size: int) -> float:
    """Statistical efficiency ``E(B) = gain(B) / scale`` (Pollux eq. 7), in (0, 1] for
    ``B >= B0``."""
    return gain(stats, batch_size, init_batch_size) / _scale(batch_size, init_batch_size)


@dataclass(frozen=True, slots=True)
class GoodputChoice:
    """A goodput-optimal configuration for one placement."""

    local_bsz: int
    """Micro-batch per replica (what has to fit in GPU memory)."""
    accum_steps: int
    """Micro-batches per optimizer step (1 = no accumulation)."""
    global_batch: int
    """``num_replicas * local_bsz * accum_steps``."""
    goodput: float
    throughput: float
    efficiency: float


@dataclass(frozen=True, slots=True)
class GoodputModel:
    """Goodput of one job: its throughput model, gradient statistics and initial batch."""

    throughput_model: ThroughputModel
    grad_stats: GradientStats
    init_batch_size: int

    def __post_init__(self) -> None:
        # NaN passed a plain `< 1` test and made every efficiency NaN.
        _check_init_batch(self.init_batch_size)
        # A (sqr, var) tuple or None raised AttributeError at the first goodput.
        if not isinstance(self.grad_stats, GradientStats):
            raise SpecError(
                "grad_stats", f"must be GradientStats(sqr, var), got {quoted(self.grad_stats)}"
            )

    def efficiency(self, batch_size: float) -> float:
        """:func:`efficiency` at global batch ``batch_size``."""
        return efficiency(self.grad_stats, batch_size, self.init_batch_size)

    def goodput(
        self, local_bsz: int, num_nodes: int, num_replicas: int, accum_steps: int = 1
    ) -> float:
        """``THROUGHPUT(b, N, R, s) * E(R * b * s)`` in useful samples per second."""
        rate = self.throughput_model.throughput(local_bsz, num_nodes, num_replicas, accum_steps)
        return rate * self.efficiency(num_replicas * local_bsz * accum_steps)


def optimize_goodput(
    model: GoodputModel,
    num_nodes: int,
    num_replicas: int,
    *,
    max_batch_size: int,
    max_local_bsz: int,
    min_local_bsz: int = 1,
    accumulation: bool = True,
    memory: MemoryModel | None = None,
    limit_bytes: int | None = None,
    margin_bytes: int = 0,
) -> GoodputChoice | None:
    """The goodput-optimal (micro-batch, accumulation steps) for a placement.

    Searches every per-replica total ``L = b * s`` with global batch ``R * L`` in
    ``[max(B0, R * min_local_bsz), max_batch_size]``. The micro-batch cap ``m`` is
    ``max_local_bsz``, lowered to the largest batch with ``M(b) <= limit - margin`` when a
    memory model is given. For each ``L`` the fewest micro-batches are used
    (``s = ceil(L / m)``, ``b = ceil(L / s)``; extra micro-batches only add compute time);
    without ``accumulation`` only ``s = 1`` is allowed. Ties go to the smaller batch.
    Totals are evaluated in chunks, and those that cannot beat the best so far (the gain is
    bounded when ``sqr > 0``, the step time grows with the total) are skipped, so a huge
    ``max_batch_size`` (2**30) costs no more memory or time than the useful range; only
    with pure noise (``sqr = 0 < var``) does the search walk the whole range.

    Returns ``None`` when no configuration is feasible (memory too small for
    ``min_local_bsz``, or ``R * min_local_bsz > max_batch_size``). Raises
    :class:`SpecError` for invalid arguments: the caps must be positive integers (a
    fractional cap is refused, not rounded, as in :func:`danlu.estimate.optimize.best_batch`),
    ``accumulation`` a bool.
    """
    model.throughput_model.step_time(1, num_nodes, num_replicas)  # validates the placement
    # Whole numbers only: NaN reached np.arange, and max_local_bsz=2.5 let b = 3 through.
    check_positive_int("max_batch_size", max_batch_size)
    check_count("max_local_bsz", max_local_bsz, MAX_INT)  # 10**30: a bare OverflowError
    check_positive_int("min_local_bsz", min_local_bsz)
    accumulation = check_bool("accumulation", accumulation)  # "no" was truthy
    cap = memory_capped_batch(max_local_bsz, memory, limit_bytes, margin_bytes)
    if cap is None or cap < min_local_bsz:
        return None
    lo_total = max(-(-model.init_batch_size // num_replicas), min_local_bsz)
    hi_total = max_batch_size // num_replicas
    if not accumulation:
        hi_total = min(hi_total, cap)
    if hi_total < min_local_bsz:
        return None
    if hi_total < lo_total:
        # Even the initial batch B0 is out of reach: take the largest batch that is allowed.
        lo_total = hi_total
    per_replica = max_batch_size // num_replicas
    best: GoodputChoice | None = None
    start = lo_total
    while start <= hi_total:  # in chunks: a max_batch_size of 2**30 needs no 16 GiB array
        stop = min(hi_total, start + _CHUNK - 1)
        found = _best_of(
            model, (num_nodes, num_replicas), (start, stop), cap, min_local_bsz, per_replica
        )
        if found is not None and (best is None or found.goodput > best.goodput):
            best = found  # a later chunk wins only when strictly better: ties stay smaller
        if best is not None:
            useful = _useful_total(model, cap, best.goodput)
            if useful < hi_total:
                hi_total = int(useful)
        start = stop + 1
    return best


_CHUNK = 1 << 16
"""Per-replica totals evaluated at once by :func:`optimize_goodput`."""


def _best_of(
    model: GoodputModel,
    placement: tuple[int, int],
    span: tuple[int, int],
    cap: int,
    least: int,
    per_replica: int,
) -> GoodputChoice | None:
    """The best configuration of :func:`optimize_goodput` with a per-replica total in
    ``span`` (inclusive; the first of equals), micro-batches in ``least..cap`` and at most
    ``per_replica`` samples per replica; ``None`` when none is allowed."""
    num_nodes, num_replicas = placement
    totals = np.arange(span[0], span[1] + 1, dtype=np.int64)
    accum = -(-totals // cap)
    bsz = -(-totals // accum)
    ok = (bsz >= least) & (bsz * accum <= per_replica)
    if not np.any(ok):
        return None
    accum, bsz = accum[ok], bsz[ok]
    step = model.throughput_model.step_times(bsz, num_nodes, num_replicas, accum)
    global_batch = num_replicas * bsz * accum
    rate = global_batch / step
    scale = global_batch / model.init_batch_size
    eff = _gain(model.grad_stats, scale.astype(np.float64)) / scale
    good = rate * eff
    i = int(np.argmax(good))
    return GoodputChoice(
        local_bsz=int(bsz[i]),
        accum_steps=int(accum[i]),
        global_batch=int(global_batch[i]),
        goodput=float(good[i]),
        throughput=float(rate[i]),
        efficiency=float(eff[i]),
    )


def _useful_total(model: GoodputModel, cap: int, goodput: float) -> float:
    """A per-replica total beyond which no configuration beats ``goodput`` (``inf``: none
    known).

    Goodput is ``B0 * gain(B) / T_step``. The gain is at most ``(var + sqr) / sqr`` (1 when
    both are 0); a total ``L`` takes ``s >= L / cap`` micro-batches of ``b >= L / s``
    samples, each at least ``alpha_c + beta_c * b`` seconds, so ``T_step >= (alpha_c / cap +
    beta_c) * L`` (the synchronisation only adds). Past ``B0 * gain_max / (k * goodput)``
    the bound is below ``goodput``."""
    stats, p = model.grad_stats, model.throughput_model.params
    if stats.sqr > 0:
        top = (stats.var + stats.sqr) / stats.sqr
    elif stats.var == 0:
        top = 1.0
    else:
        return math.inf  # pure noise: the gain grows with the batch without bound
    if p.alpha_c < 0 or p.beta_c < 0:
        return math.inf
    k = p.alpha_c / cap + p.beta_c
    if not (k > 0 and goodput > 0):
        return math.inf
    return model.init_batch_size * top / (k * goodput) * (1 + 1e-9) + 1
