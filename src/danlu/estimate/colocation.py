"""Gavel's co-location measurements: how fast two jobs run when they share one GPU.

Gavel (OSDI'20) ran pairs of training jobs on one GPU and published each job's throughput
alone and beside every other (``physical_cluster_throughputs.json``, in
``../shared/data/gavel``). Its layout, per GPU kind (``"v100"``, ``"p100"``, ``"k80"``):
``{job: {"null": throughput alone, other job: [job's throughput, other's throughput]}}``,
a job being the string ``"('<model> (batch size N)', scale)"``.

Two readers use it:

- the ``danlu`` policy's sharing rule (:mod:`danlu.sched.policies.danlu_share`) predicts
  from it whether a pair of model families gains by sharing a GPU (the pair's combined
  normalised throughput);
- the simulator (:mod:`danlu.sim.interference`) slows each job that shares a GPU by its
  own normalised throughput beside the others.

This module only reads the file: :func:`measured_pairs` yields every pair where both jobs
made progress, and :func:`gavel_family` names a Gavel job's model family
(:data:`danlu.core.spec.MODEL_FAMILIES`).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard

from danlu.core.errors import DataError

GAVEL_FAMILIES = {
    "ResNet-18": "cnn-small",
    "ResNet-50": "cnn-large",
    "Transformer": "transformer",
    "LM": "lstm",
    "Recommendation": "recommendation",
    "CycleGAN": "gan",
    "A3C": "rl",
}
"""The family of each model Gavel measured (its job names: ``'<model> (batch size N)'``)."""


@dataclass(frozen=True, slots=True)
class MeasuredPair:
    """Two jobs measured on one GPU: each one's throughput beside the other divided by its
    throughput alone (1.0: no slowdown)."""

    job: str
    other: str
    job_share: float
    other_share: float

    @property
    def combined(self) -> float:
        """The pair's combined normalised throughput (above 1: sharing is a gain)."""
        return self.job_share + self.other_share


def measured_pairs(path: str | Path, gpu: str = "v100") -> Iterator[MeasuredPair]:
    """Every pair of Gavel's file measured on ``gpu`` where both jobs made progress, as the
    file lists it (a pair may appear in both orders).

    Raises :class:`~danlu.core.errors.DataError` naming the file when it is not Gavel's
    layout or has no ``gpu`` section, and naming the entry when a throughput is not a
    finite number (``json`` reads ``NaN`` and ``Infinity``, which would give NaN shares)
    or is negative (it was skipped as a pair without progress), and naming the entry when
    a job's share (its throughput beside the other over its throughput alone) is above
    :data:`MAX_SHARE` (an infinite one gave the sharing rule an infinite gain)."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8-sig"))  # a byte-order mark skipped
    except (OSError, ValueError) as exc:
        raise DataError(f"{p}: cannot read Gavel's throughputs ({exc})") from None
    table = data.get(gpu) if isinstance(data, dict) else None
    if not isinstance(table, dict):
        kinds = ", ".join(sorted(data)) if isinstance(data, dict) else "none"
        raise DataError(f"{p}: no {gpu!r} section (it has: {kinds}); pick one of those")
    for name_a, row in table.items():
        solo_a = _solo(p, gpu, name_a, row)
        for name_b, pair in row.items():
            if name_b == "null" or name_b not in table:
                continue
            solo_b = _solo(p, gpu, name_b, table[name_b])
            if not (isinstance(pair, list) and len(pair) == 2 and all(_is_number(v) for v in pair)):
                raise DataError(
                    f"{p}: {gpu}.{name_a}.{name_b} is {pair!r}; expected the two jobs' "
                    "throughputs beside each other, [a, b]"
                )
            if not all(_is_finite(v) for v in pair):
                raise DataError(
                    f"{p}: {gpu}.{name_a}.{name_b} is {pair!r}; the two jobs' throughputs "
                    "must be finite numbers (not NaN or Infinity): fix or remove the entry"
                )
            if any(v < 0 for v in pair):
                raise DataError(
                    f"{p}: {gpu}.{name_a}.{name_b} is {pair!r}; a throughput cannot be "
                    "negative (0 is a job that made no progress): fix or remove the entry"
                )
            if solo_a and solo_b and pair[0] > 0 and pair[1] > 0:
                shares = (pair[0] / solo_a, pair[1] / solo_b)  # inf where one overflows
                if max(shares) > MAX_SHARE:
                    raise DataError(
                        f"{p}: {gpu}.{name_a}.{name_b} is {pair!r} beside the throughputs "
                        f"alone {solo_a!r} and {solo_b!r}: a share of "
                        f"{max(shares):.3g} times a job's speed alone (at most {MAX_SHARE:g} "
                        "is believed; Gavel's are near 1): fix or remove the entry"
                    )
                yield MeasuredPair(name_a, name_b, shares[0], shares[1])


MAX_SHARE = 1000.0
"""The largest normalised throughput (a job's throughput beside another over its
throughput alone) believed from the file: Gavel's measurements are at most a little above 1
(noise). A corrupt entry (a throughput of 1e308 beside one alone of 1e-10) gave an infinite
share, and the sharing rule's calibration an infinite gain."""


