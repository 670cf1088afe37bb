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
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from danlu.core.errors import ConfigError, DataError, SpecError
from danlu.core.values import MAX_INT, is_whole_number, quoted
from danlu.estimate.checks import as_float, is_real_number


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
        for name in ("init_batch", "max_batch", "min_local", "max_local"):
            value = getattr(self, name)
            # 2.5 samples reached the search as a fractional global batch, "64" a TypeError
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise ConfigError(
                    f"batch limits: {name} must be a whole number of samples, got {quoted(value)}"
                )
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
        if not isinstance(limits, BatchLimits):  # an AttributeError at the first choice
            raise SpecError("limits", f"must be a BatchLimits, got {quoted(limits)}")
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
        gradient statistics were ``stats`` = (sqr, var). Non-finite or negative statistics
        (a step whose gradients overflowed) are ignored: the previous ones stay. So is a timing that
        is not finite (NaN or inf) or negative: kept, a NaN compute or sync time made every
        batch's goodput NaN and pinned the choice to the smallest batch until the same
        micro-batch was measured again. A micro-batch that is not a whole number of samples
        in ``1..MAX_INT`` is ignored too, as is a timing or statistic that is no number (a
        string, None, or an integer beyond float range: they raised a bare TypeError or
        OverflowError). A ``placement`` that is no placement (:func:`check_placement`) or
        ``stats`` that are no pair are a :class:`SpecError` naming the argument."""
        check_placement(placement)
        # None or 5 was a bare TypeError, (1.0,) an IndexError
        pair = isinstance(stats, Sequence | np.ndarray) and not isinstance(stats, str | bytes)
        if not pair or len(stats) != 2:
            raise SpecError("stats", f"must be a pair (sqr, var), got {quoted(stats)}")
        if _usable_stats(stats):
            self._stats = (float(stats[0]), float(stats[1]))
        if not (usable_seconds(step) and usable_seconds(sync) and _usable_batch(atomic)):
            return
        compute = max(step - sync, 1e-9)
        if self._compute.get(atomic) != compute:
            self._compute[atomic] = compute
            self._fit = None
            self._version += 1
        self._sync[placement] = sync

    def sync_time(self, placement: tuple[int, ...]) -> float | None:
        """The sync time last measured on ``placement`` (None: never measured there)."""
        return self._sync.get(check_placement(placement))

    def choose(self, placement: tuple[int, ...]) -> int | None:
        """The goodput-optimal global batch on ``placement`` (GPUs per node, empty nodes
        dropped) by what the job measured; ``None`` before it measured sync there. A
        ``placement`` that is no placement is a :class:`SpecError` (:func:`check_placement`)."""
        sync = self._sync.get(check_placement(placement))
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
        """Restore :meth:`state_dict` output. Timings :meth:`measure` would have ignored (not
        finite, or negative: a checkpoint written before it ignored them) are left out, as
        are statistics that are not finite or are negative. A state of another shape (a
        damaged checkpoint) is a :class:`DataError` naming the entry (``compute[0]``), and
        nothing is loaded:
        a micro-batch or a GPU count that is not a whole number in ``1..MAX_INT``, a timing
        or statistic that is no number, an entry that is no pair (they were a bare
        KeyError, TypeError, ValueError or IndexError, or were read as something else:
        ``2.5`` GPUs as 2, a micro-batch of 0)."""
        compute, sync, stats = _parse_state(state)
        self._compute, self._sync, self._stats = compute, sync, stats
        self._fit = None
        self._cache.clear()
        self._version += 1

    def _best(self, replicas: int, sync: float, sqr: float, var: float) -> int:
        limits = self.limits
        init, top = limits.init_batch, limits.max_batch
        first, last = max(1, -(-init // replicas)), top // replicas
        best: tuple[float, int] | None = None  # (goodput, executed global batch)
        while first <= last:  # in chunks: a max_batch of 2**30 needs no 16 GiB array
            stop = min(last, first + _CHUNK - 1)
            totals = np.arange(first, stop + 1, dtype=np.int64)
            found = self._best_of(totals, replicas, sync, sqr, var)
            if found is not None and (best is None or found[0] > best[0]):
                best = found  # a later chunk wins only when strictly better: ties stay smaller
            if best is not None:
                useful = self._useful_total(replicas, sync, sqr, var, best[0])
                if useful < last:
                    last = int(useful)
            first = stop + 1
        if best is None:
            return min(top, max(init, replicas * limits.min_local))
        return best[1]

    def _best_of(
        self, totals: npt.NDArray[np.int64], replicas: int, sync: float, sqr: float, var: float
    ) -> tuple[float, int] | None:
        """(goodput, executed global batch) of the best of these per-replica totals, the
        first of equals; None when none of them can be executed within the limits."""
        limits = self.limits
        init, top = limits.init_batch, limits.max_batch
        lo_local, hi_local = limits.min_local, limits.max_local
        # the executed split: the fewest micro-batches that fit, of equal size. In whole
        # numbers: ceil(x - 1e-8) of a float ratio made 1 / (2**31 - 1) (the default
        # max_local) zero micro-batches, and dropped every total below 22 samples.
        batch = totals * replicas
        accum = -(-totals // hi_local) - 1
        if replicas == 1:
            accum = np.where(batch > init, np.maximum(accum, 1), accum)
        atomic = -(-totals // (accum + 1))
        atomic = np.minimum(atomic, top // (replicas * (accum + 1)))
        executed = replicas * atomic * (accum + 1)
        ok = (atomic >= lo_local) & (executed >= init)
        if not np.any(ok):
            return None
        atomic, accum, executed = atomic[ok], accum[ok], executed[ok]
        alpha, beta = self._line()
        compute = alpha + beta * atomic
        iteration = (accum + 1) * compute + (sync if replicas > 1 else 0.0)
        if sqr <= 0 and var <= 0:
            gain = np.ones_like(executed)
        else:
            if math.isinf(var + sqr):  # both near a float's largest: inf / inf, the smallest
                var, sqr = var / 2, sqr / 2  # batch chosen; halved exactly, the same ratio
            scale = executed / init
            gain = (var + sqr) / (var / scale + sqr)
        good = gain / iteration
        i = int(np.argmax(good))
        return float(good[i]), int(executed[i])

    def _useful_total(
        self, replicas: int, sync: float, sqr: float, var: float, goodput: float
    ) -> float:
        """A per-replica total beyond which no batch beats ``goodput`` (``inf``: none known).

        The gain is at most ``(var + sqr) / sqr`` (1 when both are 0). A total ``L`` runs
        ``s >= L / max_local`` micro-batches of ``a >= floor(L / s) >= min_local`` samples, so
        its iteration time (``s * (alpha + beta * a)`` plus a sync >= 0) is at least
        ``s * c_min`` and at least ``beta * (L - s + 1)``, ``c_min = alpha + beta *
        min_local``: at least ``k * L`` with ``k = max(c_min * beta / (c_min + beta), c_min /
        max_local)``. Past ``gain_max / (k * goodput)`` the bound is below ``goodput``."""
        if sqr > 0 and var >= 0:
            gain_max = (var + sqr) / sqr
        elif sqr <= 0 and var <= 0:
            gain_max = 1.0
        else:
            return math.inf  # pure noise: the gain grows with the batch without bound
        alpha, beta = self._line()
        c_min = alpha + beta * self.limits.min_local
        if alpha < 0 or beta < 0 or c_min <= 0 or (replicas > 1 and sync < 0):
            return math.inf
        k = max(c_min * beta / (c_min + beta), c_min / self.limits.max_local)
        if not (k > 0 and goodput > 0):
            return math.inf
        return gain_max / (k * goodput) * (1 + 1e-9) + 1


_CHUNK = 1 << 16
"""Per-replica totals :meth:`SelfTuner.choose` evaluates at once."""


_WHOLE = "from 1 to 2**62"
"""The range of a micro-batch or a node's GPU count (``MAX_INT``), in words."""


