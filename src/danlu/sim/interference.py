"""Co-location slowdown in the simulator: how fast a job runs while it shares a GPU.

Off by default (``SimConfig.interference`` is ``None``): jobs sharing a GPU then each run
at full speed, as if the GPU were theirs. With a model (``danlu sim run --interference
FILE``, Gavel's ``physical_cluster_throughputs.json``), a job that shares a GPU with others
runs at :meth:`Interference.rate` of its speed alone, recomputed whenever a job joins or
leaves its GPU.

The model is measured, not predicted: for a job of family ``a`` beside one of family ``b``
it is the median, over Gavel's measured pairs of those families (every batch size and
scale), of the ``a`` job's throughput beside the ``b`` job divided by its throughput alone
(:func:`danlu.estimate.colocation.measured_pairs`). A job whose family is unknown (empty,
or a family Gavel did not measure), or beside such a job, runs at the median over all
measured jobs. Gavel measured pairs only; beside several jobs a job's rate is the product
of its rates beside each (an assumption: each neighbour takes its share of what is left).
Rates are capped at 1 (a few of Gavel's pairs measure a job no slower, within noise).

The ``danlu`` policy's sharing rule predicts from the same file, by a different statistic
(the median *combined* throughput of a pair of families); the simulator's rates are what
the jobs then actually get.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from danlu.core.errors import DataError
from danlu.estimate.colocation import gavel_family, measured_pairs


@dataclass(frozen=True)
class Interference:
    """Each job's normalised throughput beside another, by the families of the two."""

    shares: Mapping[tuple[str, str], float]
    """(job's family, other job's family) -> the job's throughput beside the other divided
    by its throughput alone, in (0, 1]."""
    default: float
    """The same for a pair with a family not in :attr:`shares`."""

    def share(self, family: str, other: str) -> float:
        """A ``family`` job's normalised throughput beside one ``other`` job."""
        return self.shares.get((family, other), self.default)

    def rate(self, family: str, others: Iterable[str]) -> float:
        """A ``family`` job's speed beside ``others`` (their families), as a fraction of its
        speed alone: the product of its rates beside each; 1.0 beside nobody."""
        rate = 1.0
        for other in others:
            rate *= self.share(family, other)
        return rate

    @classmethod
    def from_gavel(cls, path: str | Path, gpu: str = "v100") -> Interference:
        """Calibrate on Gavel's ``physical_cluster_throughputs.json`` (its ``gpu`` section):
        the median normalised throughput of each ordered pair of families, and the median of
        all as the default. Raises :class:`~danlu.core.errors.DataError` naming the file."""
        by_pair: dict[tuple[str, str], list[float]] = {}
        every: list[float] = []
        for pair in measured_pairs(path, gpu):
            a, b = gavel_family(pair.job), gavel_family(pair.other)
            for key, value in (((a, b), pair.job_share), ((b, a), pair.other_share)):
                value = min(value, 1.0)
                by_pair.setdefault(key, []).append(value)
                every.append(value)
        if not every:
            raise DataError(f"{path}: no pair measured on {gpu!r} where both jobs progressed")
        return cls(
            shares={key: statistics.median(values) for key, values in sorted(by_pair.items())},
            default=statistics.median(every),
        )
