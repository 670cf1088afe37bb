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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

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
    layout or has no ``gpu`` section."""
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError) as exc:
        raise DataError(f"{p}: cannot read Gavel's throughputs ({exc})") from None
    table = data.get(gpu) if isinstance(data, dict) else None
    if not isinstance(table, dict):
        kinds = ", ".join(sorted(data)) if isinstance(data, dict) else "none"
        raise DataError(f"{p}: no {gpu!r} section (it has: {kinds}); pick one of those")
    for name_a, row in table.items():
        solo_a = row.get("null")
        for name_b, pair in row.items():
            if name_b == "null" or name_b not in table:
                continue
            solo_b = table[name_b].get("null")
            if solo_a and solo_b and pair[0] > 0 and pair[1] > 0:
                yield MeasuredPair(name_a, name_b, pair[0] / solo_a, pair[1] / solo_b)


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
