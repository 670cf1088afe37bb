"""Step-time and throughput model of data-parallel SGD, fitted from measurements.

The model follows the structure of Pollux's performance model (Qiao et al., "Pollux:
Co-adaptive Cluster Scheduling for Goodput-Optimized Deep Learning", OSDI 2021, section
3.2; the public ``petuum/adaptdl`` code), re-derived here:

* compute time of one micro-batch is linear in the local (per-replica) batch ``b``::

      T_compute(b) = alpha_c + beta_c * b

* gradient synchronisation (ring all-reduce) is bottlenecked by the slowest link. With
  ``N`` nodes and ``R`` replicas::

      T_sync(N, R) = alpha_n + beta_n * max(R - 2, 0)     if N > 1  (inter-node)
                   = alpha_r + beta_r * max(R - 2, 0)     if N = 1 and R > 1 (intra-node)
                   = 0                                    if R = 1

  ``alpha`` is the cost of one all-reduce over that link, ``beta`` the retrogression per
  replica beyond two.

* compute and synchronisation overlap partially (back-propagation and all-reduce run
  concurrently). The overlap is a ``gamma``-norm, ``gamma`` in [1, 10]: ``gamma = 1`` is
  no overlap (sum), ``gamma -> inf`` is perfect overlap (max)::

      T_step(b, N, R, s) = (s - 1) * T_compute(b)
                           + (T_compute(b)^gamma + T_sync(N, R)^gamma)^(1 / gamma)

  where ``s >= 1`` is the number of micro-batches per optimizer step (gradient
  accumulation; only the last one synchronises). Note: ``s`` counts *all* micro-batches,
  so ``s = 1`` is plain SGD (Pollux counts the extra ones).

Parameters are fitted by non-linear least squares (``scipy.optimize.least_squares``) on
*relative* (log) errors of two measured quantities per row: the whole step time, and the
compute-only time ``step_time - sync_time`` (the time of a non-synchronising
accumulation micro-batch). Log residuals make the fit minimise relative error, which is
what the MAPE target (seed 000 section 10.4: MAPE <= 10%) measures.
"""

from __future__ import annotations

import csv
import math
import numbers
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
from scipy.optimize import least_squares

from danlu.core.errors import DataError, SpecError
from danlu.core.spec import MAX_BATCH, MAX_DURATION, MAX_GPUS
from danlu.core.values import (
    MAX_INT,
    check_positive_int,
    plain_number_text,
    quoted,
    range_message,
)
from danlu.estimate.checks import as_float, check_finite, is_real_number

__all__ = [
    "StepMeasurement",
    "ThroughputModel",
    "ThroughputParams",
    "fit_throughput",
    "load_placements",
    "load_scalability",
    "mape",
    "parse_placement",
]

FloatArray = npt.NDArray[np.float64]

_GAMMA_MIN = 1.0
_GAMMA_MAX = 10.0
_EPS = 1e-8  # lower bound of the time parameters (keeps logs finite)
_GAMMA_STARTS = (1.0, 1.5, 3.0, 8.0)


def parse_placement(text: str) -> tuple[int, ...]:
    """Parse a Pollux placement string (per-node replica counts, ``"1122"``) into a tuple.

    Each character is one node's replica count (1-9). Raises :class:`SpecError` naming
    ``placement`` when the string is empty or holds anything but digits 1-9, or when
    ``text`` is not a string (None raised AttributeError).
    """
    if not isinstance(text, str):
        raise SpecError(
            "placement", f"must be a string of per-node replica counts, got {quoted(text)}"
        )
    text = text.strip()
    if not text or not all(ch in "123456789" for ch in text):
        raise SpecError(
            "placement",
            f"{text!r} is not a placement; write one digit 1-9 per node, e.g. '1122'",
        )
    return tuple(int(ch) for ch in text)