def check_placement(placement: tuple[int, ...]) -> tuple[int, ...]:
    """``placement`` when it is one: a non-empty tuple of the GPUs used on each node (empty
    nodes dropped), each a whole number in ``1..MAX_INT`` (2**62); else a :class:`SpecError`
    naming it (a NaN or 2.5 GPUs was read as a placement, a 0 or ``()`` divided by zero, a
    list was a bare TypeError)."""
    if not isinstance(placement, tuple) or not _gpu_counts(placement):
        raise SpecError(
            "placement",
            "must be a non-empty tuple of the GPUs used on each node, each a whole number "
            f"{_WHOLE}, got {quoted(placement)}",
        )
    return placement


def _parse_state(
    state: object,
) -> tuple[dict[int, float], dict[tuple[int, ...], float], tuple[float, float] | None]:
    """The compute times, sync times and statistics of :meth:`SelfTuner.state_dict` output
    ``state``, as :meth:`SelfTuner.load_state_dict` takes them; :class:`DataError` naming
    the entry that is not as that writes it."""
    if not isinstance(state, Mapping):
        raise DataError(f"the tuner state must be a mapping, got {quoted(state)}")
    compute: dict[int, float] = {}
    for where, atomic, seconds in _pairs(state, "compute"):
        if not _usable_batch(atomic):
            raise DataError(
                f"the tuner state's {where}: the micro-batch must be a whole number "
                f"{_WHOLE}, got {quoted(atomic)}"
            )
        if _stored_seconds(seconds, where):
            compute[int(atomic)] = float(seconds)
    sync: dict[tuple[int, ...], float] = {}
    for where, placement, seconds in _pairs(state, "sync"):
        if not _is_list(placement) or not _gpu_counts(placement):
            raise DataError(
                f"the tuner state's {where}: the placement must be a non-empty list of GPU "
                f"counts, each a whole number {_WHOLE}, got {quoted(placement)}"
            )
        if _stored_seconds(seconds, where):
            sync[tuple(int(gpus) for gpus in placement)] = float(seconds)
    stats = state.get("stats")
    if stats is None or (_is_list(stats) and not stats):
        return compute, sync, None
    if not _is_list(stats) or len(stats) != 2 or not all(map(is_real_number, stats)):
        raise DataError(
            f"the tuner state's stats must be null or a pair of numbers, got {quoted(stats)}"
        )
    loaded = (as_float(stats[0]), as_float(stats[1]))
    return compute, sync, loaded if _usable_stats(loaded) else None


