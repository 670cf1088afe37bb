"""Profiled application model for trace-driven simulation (Pollux OSDI'21 traces).

``traces/<app>/`` holds, for one training application measured on real GPUs:
``placements.csv`` (seconds per iteration and its gradient-sync part for every placement of
at most four nodes -- ``"1122"`` = four nodes with 1, 1, 2, 2 replicas -- at several per-GPU
batch sizes), ``scalability.csv`` (the same for larger clusters, by node and replica counts)
and ``validation-<batch>.csv`` (per epoch at that global batch: progress reached and the
gradient statistics ``grad_sqr``/``grad_var``). :class:`ApplicationProfile` turns them into
step times, statistical gains, epoch boundaries and a completion target; :class:`JobProgress`
advances one job. The numeric rules follow the Pollux artifact's simulator so its published
job completion times can be reproduced.

Units: *progress* counts iterations at the initial (smallest validated) batch size, so one
iteration at batch ``b`` is worth ``gain(b)`` units, and ``gain`` is 1 at the initial batch.
"""

from __future__ import annotations

import csv
import math
import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from danlu.core.errors import DanluError, DataError
from danlu.core.values import plain_float, quoted
from danlu.sim.csv_rows import bounded_lines, check_no_extra_values, column_names
from danlu.sim.workload_rows import undecodable_line

if TYPE_CHECKING:  # scipy.interpolate costs ~0.5 s to import: loaded only when interpolating
    from scipy.interpolate import LinearNDInterpolator

Placement = tuple[int, ...]

RESTART_SECONDS = 30.0
"""Seconds without progress charged after each (re)allocation in the Pollux study."""

_MAX_INTERPOLATED_NODES = 16  # node counts above this are clamped before interpolating
_EPS = 1e-8  # slack for ceil() on batch-size ratios, as the artifact uses


class OutOfProfileError(DanluError, ValueError):
    """A configuration (placement, batch size) that the measured traces do not cover."""


@dataclass(frozen=True)
class AppOverride:
    """Per-application settings the artifact fixes instead of deriving them from traces."""

    max_epochs: int | None = None
    max_local_bsz: int | None = None
    adaptive: bool = True
    """Whether the application's jobs adapt their batch size in-process (Pollux runs every
    job adaptive except NCF, whose batch the artifact fixes at 32768)."""


APP_OVERRIDES: dict[str, AppOverride] = {
    "bert": AppOverride(max_epochs=2),
    "cifar10": AppOverride(max_epochs=100),
    "ncf": AppOverride(max_epochs=10, adaptive=False),
    "imagenet": AppOverride(max_epochs=90),
    "deepspeech2": AppOverride(max_epochs=80),
    "yolov3": AppOverride(max_epochs=50, max_local_bsz=8),
}
"""Settings of the Pollux artifact (``applications.py``); YOLOv3's per-GPU batch is
capped at 8 although 16 was measured."""


@dataclass(frozen=True)
class BatchConfig:
    """How a global batch is executed: per-GPU micro-batch and accumulation steps."""

    num_replicas: int
    atomic_bsz: int
    accum_steps: int

    @property
    def batch_size(self) -> int:
        """Global batch actually trained per optimizer step."""
        return self.num_replicas * self.atomic_bsz * (self.accum_steps + 1)


def canonical_placement(placement: tuple[int, ...]) -> Placement:
    """Drop empty nodes, rotate to the smallest rotation (``2211`` -> ``1122``, not ``1212``)."""
    nodes = tuple(int(n) for n in placement if n)
    if not nodes:
        return ()
    return min(nodes[i:] + nodes[:i] for i in range(len(nodes)))


_Columns = tuple[np.ndarray, np.ndarray, np.ndarray]  # three columns of one trace table