@dataclass(frozen=True, slots=True)
class StepMeasurement:
    """One measured training step: placement, local batch, step time and its sync part.

    ``step_time`` is seconds per optimizer step with one micro-batch per replica, at most
    ``MAX_DURATION`` (100 years); ``sync_time`` is the gradient-synchronisation part of it
    (0 for one replica).
    """

    num_nodes: int
    num_replicas: int
    local_bsz: int
    step_time: float
    sync_time: float

    def __post_init__(self) -> None:
        # The fit takes logs of step_time and step_time - sync_time: a row built in code
        # (not by the loaders, which check the same) with a zero compute part stopped
        # scipy with "Residuals are not finite", and 2 nodes of 1 replica fitted silently.
        _check_placement(self.num_nodes, self.num_replicas)
        check_positive_int("local_bsz", self.local_bsz)
        if self.local_bsz > MAX_BATCH:
            raise SpecError("local_bsz", range_message(1, MAX_BATCH, self.local_bsz))
        for name, value in (("step_time", self.step_time), ("sync_time", self.sync_time)):
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise SpecError(name, f"must be a number of seconds, got {quoted(value)}")
        # as_float: an int beyond float range (10**400) raised OverflowError in isfinite
        step, sync = as_float(self.step_time), as_float(self.sync_time)
        if not (math.isfinite(step) and step > 0):
            raise SpecError(
                "step_time",
                f"must be a finite number of seconds > 0, got {quoted(self.step_time)}",
            )
        if step > MAX_DURATION:  # 1e300 s stopped the fit with scipy's bare ValueError
            raise SpecError("step_time", f"is {quoted(self.step_time)}; it {_STEP_RANGE}")
        if not (math.isfinite(sync) and 0 <= sync < step):
            raise SpecError(
                "sync_time",
                f"must be >= 0 and less than step_time ({self.step_time}), got "
                f"{quoted(self.sync_time)}: a step "
                "that only synchronises leaves no compute time to fit",
            )

    @property
    def compute_time(self) -> float:
        """``step_time - sync_time``: the time of a micro-batch that does not synchronise."""
        return self.step_time - self.sync_time


def _load_csv(path: Path, columns: Sequence[str]) -> list[tuple[int, dict[str, str]]]:
    """The rows of the CSV file at ``path``, each with the line it starts on, keyed by the
    header's names stripped of spaces (``step_time, sync_time``, as the simulator's loaders
    read them); a UTF-8 byte-order mark is skipped. :class:`DataError` naming the file when
    one of ``columns`` is missing from the header or is in it more than once, and naming
    the line of a row with more values than the header has columns (they were dropped)."""
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:  # a byte-order mark skipped
            reader = csv.DictReader(handle)
            header = [name.strip() for name in reader.fieldnames or []]
            reader.fieldnames = header
            missing = [c for c in columns if c not in header]
            if missing:
                raise DataError(
                    f"{path}:1: missing column(s) {', '.join(missing)}; "
                    f"expected header {','.join(columns)}"
                )
            repeated = [c for c in columns if header.count(c) > 1]
            if repeated:
                raise DataError(
                    f"{path}:1: column(s) {', '.join(repeated)} appear more than once in the "
                    "header (spaces around names aside); keep one of each"
                )
            rows = []
            for row in reader:
                if None in row:  # DictReader keeps the values past the header's under None
                    raise DataError(
                        f"{path}:{reader.line_num}: {len(row[None])} value(s) more than the "
                        f"header's {len(header)} columns ({','.join(header)}); remove them "
                        "or name their column in the header"
                    )
                rows.append((reader.line_num, row))
            return rows
    except OSError as exc:
        raise DataError(f"{path}: cannot read measurements ({exc.strerror or exc})") from exc
    except UnicodeDecodeError as exc:  # a binary or non-UTF-8 file
        raise DataError(
            f"{path}: cannot read measurements: not UTF-8 text ({exc.reason} at byte "
            f"{exc.start}); give the CSV file"
        ) from exc
    except csv.Error as exc:  # e.g. a field beyond the csv module's size limit
        raise DataError(f"{path}: not a CSV file of measurements ({exc})") from exc


def _number(path: Path, line: int, row: dict[str, str], column: str) -> float:
    """The cell of ``column`` as a finite float, or a :class:`DataError` naming ``file:line``
    and the column (NaN, inf and values beyond float range, ``1e400``, too). Only a number
    written plainly is read (:func:`~danlu.core.values.plain_number_text`: ``1_000`` and
    other scripts' digits are not), as the simulator's loaders read theirs."""
    raw = row.get(column)
    if raw is not None and not plain_number_text(raw):
        raise DataError(
            f"{path}:{line}: column {column!r} is {raw!r}, expected a finite number written "
            "in ASCII digits 0-9 without '_' separators, e.g. 1000"
        )
    try:
        value = float(raw) if raw is not None else math.nan
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise DataError(f"{path}:{line}: column {column!r} is {raw!r}, expected a finite number")
    return value