def _is_number(value: object) -> TypeGuard[int | float]:
    """True for an int or float that is not a bool (JSON's numbers)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_finite(value: int | float) -> bool:
    """True for a number a float holds finitely: not NaN or an infinity (``json`` reads
    ``NaN`` and ``Infinity``), nor an integer too large for a float."""
    try:
        return math.isfinite(value)
    except OverflowError:  # an int beyond a float's range
        return False


def _solo(path: Path, gpu: str, job: str, row: object) -> float:
    """The throughput alone (``"null"``) of ``job``'s ``row``; :class:`DataError` naming the
    file and the entry when the row is not Gavel's ``{"null": x, other: [a, b], ...}``."""
    solo = row.get("null") if isinstance(row, dict) else None
    if not _is_number(solo):
        raise DataError(
            f"{path}: {gpu}.{job} is not a job's row; expected an object with its throughput "
            "alone under \"null\" and a pair [job's, other's] under each other job"
        )
    if not _is_finite(solo):
        raise DataError(
            f"{path}: {gpu}.{job}.null is {solo!r}; the throughput alone must be a finite "
            "number (not NaN or Infinity): fix or remove the entry"
        )
    if solo < 0:
        raise DataError(
            f"{path}: {gpu}.{job}.null is {solo!r}; the throughput alone cannot be negative "
            "(0 is a job that made no progress): fix or remove the entry"
        )
    return float(solo)


def gavel_model(job: str) -> str:
    """The model of a Gavel job key, ``"('<model> (batch size N)', scale)"``:
    ``'<model> (batch size N)'`` (the key itself when it is not of that form)."""
    parts = job.split("'")
    return parts[1] if len(parts) > 1 else job


def gavel_family(job: str) -> str:
    """The family of a Gavel job key, ``"('<model> (batch size N)', scale)"``, or of its
    model (:func:`gavel_model`)."""
    name = gavel_model(job).split(" (batch size")[0]
    family = GAVEL_FAMILIES.get(name)
    if family is None:
        raise DataError(f"Gavel job {job!r}: model {name!r} has no family in GAVEL_FAMILIES")
    return family


@dataclass(frozen=True)
class ShareMedians:
    """Each job's normalised throughput beside another (capped at 1), as medians of
    Gavel's measurements: by ordered pair of families, by ordered pair of models, and of
    all (:func:`share_medians`)."""

    by_family: dict[tuple[str, str], float]
    by_model: dict[tuple[str, str], float]
    overall: float


def share_medians(path: str | Path, gpu: str = "v100") -> ShareMedians:
    """The medians of every measured job's normalised throughput beside the other job of
    its pair (:func:`measured_pairs`, each job of a pair counted, capped at 1: a few pairs
    measure a job no slower, within noise). Raises :class:`DataError` when ``gpu`` has no
    pair where both jobs progressed."""
    by_family: dict[tuple[str, str], list[float]] = {}
    by_model: dict[tuple[str, str], list[float]] = {}
    every: list[float] = []
    for pair in measured_pairs(path, gpu):
        a, b = gavel_family(pair.job), gavel_family(pair.other)
        m, n = gavel_model(pair.job), gavel_model(pair.other)
        for families, models, value in (
            ((a, b), (m, n), pair.job_share),
            ((b, a), (n, m), pair.other_share),
        ):
            value = min(value, 1.0)
            by_family.setdefault(families, []).append(value)
            by_model.setdefault(models, []).append(value)
            every.append(value)
    if not every:
        raise DataError(f"{path}: no pair measured on {gpu!r} where both jobs progressed")
    return ShareMedians(
        by_family={k: statistics.median(v) for k, v in sorted(by_family.items())},
        by_model={k: statistics.median(v) for k, v in sorted(by_model.items())},
        overall=statistics.median(every),
    )