class ApplicationProfile:
    """Measured behaviour of one training application. Treat instances as immutable.

    Attributes:
        name: application name (the trace folder's name).
        init_batch_size: smallest validated global batch size; gain is 1 there.
        max_batch_size: largest validated global batch size.
        min_local_bsz / max_local_bsz: per-GPU micro-batch limits (the measured range;
            ``max_local_bsz`` stands in for the GPU-memory limit).
        max_epochs: epochs to train; the job completes when it finishes the last one.
        max_node_replicas: the most replicas measured on one node.
        adaptive: whether its jobs may adapt their batch size in-process.
        validated_batch_sizes: the batch sizes that have a ``validation-*.csv``.
        epoch_boundaries: progress at the end of epoch 1, 2, ..., ``max_epochs``.
        target_progress: progress at which the job completes (the last boundary).
    """

    def __init__(
        self,
        name: str,
        *,
        validation: dict[int, _Columns],
        placements: dict[Placement, _Columns],
        scalability: list[tuple[float, float, float, float, float]],
        override: AppOverride | None = None,
    ) -> None:
        """Build a profile from parsed trace tables (use :func:`load_profile` normally).

        ``validation`` maps batch size to (progress, grad_sqr, grad_var) columns;
        ``placements`` maps the trace's placement to its measured rows; ``scalability`` is
        a list of (num_nodes, num_replicas, local_bsz, step_time, sync_time) rows.
        """
        override = override or AppOverride()
        self.name = name
        self.validated_batch_sizes: tuple[int, ...] = tuple(sorted(validation))
        self.init_batch_size = self.validated_batch_sizes[0]
        self.max_batch_size = self.validated_batch_sizes[-1]
        all_local = np.concatenate([m[0] for m in placements.values()])
        self.min_local_bsz = int(all_local.min())
        self.max_local_bsz = override.max_local_bsz or int(all_local.max())
        self.adaptive = override.adaptive
        min_rows = min(len(v[0]) for v in validation.values())
        self.max_epochs = override.max_epochs or min_rows
        if self.max_epochs > min_rows:
            raise DataError(
                f"{name}: max_epochs={self.max_epochs} but a validation file has {min_rows} rows"
            )
        n = self.max_epochs
        progress = np.stack([validation[b][0][:n] for b in self.validated_batch_sizes])
        self._grad_sqr = np.stack([validation[b][1][:n] for b in self.validated_batch_sizes])
        self._grad_var = np.stack([validation[b][2][:n] for b in self.validated_batch_sizes])
        # An epoch ends where the slowest-progressing batch size ends it.
        self.epoch_boundaries: tuple[float, ...] = tuple(float(p) for p in progress.min(axis=0))
        self.target_progress = self.epoch_boundaries[-1]
        self._placements = placements
        self._scalability = scalability
        self.max_node_replicas = max(max(p) for p in placements)
        """The most replicas measured on one node (placements with more per node are
        outside the profile)."""
        self._nd: LinearNDInterpolator | None = None
        self._flat: str | None = None
        """Why the measured points cannot be interpolated between (too few, or all in one
        plane), once an interpolation was tried; None: they can (or none was tried)."""
        self._step_cache: dict[tuple[Placement, float], tuple[float, float]] = {}
        self._gain_cache: dict[tuple[float, int], float] = {}
        self._rigid_cache: dict[tuple[int, float], BatchConfig] = {}
        self._iter_cache: dict[tuple[Placement, int, int], float] = {}

    # ---- throughput -------------------------------------------------------------------

    def step_time(self, placement: tuple[int, ...], local_bsz: float) -> tuple[float, float]:
        """Seconds per iteration and its synchronisation part at this per-GPU batch.

        Measured placements (in any rotation) are interpolated linearly in ``local_bsz``
        between that placement's rows. Other placements are interpolated linearly over
        (nodes, replicas, local_bsz) on a Delaunay triangulation of the per-count means of
        the measured placements plus the scalability rows (nodes clamped to 16).

        Raises:
            OutOfProfileError: the point lies outside the measured range.
        """
        key = (tuple(placement), float(local_bsz))
        hit = self._step_cache.get(key)
        if hit is not None:
            return hit
        canon = canonical_placement(placement)
        if not canon:
            raise OutOfProfileError(f"{self.name}: empty placement {placement!r}")
        measured = self._placements.get(canon)
        if measured is not None:
            xs, steps, syncs = measured
            lo, hi = xs[0], xs[-1]
            if not lo <= local_bsz <= hi:
                raise OutOfProfileError(
                    f"{self.name}: local batch {local_bsz} outside measured {lo:g}..{hi:g}"
                    f" for placement {canon}"
                )
            step = float(np.interp(local_bsz, xs, steps))
            sync = float(np.interp(local_bsz, xs, syncs))
        else:
            nodes = min(len(canon), _MAX_INTERPOLATED_NODES)
            out = self._interpolator()([[nodes, sum(canon), float(local_bsz)]])[0]
            step, sync = float(out[0]), float(out[1])
            if math.isnan(step) or math.isnan(sync):
                raise OutOfProfileError(
                    f"{self.name}: ({nodes} nodes, {sum(canon)} replicas, local batch"
                    f" {local_bsz}) is outside the measured scalability range"
                )
        result = (step, sync)
        self._step_cache[key] = result
        return result

    def _interpolator(self) -> LinearNDInterpolator:
        """The interpolation over (nodes, replicas, local_bsz), built on first use.

        Raises:
            OutOfProfileError: the measured points span no volume to interpolate in (fewer
                than four, or all in one plane: e.g. every measurement on one node count);
                only the measured placements can be run then.
        """
        if self._flat is not None:
            raise OutOfProfileError(self._flat)
        if self._nd is None:
            # Mean of the measured placements per (nodes, replicas, local_bsz), in sorted
            # key order, followed by the scalability rows in file order.
            groups: dict[tuple[float, float, float], list[tuple[float, float]]] = {}
            for canon, m in self._placements.items():
                for b, s, y in zip(*m, strict=True):
                    key = (float(len(canon)), float(sum(canon)), float(b))
                    groups.setdefault(key, []).append((float(s), float(y)))
            points: list[tuple[float, float, float]] = []
            values: list[tuple[float, float]] = []
            for key in sorted(groups):
                rows = groups[key]
                points.append(key)
                values.append(
                    (sum(r[0] for r in rows) / len(rows), sum(r[1] for r in rows) / len(rows))
                )
            for nn, nr, lb, st, sy in self._scalability:
                points.append((nn, nr, lb))
                values.append((st, sy))
            from scipy.interpolate import LinearNDInterpolator
            from scipy.spatial import QhullError

            try:
                self._nd = LinearNDInterpolator(np.array(points), np.array(values))
            except QhullError:  # qhull's own error reached the user as a raw traceback
                self._flat = (
                    f"{self.name}: its {len(points)} measured (nodes, replicas, local_bsz) "
                    "points (placements.csv's placements and scalability.csv's rows) lie in "
                    "one plane or are too few to interpolate a placement they do not "
                    "measure; run only the measured placements "
                    f"({', '.join(''.join(map(str, p)) for p in sorted(self._placements))}), "
                    "or measure more node and replica counts (scalability.csv)"
                )
                raise OutOfProfileError(self._flat) from None
        return self._nd

    @property
    def measured_placements(self) -> dict[Placement, _Columns]:
        """The measured placements (canonical) and their (local_bsz, step_time, sync_time)
        columns, sorted by ``local_bsz``. Do not modify."""
        return self._placements

    def interpolated_step_times(self, points: np.ndarray) -> np.ndarray:
        """(step, sync) seconds at each (nodes, replicas, local_bsz) row of ``points`` by the
        interpolation that :meth:`step_time` uses for unmeasured placements (NaN outside the
        measured range; nodes are clamped to 16 as there)."""
        rows = np.array(points, dtype=float, copy=True)
        rows[:, 0] = np.minimum(rows[:, 0], _MAX_INTERPOLATED_NODES)
        out: np.ndarray = self._interpolator()(rows)
        return out

    def grad_stats_many(self, batch_sizes: np.ndarray, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`grad_stats` for an array of batch sizes inside the validated range."""
        sizes = np.array(self.validated_batch_sizes, dtype=float)
        sqr = np.interp(batch_sizes, sizes, self._grad_sqr[:, epoch])
        var = np.interp(batch_sizes, sizes, self._grad_var[:, epoch])
        return sqr, var

    def rigid_config(self, num_replicas: int, batch_size: float) -> BatchConfig:
        """Per-GPU micro-batch and accumulation for a fixed global batch on N replicas.

        The local share is split into micro-batches no larger than ``max_local_bsz``; a
        single replica with a batch above the initial one accumulates at least once; the
        micro-batch is then capped so the global batch stays within ``max_batch_size``.
        """
        key = (num_replicas, float(batch_size))
        hit = self._rigid_cache.get(key)
        if hit is not None:
            return hit
        if num_replicas < 1:
            raise OutOfProfileError(f"{self.name}: num_replicas must be >= 1")
        local = math.ceil(batch_size / num_replicas - _EPS)
        accum = math.ceil(local / self.max_local_bsz - _EPS) - 1
        if num_replicas == 1 and batch_size > self.init_batch_size:
            accum = max(1, accum)
        atomic = math.ceil(local / (accum + 1) - _EPS)
        atomic = min(atomic, int(self.max_batch_size / (num_replicas * (accum + 1))))
        config = BatchConfig(num_replicas=num_replicas, atomic_bsz=atomic, accum_steps=accum)
        self._rigid_cache[key] = config
        return config

    def iteration_time(self, placement: tuple[int, ...], config: BatchConfig) -> float:
        """Seconds per optimizer step: one synchronised step plus ``accum_steps`` local ones."""
        key = (tuple(placement), config.atomic_bsz, config.accum_steps)
        hit = self._iter_cache.get(key)
        if hit is None:
            step, sync = self.step_time(placement, config.atomic_bsz)
            hit = step + (step - sync) * config.accum_steps
            self._iter_cache[key] = hit
        return hit

    # ---- statistical efficiency ------------------------------------------------------

    def epoch_at(self, progress: float) -> int:
        """Number of epochs completed at this progress (0 .. ``max_epochs``)."""
        return bisect_right(self.epoch_boundaries, progress)

    def grad_stats(self, batch_size: float, epoch: int) -> tuple[float, float]:
        """(grad_sqr, grad_var) during ``epoch`` (0-based), linear in batch size between
        the two nearest validated batch sizes."""
        sizes = self.validated_batch_sizes
        if not sizes[0] <= batch_size <= sizes[-1]:
            raise OutOfProfileError(
                f"{self.name}: batch size {batch_size} outside validated {sizes[0]}..{sizes[-1]}"
            )
        if not 0 <= epoch < self.max_epochs:
            raise OutOfProfileError(f"{self.name}: epoch {epoch} outside 0..{self.max_epochs - 1}")
        hi = bisect_left(sizes, batch_size)
        if sizes[hi] == batch_size:
            return float(self._grad_sqr[hi, epoch]), float(self._grad_var[hi, epoch])
        lo = hi - 1
        b_lo, b_hi = sizes[lo], sizes[hi]
        w_hi, w_lo, span = batch_size - b_lo, b_hi - batch_size, b_hi - b_lo
        sqr = (w_hi * self._grad_sqr[hi, epoch] + w_lo * self._grad_sqr[lo, epoch]) / span
        var = (w_hi * self._grad_var[hi, epoch] + w_lo * self._grad_var[lo, epoch]) / span
        return float(sqr), float(var)

    def gain(self, batch_size: float, epoch: int) -> float:
        """Progress per iteration at this global batch during ``epoch``.

        ``(var + sqr) / (var / scale + sqr)`` with ``scale = batch_size / init_batch_size``.
        """
        key = (float(batch_size), epoch)
        hit = self._gain_cache.get(key)
        if hit is None:
            sqr, var = self.grad_stats(batch_size, epoch)
            scale = batch_size / self.init_batch_size
            hit = (var + sqr) / (var / scale + sqr)
            self._gain_cache[key] = hit
        return hit

    def efficiency(self, progress: float, batch_size: float) -> float:
        """Statistical efficiency (progress per example relative to the initial batch).

        ``gain / scale``: 1 at the initial batch size, below 1 above it. Uses the gradient
        statistics of the epoch in progress (the last one once the job is complete).
        """
        epoch = min(self.epoch_at(progress), self.max_epochs - 1)
        return self.gain(batch_size, epoch) * self.init_batch_size / batch_size


class JobProgress:
    """Training progress of one job, advanced through simulated time.

    Mirrors the artifact's job model: after each (re)allocation the job first sits out
    the restart cost (see :meth:`restart`), then progresses at ``gain / iteration_time``
    per second; the gain is re-read at each epoch boundary; reaching a boundary takes
    ``round((boundary - progress) / rate)`` whole seconds, so times stay integral when
    the windows are; the job completes at its last epoch boundary.
    """

    __slots__ = (
        "attained_service",
        "done",
        "epoch",
        "profile",
        "progress",
        "restart_remaining",
        "round_to_seconds",
    )

    def __init__(self, profile: ApplicationProfile, *, round_to_seconds: bool = True) -> None:
        """Start a job at zero progress. ``round_to_seconds=False`` keeps exact epoch times."""
        self.profile = profile
        self.progress = 0.0
        self.epoch = 0
        self.done = False
        self.restart_remaining = 0.0
        self.attained_service = 0.0  # GPU-seconds held, restart time included
        self.round_to_seconds = round_to_seconds

    @property
    def fraction(self) -> float:
        """Share of the target progress reached, 0..1."""
        return min(1.0, self.progress / self.profile.target_progress)

    def restart(self, seconds: float = RESTART_SECONDS) -> None:
        """Charge a restart: the next ``seconds`` of allocated time make no progress.

        Call it whenever the job gets a new non-empty allocation (start, resume, resize).
        The countdown is replaced, not added to, and only runs while GPUs are held.
        """
        self.restart_remaining = float(seconds)

    def advance(
        self,
        seconds: float,
        placement: tuple[int, ...],
        batch_size: float | None = None,
        *,
        config: BatchConfig | None = None,
        interference: float = 0.0,
        stop_at_epoch: bool = False,
    ) -> float:
        """Run the job for up to ``seconds`` on ``placement`` (GPUs per node).

        The batch is ``config`` if given, else :meth:`ApplicationProfile.rigid_config` of
        ``batch_size`` on ``sum(placement)`` replicas. ``interference`` slows progress by
        that fraction. Returns the seconds used: all of them unless the job completes
        inside the window, in which case the job is done at ``start + returned``. A job
        without GPUs makes no progress (and its restart countdown waits); a done job uses 0.
        ``stop_at_epoch`` returns right after the first epoch boundary crossed (so that the
        caller may change the batch between epochs).
        """
        if self.done or seconds <= 0:
            return 0.0
        nodes = tuple(n for n in placement if n)
        if not nodes:
            return seconds
        gpus = sum(nodes)
        delay = min(self.restart_remaining, seconds)
        self.restart_remaining -= delay
        self.attained_service += delay * gpus
        used = delay
        left = seconds - delay
        if left <= 0:
            return used
        profile = self.profile
        if config is None:
            if batch_size is None:
                raise OutOfProfileError("advance() needs batch_size or config")
            config = profile.rigid_config(gpus, batch_size)
        elif config.num_replicas != gpus:
            raise OutOfProfileError(
                f"config for {config.num_replicas} replicas used on {gpus} GPUs"
            )
        slowdown = 1.0 - interference
        per_iteration = profile.iteration_time(nodes, config)
        boundaries = profile.epoch_boundaries
        while left > 0:
            rate = profile.gain(config.batch_size, self.epoch) / per_iteration * slowdown
            boundary = boundaries[self.epoch]
            if self.progress + rate * left < boundary:
                self.progress += rate * left
                used += left
                break
            exact = (boundary - self.progress) / rate
            step = min(float(round(exact)), left) if self.round_to_seconds else min(exact, left)
            self.epoch += 1
            self.progress = boundary
            used += step
            left -= step
            if self.epoch >= profile.max_epochs:
                self.done = True
                break
            if stop_at_epoch:
                break
        self.attained_service += (used - delay) * gpus
        return used


# ---- loading ------------------------------------------------------------------------

_VALIDATION = re.compile(r"validation-([0-9]+)\.csv")  # ASCII digits: \d takes any script's


_POSITIVE = "> 0"
_NON_NEGATIVE = ">= 0"
_COUNT = "a whole number >= 1"
_TESTS: dict[str, Callable[[float], bool]] = {
    _POSITIVE: lambda v: v > 0,
    _NON_NEGATIVE: lambda v: v >= 0,
    _COUNT: lambda v: v >= 1 and v.is_integer(),
}
_RULES: dict[str, tuple[str, str]] = {
    # A step time <= 0 made progress infinite or go backwards (the simulation hung).
    "step_time": (_POSITIVE, "seconds per iteration"),
    "sync_time": (_NON_NEGATIVE, "seconds of the iteration spent synchronising"),
    "local_bsz": (_COUNT, "examples per GPU"),
    "num_nodes": (_COUNT, "nodes measured"),
    "num_replicas": (_COUNT, "GPUs measured"),
    "progress": (_POSITIVE, "progress at the end of the epoch"),
    "grad_sqr": (_NON_NEGATIVE, "squared gradient norm"),
    "grad_var": (_NON_NEGATIVE, "gradient variance"),
}
"""Each measured column's rule (a key of :data:`_TESTS`) and what it measures
(``placement`` is checked on its own): what the step-time and gain formulas divide by, or
count with, must not be zero or negative."""


def _read_table(path: Path, columns: tuple[str, ...]) -> tuple[np.ndarray, list[int]]:
    """The named columns of a csv file as a 2-D float array (rows in file order) and each
    row's line in the file (where it ends; blank lines are skipped but counted). A UTF-8
    byte-order mark (a spreadsheet's export) is skipped, and the column names are read
    stripped and in any case (:func:`~danlu.sim.csv_rows.column_names`), as in workload
    files.

    Raises:
        DataError: the file is missing or unreadable, lacks a column, has no rows, or a value
            is not a finite number or breaks its column's rule in :data:`_RULES`; the
            message names the file, the line and the column.
    """
    if not path.is_file():
        raise DataError(f"missing trace file {path}")
    reader: csv.DictReader[str] | None = None
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:  # a byte-order mark skipped
            reader = csv.DictReader(bounded_lines(handle, path, "a trace table (--traces)"))
            # names stripped and in any case, as a workload's (` Step_Time` is step_time)
            reader.fieldnames = column_names(reader.fieldnames or [])
            missing = [c for c in columns if c not in reader.fieldnames]
            if missing:
                raise DataError(f"{path}: missing column(s) {', '.join(missing)}")
            rows = [(reader.line_num, row) for row in reader]
            width = len(reader.fieldnames or [])
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc}") from exc
    except (UnicodeDecodeError, csv.Error) as exc:
        # the line, not the decoder's position in the 8 KiB it had read ahead
        line = undecodable_line(path) if isinstance(exc, UnicodeDecodeError) else None
        line = line or max(reader.line_num if reader is not None else 1, 1)
        raise DataError(
            f"{path}:{line}: not a UTF-8 CSV file ({exc}); save the trace table as UTF-8 text"
        ) from None
    if not rows:
        raise DataError(f"{path}: no data rows")
    for line, row in rows:
        check_no_extra_values(path, line, width, row.get(None) or (), _PLACEMENT_FIX)
    table = np.empty((len(rows), len(columns)))
    for i, (line, row) in enumerate(rows):
        for j, column in enumerate(columns):
            cell = row[column]
            try:
                value = plain_float(cell)
            except (AttributeError, TypeError, ValueError):
                raise DataError(f"{path}:{line}: {column}={quoted(cell)} is not a number") from None
            rule, meaning = _RULES.get(column, ("", ""))
            finite = math.isfinite(value)
            if finite and (not rule or _TESTS[rule](value)):
                table[i, j] = value
                continue
            wanted = rule if finite else "a finite number"
            if meaning:
                wanted += f" ({meaning})"
            raise DataError(
                f"{path}:{line}: {column}={quoted(cell)} must be {wanted}; correct the "
                "measurement or remove the row"
            )
    return table, [line for line, _ in rows]


_PLACEMENT_FIX = "write a placement without commas (1122), or name every column in the header"
"""How a trace table's row with a value beyond its header is written instead (a placement
``1,1`` read as placement 1 at local_bsz 1)."""


def _check_sync_within_step(path: Path, table: np.ndarray, lines: list[int], step: int) -> None:
    """Refuse a row whose ``sync_time`` (column ``step + 1``) is not below its ``step_time``
    (column ``step``): an iteration's local part (``step - sync``) would be negative, and
    so would the time of a step that accumulates gradients; equal, the iteration computed
    nothing, and accumulating gradients would cost no time (a batch of any size in the time
    of one micro-batch), which no measurement can show."""
    for line, row in zip(lines, table, strict=True):
        if row[step + 1] > row[step]:
            raise DataError(
                f"{path}:{line}: sync_time={row[step + 1]:g} is above step_time={row[step]:g};"
                " the synchronisation is part of the iteration, so sync_time < step_time"
            )
        if row[step + 1] == row[step]:
            raise DataError(
                f"{path}:{line}: sync_time={row[step + 1]:g} equals step_time={row[step]:g},"
                " leaving no time to compute the micro-batch; sync_time must be below "
                "step_time (correct the measurement or remove the row)"
            )


def load_profile(app_dir: Path, override: AppOverride | None = None) -> ApplicationProfile:
    """Load one application's traces from ``app_dir`` (named after the application).

    ``override`` defaults to the artifact's entry in :data:`APP_OVERRIDES`, if any.

    Raises:
        DataError: the folder or a file is missing or malformed; the message names it.
    """
    app_dir = Path(app_dir)
    if not app_dir.is_dir():
        raise DataError(f"trace folder {app_dir} does not exist")
    path = app_dir / "placements.csv"
    table, lines = _read_table(path, ("placement", "local_bsz", "step_time", "sync_time"))
    _check_sync_within_step(path, table, lines, 2)
    placements: dict[Placement, _Columns] = {}
    for code in np.unique(table[:, 0]):
        digits = str(int(code))
        if code != int(code) or code < 1 or "0" in digits:
            raise DataError(f"{path}: bad placement {code!r}")
        rows = table[table[:, 0] == code]
        rows = rows[np.argsort(rows[:, 1], kind="stable")]
        if len(np.unique(rows[:, 1])) != len(rows):
            raise DataError(f"{path}: duplicate local_bsz for placement {digits}")
        placements[tuple(int(c) for c in digits)] = (rows[:, 1], rows[:, 2], rows[:, 3])
    override = override or APP_OVERRIDES.get(app_dir.name)
    smallest = int(table[:, 1].min())
    cap = None if override is None else override.max_local_bsz
    if cap is not None and cap < smallest:
        raise DataError(
            f"{path}: the smallest local_bsz {smallest} is above the per-GPU cap {cap} that "
            f"{app_dir.name} runs with; measure micro-batches of at most {cap} examples"
        )
    spath = app_dir / "scalability.csv"
    scols = ("num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time")
    stable, lines = _read_table(spath, scols)
    _check_sync_within_step(spath, stable, lines, 3)
    scalability = [(r[0], r[1], r[2], r[3], r[4]) for r in stable.tolist()]
    validation: dict[int, _Columns] = {}
    for path in sorted(app_dir.glob("validation-*.csv")):
        match = _VALIDATION.fullmatch(path.name)
        if match is None:
            raise DataError(f"{path}: expected validation-<batch size>.csv")
        batch = int(match.group(1))
        if batch < 1:
            raise DataError(
                f"{path}: the batch size in the name must be >= 1 (validation-<global batch "
                f"size>.csv), got {batch}"
            )
        if batch in validation:
            raise DataError(
                f"{path}: a second file for batch size {batch}; keep one validation-{batch}.csv"
            )
        table, lines = _read_table(path, ("progress", "grad_sqr", "grad_var"))
        if np.any(np.diff(table[:, 0]) <= 0):
            raise DataError(f"{path}: progress must increase from row to row")
        for line, (sqr, var) in zip(lines, table[:, 1:].tolist(), strict=True):
            if sqr == 0 and var == 0:  # the gain (var + sqr) / (var / scale + sqr) is 0/0
                raise DataError(
                    f"{path}:{line}: grad_sqr and grad_var are both 0; the statistical gain "
                    "(grad_var + grad_sqr) / (grad_var / scale + grad_sqr) needs one above 0"
                )
        validation[batch] = (table[:, 0], table[:, 1], table[:, 2])
    if not validation:
        raise DataError(f"{app_dir}: no validation-<batch size>.csv files")
    return ApplicationProfile(
        app_dir.name,
        validation=validation,
        placements=placements,
        scalability=scalability,
        override=override,
    )


def load_profiles(traces_dir: Path) -> dict[str, ApplicationProfile]:
    """Load every application folder under ``traces_dir`` (files there are ignored, and so
    are hidden folders, whose names start with ``.``: a ``.git`` or ``.ipynb_checkpoints``
    beside the applications was loaded as one, and its missing ``placements.csv`` refused
    the whole folder).

    Raises:
        DataError: ``traces_dir`` is missing or holds no application, or one is malformed.
    """
    traces_dir = Path(traces_dir)
    if not traces_dir.is_dir():  # a file was said not to exist
        what = "is not a folder" if traces_dir.exists() else "does not exist"
        raise DataError(
            f"traces folder {traces_dir} {what}; give the folder of per-application "
            "measurements (--traces), in the Pollux format"
        )
    apps = _application_folders(traces_dir)
    if not apps:
        hint = ""
        if (traces_dir / "placements.csv").is_file():  # one application's folder
            hint = (
                f": it holds placements.csv, so it is one application's folder; give the "
                f"folder above it, --traces {traces_dir.parent}"
            )
        raise DataError(f"traces folder {traces_dir} holds no application folders{hint}")
    for sub in apps:
        if not (sub / "placements.csv").is_file():
            raise DataError(_not_an_application(traces_dir, sub))
    return {sub.name: load_profile(sub) for sub in apps}


def _application_folders(traces_dir: Path) -> list[Path]:
    """The folders under ``traces_dir`` read as applications: the visible ones, by name."""
    return [
        sub for sub in sorted(traces_dir.iterdir()) if sub.is_dir() and not sub.name.startswith(".")
    ]


def _not_an_application(traces_dir: Path, sub: Path) -> str:
    """Why ``sub``, a folder under ``traces_dir`` without ``placements.csv``, is refused, and
    the fix: ``--traces`` one level too high (``../shared/data/pollux``, whose ``traces``
    folder holds the applications) was told only ``missing trace file
    .../pollux/traces/placements.csv``, naming neither the flag nor the folder to give."""
    missing = f"missing trace file {sub / 'placements.csv'}"
    nested = [app.name for app in _application_folders(sub) if (app / "placements.csv").is_file()]
    if nested:
        return (
            f"{missing}: {sub} holds the application folders ({', '.join(nested[:3])}"
            f"{', ...' if len(nested) > 3 else ''}), not one application's measurements; "
            f"give --traces {sub}"
        )
    return (
        f"{missing}: every folder in the traces folder {traces_dir} (--traces) is read as one "
        "application's measurements in the Pollux format (placements.csv, scalability.csv, "
        "validation-<batch>.csv); point --traces at a folder holding only such folders "
        "(e.g. ../shared/data/pollux/traces)"
    )