_STEP_RANGE = (
    f"must be at most {MAX_DURATION:.0f} s (100 years, the longest a job spec may run); "
    "give step times in seconds"
)
"""The range of a step time: the fit failed (scipy's "Residuals are not finite") on times near
a float's largest, and a step longer than a job may run is a slip of units or of typing."""


def _check_times(path: Path, line: int, step: float, sync: float) -> None:
    """:class:`DataError` naming ``file:line`` and the column at fault unless
    ``0 < step_time <= MAX_DURATION``, ``sync_time >= 0`` and ``sync_time < step_time`` (the
    fit takes logs of the step time and of its compute part, ``step_time - sync_time``)."""
    if step <= 0:
        raise DataError(
            f"{path}:{line}: column 'step_time' must be seconds > 0 (the time of an "
            f"iteration), got {step:g}"
        )
    if step > MAX_DURATION:
        raise DataError(f"{path}:{line}: column 'step_time' is {step:g}; it {_STEP_RANGE}")
    if sync < 0:
        raise DataError(
            f"{path}:{line}: column 'sync_time' must be seconds >= 0 (the iteration's "
            f"gradient synchronisation), got {sync:g}"
        )
    if sync >= step:
        raise DataError(
            f"{path}:{line}: column 'sync_time' ({sync:g}) must be below step_time "
            f"({step:g}): the synchronisation is part of the iteration, which also computes"
        )


def _check_count(
    path: Path, line: int, column: str, value: float, high: int, what: str = ""
) -> None:
    """:class:`DataError` naming ``file:line`` and ``column`` (its ``what``: ``" (replicas)"``)
    unless ``value`` is within ``1..high`` (a local batch of 1e300 or 1e300 nodes was read as
    a measurement)."""
    if not 1 <= value <= high:
        raise DataError(f"{path}:{line}: column {column!r}{what} {range_message(1, high, value)}")


def _measurement(
    path: Path, line: int, row: dict[str, str], num_nodes: int, num_replicas: int
) -> StepMeasurement:
    bsz = _number(path, line, row, "local_bsz")
    step = _number(path, line, row, "step_time")
    sync = _number(path, line, row, "sync_time")
    if bsz < 1 or bsz != int(bsz):
        raise DataError(f"{path}:{line}: local_bsz {bsz} must be a positive integer")
    _check_count(path, line, "local_bsz", bsz, MAX_BATCH)
    _check_times(path, line, step, sync)
    return StepMeasurement(num_nodes, num_replicas, int(bsz), step, sync)


def load_placements(path: str | Path) -> list[StepMeasurement]:
    """Load a Pollux ``placements.csv`` (``placement,local_bsz,step_time,sync_time``).

    Rows keep file order. Raises :class:`DataError` naming ``file:line`` and the column for
    a missing file, a wrong header or a malformed value; a local batch beyond ``MAX_BATCH``
    or more than ``MAX_GPUS`` replicas (the most a job spec may give) is malformed.
    """
    path = Path(path)
    out = []
    for line, row in _load_csv(path, ("placement", "local_bsz", "step_time", "sync_time")):
        try:
            placement = parse_placement(row.get("placement") or "")
        except SpecError as exc:
            raise DataError(f"{path}:{line}: {exc}") from exc
        _check_count(path, line, "placement", sum(placement), MAX_GPUS, " (replicas)")
        out.append(_measurement(path, line, row, len(placement), sum(placement)))
    if not out:
        raise DataError(f"{path}: no measurement rows")
    return out