def _pairs(state: Mapping[str, Any], key: str) -> list[tuple[str, Any, Any]]:
    """The entries of ``state[key]`` (missing: none), each ``[what, seconds]``, with where
    each is (``compute[0]``); :class:`DataError` naming what is no such list."""
    entries = state.get(key, [])
    if not _is_list(entries):
        raise DataError(f"the tuner state's {key} must be a list of pairs, got {quoted(entries)}")
    pairs = []
    for index, entry in enumerate(entries):
        where = f"{key}[{index}]"
        if not _is_list(entry) or len(entry) != 2:
            raise DataError(f"the tuner state's {where} must be a pair, got {quoted(entry)}")
        pairs.append((where, entry[0], entry[1]))
    return pairs


def _gpu_counts(placement: Sequence[Any]) -> bool:
    """Whether ``placement`` names at least one node and each node's GPUs are a whole number
    from 1 to ``MAX_INT`` (:func:`check_placement`, and a stored one)."""
    return bool(placement) and all(_usable_batch(gpus) for gpus in placement)


def _is_list(value: object) -> bool:
    """Whether ``value`` is a list or tuple (what a checkpoint holds), not text."""
    return isinstance(value, list | tuple)


def _stored_seconds(value: object, where: str) -> bool:
    """Whether ``value``, a stored timing, is one to load (:func:`usable_seconds`); a
    :class:`DataError` naming ``where`` when it is no number."""
    if not is_real_number(value):
        raise DataError(
            f"the tuner state's {where}: the seconds must be a number, got {quoted(value)}"
        )
    return usable_seconds(value)  # type: ignore[arg-type]


def usable_seconds(value: float) -> bool:
    """True for a measured time :class:`SelfTuner` can use: a real number (not a bool),
    finite and >= 0 (``danlu.train`` skips the others before they reach it)."""
    return is_real_number(value) and math.isfinite(as_float(value)) and value >= 0


def _usable_batch(value: int) -> bool:
    """True for a micro-batch :class:`SelfTuner` can use: a whole number in ``1..MAX_INT``."""
    return is_whole_number(value) and 1 <= value <= MAX_INT


def _usable_stats(stats: tuple[float, float]) -> bool:
    """True when both gradient statistics are finite real numbers >= 0, as
    :class:`~danlu.estimate.goodput.GradientStats` takes them (``danlu.train`` passes only
    positive ones). A negative ``sqr`` (an unbiased estimator's, unclamped) put a zero or a
    sign change in the gain's denominator: an infinite gain at one batch, which was then
    chosen whatever it cost."""
    return all(
        is_real_number(value) and math.isfinite(as_float(value)) and value >= 0 for value in stats
    )


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
