"""Co-location slowdown in the simulator: how fast a job runs while it shares a GPU.

Off by default (``SimConfig.interference`` is ``None``): jobs sharing a GPU then each run
at full speed, as if the GPU were theirs. With a model (``danlu sim run --interference
FILE``, Gavel's ``physical_cluster_throughputs.json``), a job that shares a GPU with others
runs at :meth:`Interference.rate` of its speed alone, recomputed whenever a job joins or
leaves its GPU.

The model is measured, not predicted. A job may name the model it trains as Gavel names it
(``model``, e.g. ``"ResNet-18 (batch size 64)"``; the ``model`` column of a plain workload):
beside another job that names one, it runs at exactly what Gavel measured for that pair
(its throughput beside the other divided by its throughput alone;
:func:`danlu.estimate.colocation.measured_pairs`). Otherwise, for a job of family ``a``
beside one of family ``b``, it is the median of that over Gavel's measured pairs of those
families (every batch size). A job whose family is unknown (empty, or a family Gavel did
not measure), or beside such a job, runs at the median over all measured jobs. Gavel
measured pairs only; beside several jobs a job's rate is the product of its rates beside
each (an assumption: each neighbour takes its share of what is left).
Rates are capped at 1 (a few of Gavel's pairs measure a job no slower, within noise).

The ``danlu`` policy's sharing rule predicts from the same file by family only (the
scheduler never sees ``model``); with every job's model named, the simulator's rates are
the measured pairs themselves, which spread widely around those families' medians.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from danlu.core.errors import ConfigError
from danlu.estimate.colocation import share_medians
from danlu.sim.setting_types import check_share

Kind = tuple[str, str]
"""What the slowdown knows of a job: (model as Gavel names it, or ""; family, or "")."""


@dataclass(frozen=True)
class Interference:
    """Each job's normalised throughput beside another: by the pair of models when both
    are known, else by the pair of families."""

    shares: Mapping[tuple[str, str], float]
    """(job's family, other job's family) -> the job's throughput beside the other divided
    by its throughput alone, in (0, 1]."""
    default: float
    """The same for a pair with a family not in :attr:`shares`."""
    model_shares: Mapping[tuple[str, str], float] = field(default_factory=dict)
    """(job's model, other job's model) -> the same, as measured for those two models."""

    def __post_init__(self) -> None:
        """Refuse a rate outside (0, 1] (given through the Python API) as a
        :class:`ConfigError` naming it: 2.0 or NaN ran as free sharing, and 0 or a negative
        rate ran the jobs for about 3 years of simulated time, all silently."""
        check_share("interference: default", self.default)
        for name in ("shares", "model_shares"):
            rates = getattr(self, name)
            if not isinstance(rates, Mapping):
                raise ConfigError(
                    f"interference: {name} must be a mapping of (job, other) pairs to rates "
                    f"in (0, 1], e.g. {{('gan', 'rl'): 0.5}}; got {type(rates).__name__}"
                )
            for pair, rate in rates.items():
                check_share(f"interference: {name}[{pair!r}]", rate)

    @property
    def models(self) -> frozenset[str]:
        """The models :attr:`model_shares` knows."""
        return frozenset(m for pair in self.model_shares for m in pair)

    def share(self, job: Kind, other: Kind) -> float:
        """A job's normalised throughput beside one ``other`` job."""
        if job[0] and other[0]:
            measured = self.model_shares.get((job[0], other[0]))
            if measured is not None:
                return measured
        return self.shares.get((job[1], other[1]), self.default)

    def rate(self, job: Kind, others: Iterable[Kind]) -> float:
        """A job's speed beside ``others``, as a fraction of its speed alone: the product of
        its rates beside each; 1.0 beside nobody."""
        rate = 1.0
        for other in others:
            rate *= self.share(job, other)
        return rate

    @classmethod
    def from_gavel(cls, path: str | Path, gpu: str = "v100") -> Interference:
        """Calibrate on Gavel's ``physical_cluster_throughputs.json`` (its ``gpu`` section):
        the medians of :func:`~danlu.estimate.colocation.share_medians`. Raises
        :class:`~danlu.core.errors.DataError` naming the file."""
        medians = share_medians(path, gpu)
        return cls(medians.by_family, medians.overall, medians.by_model)