def load_scalability(path: str | Path) -> list[StepMeasurement]:
    """Load a Pollux ``scalability.csv`` (``num_nodes,num_replicas,local_bsz,step_time,
    sync_time``). Errors as in :func:`load_placements`."""
    path = Path(path)
    cols = ("num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time")
    out = []
    for line, row in _load_csv(path, cols):
        nodes = _number(path, line, row, "num_nodes")
        replicas = _number(path, line, row, "num_replicas")
        if nodes < 1 or replicas < nodes or nodes != int(nodes) or replicas != int(replicas):
            raise DataError(
                f"{path}:{line}: need integers 1 <= num_nodes <= num_replicas, got "
                f"{nodes}, {replicas}"
            )
        _check_count(path, line, "num_replicas", replicas, MAX_GPUS)  # (and so num_nodes)
        out.append(_measurement(path, line, row, int(nodes), int(replicas)))
    if not out:
        raise DataError(f"{path}: no measurement rows")
    return out


@dataclass(frozen=True, slots=True)
class ThroughputParams:
    """Parameters of the step-time model (seconds; ``gamma`` dimensionless, in [1, 10]).

    Built in code (not by :func:`fit_throughput`, whose bounds keep them valid) they are
    checked: every time is a finite number >= 0, ``alpha_c`` and ``beta_c`` not both 0,
    and ``gamma`` a number in [1, 10] (the fit's range); :class:`SpecError` names the field
    otherwise. A zero compute time, a NaN or a ``gamma`` of 0 (or of 2000) came back as NaN
    or infinite step times.
    """

    alpha_c: float
    beta_c: float
    alpha_n: float
    beta_n: float
    alpha_r: float
    beta_r: float
    gamma: float

    def __post_init__(self) -> None:
        for name in ("alpha_c", "beta_c", "alpha_n", "beta_n", "alpha_r", "beta_r"):
            check_finite(name, getattr(self, name), positive=False, what="a number of seconds")
        if self.alpha_c == 0 and self.beta_c == 0:
            raise SpecError(
                "beta_c",
                "alpha_c and beta_c are both 0, so a micro-batch takes no time; give the "
                "compute time's fixed part (alpha_c) or per-sample part (beta_c) in seconds",
            )
        gamma = check_finite("gamma", self.gamma, positive=False, what="an overlap exponent")
        if not _GAMMA_MIN <= gamma <= _GAMMA_MAX:  # 2000 gave infinite step times
            raise SpecError(
                "gamma",
                f"must lie within {_GAMMA_MIN:g}..{_GAMMA_MAX:g} (1: no overlap of compute "
                f"and sync; {_GAMMA_MAX:g}: nearly full), got {gamma}",
            )

    def as_array(self) -> FloatArray:
        """The parameters in field order."""
        return np.array(
            [
                self.alpha_c,
                self.beta_c,
                self.alpha_n,
                self.beta_n,
                self.alpha_r,
                self.beta_r,
                self.gamma,
            ],
            dtype=np.float64,
        )


def _check_local_bsz(local_bsz: float) -> None:
    # The model is continuous in b, so a fractional batch is fine; NaN and inf are not
    # (they passed a plain `<= 0` test and came back as a NaN step time), nor a string or
    # None (a bare TypeError), True (read as a batch of 1) or an int beyond float range
    # (a bare OverflowError).
    number = as_float(local_bsz) if is_real_number(local_bsz) else math.nan
    if not (math.isfinite(number) and number > 0):
        raise SpecError("local_bsz", f"must be a positive finite number, got {quoted(local_bsz)}")


def _check_placement(num_nodes: int, num_replicas: int) -> None:
    # Counts must be whole: NaN passed `< 1` and 1.5 nodes has no meaning; and no more than
    # a job may ask for (10**400 replicas overflowed the float arrays)
    check_positive_int("num_nodes", num_nodes)
    check_positive_int("num_replicas", num_replicas)
    if num_replicas > MAX_GPUS:
        raise SpecError("num_replicas", f"GPUs {range_message(1, MAX_GPUS, num_replicas)}")
    if num_replicas < num_nodes:
        raise SpecError(
            "num_replicas",
            f"must be at least num_nodes ({num_nodes}), got {num_replicas}: every node "
            "in a placement hosts at least one replica",
        )


def _check_config(local_bsz: float, num_nodes: int, num_replicas: int, accum_steps: int) -> None:
    _check_local_bsz(local_bsz)
    _check_placement(num_nodes, num_replicas)
    if (
        isinstance(accum_steps, bool)
        or not isinstance(accum_steps, numbers.Integral)
        or accum_steps < 1
    ):
        raise SpecError(
            "accum_steps",
            f"counts micro-batches per step, must be an integer >= 1, got {quoted(accum_steps)}",
        )
    if accum_steps > MAX_INT:  # 10**400 raised a bare OverflowError in the float product
        raise SpecError("accum_steps", range_message(1, MAX_INT, accum_steps))


