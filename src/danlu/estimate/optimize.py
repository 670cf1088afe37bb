"""Batch-size, accumulation and GPU-count optimisers (seed 002; seed 000 sections 4.3, 9.4).

* :func:`largest_batch`: the largest batch ``b`` with ``M(b) <= limit - margin`` under a
  memory model ``M`` (peak reserved bytes per GPU, non-decreasing in ``b``).
* :func:`best_batch` / :func:`fastest_batch`: the batch that maximises a score (throughput,
  or goodput via :meth:`danlu.estimate.goodput.GoodputModel.goodput`) under that limit. For
  goodput with gradient accumulation use :func:`danlu.estimate.goodput.optimize_goodput`.
* :func:`plan_accumulation`: micro-batch and accumulation steps so that
  ``micro_batch * accum_steps * replicas`` is the requested global batch.
* :func:`cost_optimal_gpu_count`: ``K* = argmin_K C(K) * T(K)`` with
  ``T(K) = T0 / (K * E(K))`` (seed 000 section 9.4).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from danlu.core.errors import SpecError
from danlu.core.spec import MAX_BATCH, MAX_GPUS
from danlu.core.values import MAX_INT, check_positive_int, quoted, range_message
from danlu.estimate.checks import as_float, check_bool, check_count, check_finite, is_real_number
from danlu.estimate.memory.model import largest_within
from danlu.estimate.throughput import ThroughputModel

__all__ = [
    "AccumulationPlan",
    "CostChoice",
    "MemoryModel",
    "best_batch",
    "cost_optimal_gpu_count",
    "fastest_batch",
    "largest_batch",
    "largest_safe_batch",
    "parallel_efficiency",
    "plan_accumulation",
    "training_time",
]


@runtime_checkable
class MemoryModel(Protocol):
    """Peak GPU memory as a function of the per-GPU batch size.

    Structurally the same as ``danlu.estimate.memory.model.MemoryModel``: ``predict(b)`` is
    the peak reserved bytes per GPU at micro-batch ``b`` (non-decreasing in ``b``);
    ``max_batch(limit, margin)`` the largest ``b`` with ``predict(b) <= limit - margin``,
    or ``None`` when not even ``b = 1`` fits.
    """

    def predict(self, batch_size: int) -> int:
        """Peak reserved bytes per GPU at this batch size."""
        ...

    def max_batch(self, limit_bytes: int, margin_bytes: int = 0) -> int | None:
        """Largest batch with ``predict(b) <= limit_bytes - margin_bytes``, or ``None``."""
        ...


def _check_bytes(field: str, value: Any, *, positive: bool) -> None:
    """Raise :class:`SpecError` on ``field`` unless ``value`` is a finite number of bytes,
    > 0 (``positive``) or >= 0 (a bool, a string, NaN or infinity is refused)."""
    check_finite(field, value, positive=positive, what="a number of bytes")


def largest_batch(
    memory: MemoryModel, limit_bytes: int, margin_bytes: int = 0, upper: int | None = None
) -> int | None:
    """The largest batch ``b <= upper`` with ``M(b) <= limit_bytes - margin_bytes``.

    Asks ``memory.max_batch`` first, then checks the answer against ``memory.predict`` and
    bisects below it if needed, so the result always satisfies the inequality under
    ``predict`` (assuming ``M`` non-decreasing). Returns ``None`` when ``b = 1`` does not fit.
    Raises :class:`SpecError` unless ``limit_bytes`` is a finite number > 0,
    ``margin_bytes`` a finite number >= 0 and ``upper`` (when given) an integer >= 1.
    """
    _check_bytes("limit_bytes", limit_bytes, positive=True)
    _check_bytes("margin_bytes", margin_bytes, positive=False)
    if upper is not None:
        check_positive_int("upper", upper)
    budget = limit_bytes - margin_bytes
    hint = memory.max_batch(limit_bytes, margin_bytes)
    if hint is None or hint < 1:
        return None
    hi = hint if upper is None else min(hint, upper)
    if memory.predict(hi) <= budget:
        return hi
    # The model's own answer does not hold under predict(): bisect on [1, hi).
    if memory.predict(1) > budget:
        return None
    return largest_within(memory.predict, budget, 1, hi)


SPARE_SHARE = 0.05
"""Share of a memory limit that :func:`largest_safe_batch` keeps free."""


def largest_safe_batch(
    memory: MemoryModel, limit_bytes: int, upper: int | None = None, spare: float = SPARE_SHARE
) -> int | None:
    """:func:`largest_batch` with ``spare`` of ``limit_bytes`` kept free: the starting
    micro-batch that ``danlu.train`` and the server's submission estimate use. Raises
    :class:`SpecError` as :func:`largest_batch` does, and on ``spare`` unless it is a
    fraction in ``[0, 1)``."""
    _check_bytes("limit_bytes", limit_bytes, positive=True)
    # as_float: an int beyond float range (10**400) raised OverflowError in isfinite
    if not is_real_number(spare) or not (math.isfinite(as_float(spare)) and 0 <= spare < 1):
        raise SpecError("spare", f"must be a share in [0, 1), got {quoted(spare)}")
    return largest_batch(memory, limit_bytes, int(limit_bytes * spare), upper=upper)


def memory_capped_batch(
    max_local_bsz: int,
    memory: MemoryModel | None,
    limit_bytes: int | None,
    margin_bytes: int = 0,
) -> int | None:
    """``max_local_bsz``, lowered to the largest batch that fits ``limit_bytes - margin``
    when a memory model is given (None when not even one sample fits). Raises
    :class:`SpecError` unless ``max_local_bsz`` is an integer in ``1..MAX_INT`` (2**62; a
    cap of ``10**400`` raised a bare OverflowError in the searches' float and 64-bit
    arrays), and as :func:`largest_batch` does."""
    check_count("max_local_bsz", max_local_bsz, MAX_INT)
    if memory is None:
        return max_local_bsz
    if limit_bytes is None:
        raise SpecError(
            "limit_bytes", "required with a memory model: pass the GPU memory limit in bytes"
        )
    return largest_batch(memory, limit_bytes, margin_bytes, upper=max_local_bsz)


def best_batch(
    score: Callable[[int], float],
    max_local_bsz: int,
    *,
    min_local_bsz: int = 1,
    memory: MemoryModel | None = None,
    limit_bytes: int | None = None,
    margin_bytes: int = 0,
) -> int | None:
    """The local batch in ``[min_local_bsz, cap]`` with the highest ``score(b)``.

    ``cap`` is ``max_local_bsz``, lowered to :func:`largest_batch` when a ``memory`` model and
    ``limit_bytes`` are given. Ties go to the smaller batch. Returns ``None`` when no batch
    in range fits. Raises :class:`SpecError` on ``score`` when it returns anything but a
    number (NaN, a string, a bool; ``-inf`` is a number). Use ``score = lambda b:
    model.throughput(b, N, R)`` for the fastest batch or ``lambda b:
    goodput_model.goodput(b, N, R)`` for the goodput-optimal one.

    ``score`` is called once for every batch in range, so a range of more than
    :data:`~danlu.core.spec.MAX_BATCH` batches (2**30, the largest batch a spec takes) is
    a :class:`SpecError` on ``max_local_bsz``, raised before any score: a cap near 2**62
    counted for ever. :func:`fastest_batch` and
    :func:`~danlu.estimate.goodput.optimize_goodput` search huge caps in bulk.
    """
    check_positive_int("min_local_bsz", min_local_bsz)
    check_positive_int("max_local_bsz", max_local_bsz)
    cap = memory_capped_batch(max_local_bsz, memory, limit_bytes, margin_bytes)
    if cap is None or cap < min_local_bsz:
        return None
    if cap - min_local_bsz + 1 > MAX_BATCH:
        raise SpecError(
            "max_local_bsz",
            f"{cap - min_local_bsz + 1:,} batches ({min_local_bsz:,}..{cap:,}) to score one "
            f"by one; best_batch scores at most {MAX_BATCH:,} (the largest batch a spec "
            "takes): lower max_local_bsz, raise min_local_bsz, give a memory model and "
            "limit_bytes to cap it, or use fastest_batch or optimize_goodput",
        )
    best, best_score = min_local_bsz, -math.inf
    for b in range(min_local_bsz, cap + 1):
        # NaN lost every comparison (the smallest batch came back), a string raised TypeError
        value = _number_of("score", b, score(b), argument="b")
        if value > best_score:
            best, best_score = b, value
    return best


def fastest_batch(
    model: ThroughputModel,
    num_nodes: int,
    num_replicas: int,
    max_local_bsz: int,
    *,
    memory: MemoryModel | None = None,
    limit_bytes: int | None = None,
    margin_bytes: int = 0,
) -> int | None:
    """The local batch maximising throughput ``R * b / T_step(b, N, R)`` under the limits.

    With a linear compute model throughput rises with ``b``, so this is usually the largest
    batch that fits; it is computed, not assumed. See :func:`best_batch` (the same
    :class:`SpecError` on a bad argument, raised before any step time is computed). The
    search runs down from the cap and stops where no smaller batch can be faster, so a huge
    cap costs no 16 GiB array. The throughput never falls as the batch grows (every time
    parameter is >= 0), so a batch far below the cap can match the best only by rounding:
    where the throughput is flat to within it (caps of 2**36 and more, or no fixed compute
    time ``alpha_c`` on one replica) the search stops :data:`_MAX_WALK` batches below the
    cap, with the fastest batch seen (walking every such tie down to the smallest took hours
    for a cap of 2**62).
    """
    check_count("max_local_bsz", max_local_bsz, MAX_INT)
    model.step_time(1, num_nodes, num_replicas)  # validates the placement
    cap = memory_capped_batch(max_local_bsz, memory, limit_bytes, margin_bytes)
    if cap is None:
        return None
    p = model.params
    prune = all(v >= 0 for v in p.as_array()[:6])
    best, best_rate = cap, -math.inf
    stop = cap
    # From the cap down, in chunks (a cap of 2**31 needs no 16 GiB array). Below a batch x
    # nothing is faster than R * x / (alpha_c + beta_c * x), the rate without any sync
    # (b / (alpha_c + beta_c * b) grows with b): once that is below the best, stop.
    while stop >= 1 and cap - stop < _MAX_WALK:
        start = max(1, stop - _CHUNK + 1)
        bsz = np.arange(start, stop + 1, dtype=np.float64)
        rates = num_replicas * bsz / model.step_times(bsz, num_nodes, num_replicas)
        i = int(np.argmax(rates))  # the first of equals: the smallest batch
        if rates[i] >= best_rate:  # a smaller batch as fast wins the tie
            best, best_rate = start + i, float(rates[i])
        stop = start - 1
        if prune and stop >= 1:
            compute = p.alpha_c + p.beta_c * stop
            # (with a little slack: rounding must not cut off an equal, smaller batch)
            if compute > 0 and num_replicas * stop / compute * (1 + 1e-12) < best_rate:
                break
    return best


_CHUNK = 1 << 16
"""Batches :func:`fastest_batch` evaluates at once."""
_MAX_WALK = 16 * _CHUNK
"""The most batches below its cap that :func:`fastest_batch` evaluates (a tenth of a second
of work): the throughput never falls as the batch grows, so the batches below them can beat
the best only by rounding."""


@dataclass(frozen=True, slots=True)
class AccumulationPlan:
    """``micro_batch * accum_steps * num_replicas = global_batch`` (>= ``requested``)."""

    micro_batch: int
    accum_steps: int
    num_replicas: int
    requested: int

    @property
    def global_batch(self) -> int:
        """The global batch this plan really trains with."""
        return self.micro_batch * self.accum_steps * self.num_replicas


def plan_accumulation(
    global_batch: int, num_replicas: int, max_micro_batch: int, *, exact: bool = False
) -> AccumulationPlan:
    """Micro-batch and accumulation steps that keep a requested global batch.

    ``accum_steps = ceil(G / (R * m_max))`` (the fewest micro-batches that fit) and
    ``micro_batch = ceil(G / (R * accum_steps)) <= m_max``. Rounding goes *up*: the global
    batch actually trained with, ``micro_batch * accum_steps * R``, is at least ``G`` and
    exceeds it by less than ``R * accum_steps`` samples (never a smaller batch than the
    LR schedule was tuned for). With ``exact=True`` the global batch is kept exactly: the
    smallest ``accum_steps`` at or above that minimum with ``R * accum_steps`` dividing ``G``
    (it exists when ``R`` divides ``G``: at worst micro-batch 1); otherwise
    :class:`SpecError` on ``global_batch``. ``exact`` must be a bool (``"no"`` was truthy).
    ``global_batch`` is at most :data:`~danlu.core.spec.MAX_BATCH` (2**30), the largest
    ``training.global_batch_size`` a spec takes (``exact=True`` on 10**30 never returned:
    finding the divisor takes ``sqrt(global_batch)`` steps).
    """
    check_positive_int("global_batch", global_batch)
    if global_batch > MAX_BATCH:
        raise SpecError(
            "global_batch",
            f"samples {range_message(1, MAX_BATCH, global_batch)} (the largest global batch "
            "a job spec takes); give a smaller global batch",
        )
    check_positive_int("num_replicas", num_replicas)
    check_positive_int("max_micro_batch", max_micro_batch)
    exact = check_bool("exact", exact)
    if global_batch < num_replicas:
        raise SpecError(
            "global_batch",
            f"{global_batch} is smaller than the {num_replicas} replicas; every replica needs "
            "at least one sample: raise the global batch or use fewer GPUs",
        )
    accum = -(-global_batch // (num_replicas * max_micro_batch))
    if exact:
        if global_batch % num_replicas:
            raise SpecError(
                "global_batch",
                f"{global_batch} is not divisible by {num_replicas} replicas, so it cannot be "
                "kept exactly; pick a multiple of the replica count or allow rounding up",
            )
        per_replica = global_batch // num_replicas
        accum = _smallest_divisor_from(per_replica, accum)
        return AccumulationPlan(per_replica // accum, accum, num_replicas, global_batch)
    micro = -(-global_batch // (num_replicas * accum))
    assert micro <= max_micro_batch
    return AccumulationPlan(micro, accum, num_replicas, global_batch)


def _smallest_divisor_from(n: int, low: int) -> int:
    """The smallest divisor of ``n >= 1`` that is ``>= low`` (``n`` itself at worst), in
    ``O(sqrt(n))`` steps: counting up from ``low`` took seconds for a prime of 10**8."""
    best = n
    i = 1
    while i * i <= n:
        if n % i == 0:
            for d in (i, n // i):
                if low <= d < best:
                    best = d
        i += 1
    return best


def parallel_efficiency(
    model: ThroughputModel, local_bsz: int, num_gpus: int, gpus_per_node: int
) -> float:
    """``E(K) = X(K) / (K * X(1))``: throughput on K GPUs relative to K single GPUs.

    Weak scaling at a fixed local batch; the K GPUs are packed onto
    ``ceil(K / gpus_per_node)`` nodes. ``X`` is :meth:`ThroughputModel.throughput`.
    """
    check_positive_int("num_gpus", num_gpus)
    check_positive_int("gpus_per_node", gpus_per_node)
    nodes = -(-num_gpus // gpus_per_node)
    single = model.throughput(local_bsz, 1, 1)
    return model.throughput(local_bsz, nodes, num_gpus) / (num_gpus * single)


def training_time(t0: float, num_gpus: int, efficiency: float) -> float:
    """``T(K) = T0 / (K * E(K))`` (seed 000 section 9.4); ``T0`` is the time on one GPU.

    Raises :class:`SpecError` naming the argument unless ``t0`` is a finite number > 0,
    ``num_gpus`` an integer in ``1..MAX_GPUS`` (the most a job may ask for) and
    ``efficiency`` a number in ``(0, 1]``."""
    # a string raised a bare TypeError, and True passed as 1
    check_finite("t0", t0, positive=True, what="a single-GPU training time in seconds")
    check_positive_int("num_gpus", num_gpus)
    if num_gpus > MAX_GPUS:  # 10**400 raised a bare OverflowError in the division
        raise SpecError("num_gpus", f"GPUs {range_message(1, MAX_GPUS, num_gpus)}")
    if not (is_real_number(efficiency) and 0 < efficiency <= 1.0 + 1e-9):
        raise SpecError(
            "efficiency", f"parallel efficiency must be in (0, 1], got {quoted(efficiency)}"
        )
    return t0 / (num_gpus * efficiency)


@dataclass(frozen=True, slots=True)
class CostChoice:
    """The chosen GPU count with its training time (s) and total cost ``C(K) * T(K)``."""

    num_gpus: int
    time_s: float
    total_cost: float


def cost_optimal_gpu_count(
    candidates: Iterable[int],
    time_s: Callable[[int], float],
    cost_rate: Callable[[int], float],
    *,
    deadline_s: float | None = None,
) -> CostChoice:
    """``K* = argmin_K C(K) * T(K)`` over ``candidates`` (seed 000 section 9.4).

    ``time_s(K)`` is the training time on K GPUs, e.g.
    ``training_time(T0, K, parallel_efficiency(model, b, K, 8))``; ``cost_rate(K)`` is the
    cost per second of K GPUs (price x K plus any fixed per-job rate; with a pure per-GPU
    price and ``E(K) < 1`` the optimum is the smallest K, so a fixed rate or a deadline is
    what makes more GPUs pay). Only K with ``T(K) <= deadline_s`` are eligible; a ``T(K)`` of
    ``inf`` (K cannot train the job) never is. Ties go to the faster choice. Raises
    :class:`SpecError` when no candidate is given or none is eligible, on ``deadline_s``
    unless it is a number (``inf``: none), not NaN, on ``time_s`` when ``T(K)`` is not a
    number > 0 (NaN, 0 or a negative time won every comparison it met first), and on
    ``cost_rate`` when ``C(K)`` is not a finite number >= 0.
    """
    if deadline_s is not None and (
        not is_real_number(deadline_s) or math.isnan(as_float(deadline_s))  # 10**400: no bound
    ):
        raise SpecError("deadline_s", f"must be a number of seconds, got {quoted(deadline_s)}")
    best: CostChoice | None = None
    seen = False
    for k in candidates:
        check_positive_int("candidates", k)
        seen = True
        t = _number_of("time_s", k, time_s(k))
        if not t > 0:
            raise SpecError("time_s", f"returned {t} for K={k}; expected a training time > 0 s")
        if math.isinf(t) or (deadline_s is not None and t > deadline_s):
            continue
        rate = _number_of("cost_rate", k, cost_rate(k))
        if not (math.isfinite(rate) and rate >= 0):
            raise SpecError(
                "cost_rate", f"returned {rate} for K={k}; expected a finite cost per second >= 0"
            )
        choice = CostChoice(k, t, rate * t)
        if best is None or (choice.total_cost, choice.time_s) < (best.total_cost, best.time_s):
            best = choice
    if not seen:
        raise SpecError("candidates", "no GPU counts to choose from; pass e.g. range(1, 65)")
    if best is None:
        if deadline_s is None:
            raise SpecError("time_s", "no GPU count can train the job (every T(K) is inf)")
        raise SpecError(
            "deadline_s",
            f"no GPU count meets the deadline of {deadline_s} s; relax it or allow more GPUs",
        )
    return best


def _number_of(field: str, k: int, value: Any, argument: str = "K") -> float:
    """``value`` (what ``field`` returned for ``argument = k``) as a float; :class:`SpecError`
    on ``field`` when it is not a real number (a bool, a string or NaN)."""
    number = as_float(value) if is_real_number(value) else math.nan
    if math.isnan(number):
        raise SpecError(field, f"returned {quoted(value)} for {argument}={k}; expected a number")
    return number