def _predict(
    p: FloatArray, nodes: FloatArray, replicas: FloatArray, bsz: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """(compute time, synchronising step time) for arrays of configurations."""
    alpha_c, beta_c, alpha_n, beta_n, alpha_r, beta_r, gamma = p
    compute = alpha_c + beta_c * bsz
    extra = np.maximum(replicas - 2.0, 0.0)
    sync = np.where(
        nodes > 1, alpha_n + beta_n * extra, np.where(replicas > 1, alpha_r + beta_r * extra, 0.0)
    )
    # (c^g + s^g)^(1/g) computed as c * (1 + (s/c)^g)^(1/g) to avoid overflow.
    with np.errstate(all="ignore"):
        ratio = sync / compute
        step = compute * np.power(1.0 + np.power(ratio, gamma), 1.0 / gamma)
        if not np.all(np.isfinite(step)):
            # A compute time far below the sync (alpha_c = 1e-300, or b * beta_c gone to 0)
            # overflowed s/c: infinite or NaN step times. Scaled by the larger term instead
            # (kept where the first form is finite, so fitted answers do not move by a bit).
            high, low = np.maximum(compute, sync), np.minimum(compute, sync)
            scaled = np.divide(low, high, out=np.zeros_like(high), where=high > 0)
            stable = high * np.power(1.0 + np.power(scaled, gamma), 1.0 / gamma)
            step = np.where(np.isfinite(step), step, stable)
    return compute, step


@dataclass(frozen=True, slots=True)
class ThroughputModel:
    """A fitted step-time model; see the module docstring for the formula."""

    params: ThroughputParams

    def compute_time(self, local_bsz: float) -> float:
        """``T_compute(b) = alpha_c + beta_c * b``: seconds for one micro-batch's fwd+bwd.

        Raises :class:`SpecError` on ``local_bsz`` unless it is positive and finite."""
        _check_local_bsz(local_bsz)
        return self.params.alpha_c + self.params.beta_c * local_bsz

    def sync_time(self, num_nodes: int, num_replicas: int) -> float:
        """``T_sync(N, R)``: the all-reduce time by placement (0 for a single replica).

        Raises :class:`SpecError` unless ``1 <= num_nodes <= num_replicas`` are integers."""
        _check_placement(num_nodes, num_replicas)
        p = self.params
        extra = max(num_replicas - 2, 0)
        if num_nodes > 1:
            return p.alpha_n + p.beta_n * extra
        if num_replicas > 1:
            return p.alpha_r + p.beta_r * extra
        return 0.0

    def step_time(
        self, local_bsz: float, num_nodes: int, num_replicas: int, accum_steps: int = 1
    ) -> float:
        """Seconds per optimizer step::

            (s - 1) * T_compute(b) + (T_compute(b)^gamma + T_sync(N, R)^gamma)^(1/gamma)

        ``local_bsz`` is the micro-batch per replica, ``accum_steps`` (s) the number of
        micro-batches per optimizer step. Raises :class:`SpecError` naming the argument
        unless ``local_bsz`` is positive and finite (it may be fractional) and the counts
        ``1 <= num_nodes <= num_replicas`` and ``accum_steps >= 1`` are integers.
        """
        _check_config(local_bsz, num_nodes, num_replicas, accum_steps)
        compute, step = _predict(
            self.params.as_array(),
            np.array([num_nodes], dtype=np.float64),
            np.array([num_replicas], dtype=np.float64),
            np.array([local_bsz], dtype=np.float64),
        )
        return float((accum_steps - 1) * compute[0] + step[0])

    def step_times(
        self,
        local_bsz: npt.ArrayLike,
        num_nodes: npt.ArrayLike,
        num_replicas: npt.ArrayLike,
        accum_steps: npt.ArrayLike = 1,
    ) -> FloatArray:
        """Vectorised :meth:`step_time` (arguments broadcast; not validated)."""
        b, n, r, s = np.broadcast_arrays(
            np.asarray(local_bsz, dtype=np.float64),
            np.asarray(num_nodes, dtype=np.float64),
            np.asarray(num_replicas, dtype=np.float64),
            np.asarray(accum_steps, dtype=np.float64),
        )
        compute, step = _predict(self.params.as_array(), n, r, b)
        result: FloatArray = (s - 1.0) * compute + step
        return result

    def throughput(
        self, local_bsz: float, num_nodes: int, num_replicas: int, accum_steps: int = 1
    ) -> float:
        """Samples per second: ``R * b * s / T_step(b, N, R, s)``. :class:`SpecError` on
        ``local_bsz`` when the step takes 0 s in floating point (``alpha_c = 0`` and a local
        batch so small that ``beta_c * b`` underflows, 5e-324: a bare ZeroDivisionError)."""
        step = self.step_time(local_bsz, num_nodes, num_replicas, accum_steps)
        if step == 0:
            raise SpecError(
                "local_bsz",
                f"{quoted(local_bsz)} is so small that a step takes 0 s in floating point, "
                "so it has no throughput; give a larger local batch",
            )
        return num_replicas * local_bsz * accum_steps / step


def _arrays(rows: Sequence[StepMeasurement]) -> tuple[FloatArray, ...]:
    def col(values: list[float]) -> FloatArray:
        return np.array(values, dtype=np.float64)

    return (
        col([r.num_nodes for r in rows]),
        col([r.num_replicas for r in rows]),
        col([r.local_bsz for r in rows]),
        col([r.step_time for r in rows]),
        col([r.compute_time for r in rows]),
    )


def fit_throughput(rows: Iterable[StepMeasurement]) -> ThroughputModel:
    """Fit :class:`ThroughputModel` to measurements by least squares on log errors.

    Minimises ``sum (log T_step_pred - log step_time)^2 + (log T_compute_pred -
    log(step_time - sync_time))^2`` over the 7 parameters, with ``gamma`` in [1, 10] and
    every time parameter >= 1e-8 of the median measured compute time ``T`` (``beta_c``: >=
    1e-8 of ``T`` over the largest measured local batch): the fit runs in units of ``T`` and
    of that batch, so it does not depend on the unit of time. A fixed floor of 1e-8 s was
    larger than the whole step of a model timed in microseconds, and such a fit came back
    several hundred percent off (MAPE) without a word. Parameters the data cannot identify
    are pinned, as Pollux does: with one local batch size ``alpha_c`` is half the mean
    compute time; without multi-node rows the inter-node terms copy the intra-node ones
    (x1.1, a pessimistic prior); without single-node multi-replica rows the intra-node ones
    are tiny. A retrogression term is 0 without rows of more than 2 replicas on its own link
    (``beta_r``: on one node; ``beta_n``: across nodes), a little stricter than Pollux,
    which frees both once any row has more than 2 replicas and so let a multi-node row set
    the single-node term to whatever the solver stopped at.

    The result depends on the set of rows, not on their order: they are sorted first
    (the solver's floating-point path follows the row order, and with few rows that
    picked a different one of the equally good fits).

    Degenerate data is fitted, not refused: one row (or one local batch) pins ``alpha_c``
    as above and fits it exactly; step times equal at every local batch give a compute
    time flat in ``b`` (``beta_c`` at its floor); zero or negative times cannot reach the
    fit (:class:`StepMeasurement` refuses them). Check :func:`mape` on the rows for how
    well the model describes them.

    Raises :class:`DataError` when ``rows`` is empty.
    """
    measured = sorted(  # a list: an empty iterator passed `not rows`
        _measurements(rows, "fit_throughput"),
        key=lambda r: (r.num_nodes, r.num_replicas, r.local_bsz, r.step_time, r.sync_time),
    )
    if not measured:
        raise DataError("fit_throughput: no measurements; pass at least one StepMeasurement")
    nodes, replicas, bsz_s, step_s, compute_s = _arrays(measured)
    # units of the fit: the median compute time and the largest local batch (the solver's
    # bounds and tolerances are absolute); the parameters are scaled back to seconds
    time_unit, bsz_unit = float(np.median(compute_s)), float(np.max(bsz_s))
    bsz, step, compute = bsz_s / bsz_unit, step_s / time_unit, compute_s / time_unit
    log_step, log_compute = np.log(step), np.log(compute)

    free = np.ones(7, dtype=bool)
    fixed = np.array([0.0, 0.0, _EPS, 0.0, _EPS, 0.0, _GAMMA_MIN])
    single_bsz = len(np.unique(bsz)) == 1
    if single_bsz:
        free[0] = False
        fixed[0] = float(np.mean(compute)) / 2
    has_inter = bool(np.any(nodes > 1))
    has_intra = bool(np.any((nodes == 1) & (replicas > 1)))
    if not has_inter:
        free[2] = free[3] = False
    if not has_intra:
        free[4] = free[5] = False
    if not np.any((nodes > 1) & (replicas > 2)):
        free[3] = False
    if not np.any((nodes == 1) & (replicas > 2)):
        free[5] = False

    # Initial guess: a line through the compute times, syncs from the measured sync parts.
    if single_bsz:
        beta0 = max(float(np.mean(compute)) / 2 / float(bsz[0]), _EPS)
        alpha0 = fixed[0]
    else:
        beta0, alpha0 = np.polyfit(bsz, compute, 1)
        beta0, alpha0 = max(float(beta0), _EPS), max(float(alpha0), _EPS)
    sync = step - compute
    inter = float(np.median(sync[nodes > 1])) if has_inter else _EPS
    intra = float(np.median(sync[(nodes == 1) & (replicas > 1)])) if has_intra else _EPS
    x0_full = np.array([alpha0, beta0, max(inter, _EPS), _EPS, max(intra, _EPS), _EPS, 1.0])
    lower = np.array([_EPS, _EPS, _EPS, 0.0, _EPS, 0.0, _GAMMA_MIN])
    upper = np.array([np.inf] * 6 + [_GAMMA_MAX])

    def full(x: FloatArray) -> FloatArray:
        p = fixed.copy()
        p[free] = x
        return p

    def residuals(x: FloatArray) -> FloatArray:
        pred_compute, pred_step = _predict(full(x), nodes, replicas, bsz)
        return np.concatenate([np.log(pred_step) - log_step, np.log(pred_compute) - log_compute])

    # The overlap exponent makes the problem non-convex: start from a few gammas, keep the best.
    best_cost, best_x = math.inf, x0_full[free]
    for gamma0 in _GAMMA_STARTS:
        x0_full[6] = gamma0
        x0 = np.clip(x0_full[free], lower[free], upper[free])
        result = least_squares(residuals, x0, bounds=(lower[free], upper[free]), method="trf")
        if result.cost < best_cost:
            best_cost, best_x = float(result.cost), np.asarray(result.x, dtype=np.float64)
    p = full(best_x)
    if not has_inter:
        # Prior: an inter-node link is no faster than an intra-node one.
        p[2] = max(p[2], p[4] * 1.1)
        p[3] = max(p[3], p[5] * 1.1)
    p[:6] *= time_unit  # back to seconds (beta_c: seconds per sample)
    p[1] /= bsz_unit
    return ThroughputModel(ThroughputParams(*(float(v) for v in p)))


def mape(model: ThroughputModel, rows: Iterable[StepMeasurement]) -> float:
    """Mean absolute percentage error of predicted step times, in percent (seed 000 10.4):
    ``MAPE = 100 / n * sum_i |T_i - T_pred_i| / T_i``."""
    measured = _measurements(rows, "mape")  # a generator was read once per column: NaN
    if not measured:
        raise DataError("mape: no measurements to evaluate on")
    nodes, replicas, bsz, step, _ = _arrays(measured)
    pred = model.step_times(bsz, nodes, replicas)
    return float(np.mean(np.abs(step - pred) / step) * 100.0)


def _measurements(rows: Iterable[StepMeasurement], what: str) -> list[StepMeasurement]:
    """``rows`` as a list; :class:`SpecError` on ``rows`` unless every one is a
    :class:`StepMeasurement` (a tuple of its fields raised a bare AttributeError)."""
    measured = list(rows)
    for row in measured:
        if not isinstance(row, StepMeasurement):
            raise SpecError(
                "rows",
                f"{what}: each row must be a StepMeasurement (load_placements and "
                f"load_scalability read them from CSV), got {quoted(row)}",
            )
    return measured
