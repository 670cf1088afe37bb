"""Projects' weights and recent GPU usage, as the fair-share policy sees them.

A project's *recent usage* is the recency-weighted average of the milli-GPUs it held: a
GPU-second held ``age`` seconds ago counts ``2 ** (-age / half_life)``, and the sum is
divided by the weight of all the past (``half_life / ln 2``), so a project that has held 8
GPUs forever has a recent usage of 8,000 milli-GPU, and one that stopped ``half_life`` ago
4,000. It is Slurm's decayed fair-share usage (``PriorityDecayHalfLife``) in GPU units.

A stretch on GPUs from ``start`` to ``end`` contributes ``milli * stretch_weight(start, end,
now, half_life)``, with ``stretch_weight = 2 ** (-(now - end) / h) - 2 ** (-(now - start) /
h)``: the integral of the decay over the stretch, normalised. Adapters compute it from what
they know (the simulator with :class:`DecayingUsage` as stretches end, the control plane from
its job-run table) and hand it in :attr:`danlu.sched.view.ClusterView.projects`; a policy
that wants it says so with a ``usage_half_life`` attribute above 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from danlu.core.errors import ConfigError


@dataclass(frozen=True, slots=True)
class ProjectShare:
    """One project's weight and recent usage (see the module docstring)."""

    weight: float = 1.0
    """Relative share of the cluster: a project of weight 2 is owed twice what one of
    weight 1 is (Slurm's ``Shares``). One outside [:data:`MIN_WEIGHT`, :data:`MAX_WEIGHT`]
    is read as the nearest bound."""
    recent_milli: float = 0.0
    """Recency-weighted average milli-GPUs held; 0 when the policy asks for no history."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.weight) and self.weight > 0):
            raise ConfigError(f"a project's weight must be above 0, not {self.weight!r}")
        if not (math.isfinite(self.recent_milli) and self.recent_milli >= 0):
            raise ConfigError(f"a project's recent usage must be 0 or more: {self.recent_milli!r}")
        # A weight stored before the bounds (the control plane's projects may hold 1e-320)
        # is read as the nearest bound: divided by, 1e-320 overflowed every standing to inf.
        object.__setattr__(self, "weight", clamp_weight(self.weight))


MIN_WEIGHT = 1e-6
"""The smallest weight a project's share is read as (the control plane's too): a fair-share
round divides by the weights, and ``1000 / 1e-320`` is infinite, so every project of such a
weight holding any GPU stood level and the one holding most went first on a tie."""
MAX_WEIGHT = 1e6
"""The largest weight a project's share may be given (the control plane's too): a fair-share
round divides by the weights and adds them up, and two projects of weight 1e308 (their sum
infinite) were each owed no GPU."""


def clamp_weight(weight: float) -> float:
    """``weight`` brought into [:data:`MIN_WEIGHT`, :data:`MAX_WEIGHT`]."""
    return min(max(weight, MIN_WEIGHT), MAX_WEIGHT)


DEFAULT_SHARE = ProjectShare()


def usage_half_life(policy: object) -> float:
    """The half-life (seconds) of the recent usage ``policy`` reads; 0 when it reads none."""
    value = getattr(policy, "usage_half_life", 0.0)
    return float(value) if isinstance(value, int | float) and value > 0 else 0.0


def _check_half_life(half_life: float) -> None:
    """Refuse a half-life that is not a finite number of seconds above 0 (NaN passed a plain
    ``<= 0`` test and made every project's usage NaN)."""
    if not 0.0 < half_life < math.inf:
        raise ConfigError(
            f"half_life must be a finite number of seconds above 0, got {half_life!r}"
        )


def stretch_weight(start: float, end: float, now: float, half_life: float) -> float:
    """The normalised decay weight at ``now`` of a stretch on GPUs from ``start`` to ``end``
    (both at most ``now``): 1 for a stretch over all the past, 0 for an empty one."""
    _check_half_life(half_life)
    if end <= start:
        return 0.0
    recent = math.exp2(-(now - end) / half_life)
    old = math.exp2(-(now - start) / half_life)
    return max(0.0, recent - old)


def add_stretch(
    totals: dict[str, float],
    project: str,
    milli: float,
    start: float,
    end: float,
    now: float,
    half_life: float,
) -> None:
    """Add to ``totals[project]`` the weight at ``now`` of ``milli`` milli-GPUs held from
    ``start`` to ``end`` (an end past ``now`` is cut to it; a stretch that ran until now
    has ``end == now``)."""
    end = min(end, now)
    weight = stretch_weight(min(start, end), end, now, half_life)
    totals[project] = totals.get(project, 0.0) + milli * weight


class DecayingUsage:
    """Each project's recent usage from stretches reported as they end (the simulator's
    bookkeeping): :meth:`add` a stretch, :meth:`at` a time for the totals then. Stretches
    may be added in any order of their ends; totals are kept as of the latest time seen."""

    def __init__(self, half_life: float) -> None:
        _check_half_life(half_life)
        self.half_life = half_life
        self._totals: dict[str, float] = {}
        self._as_of = 0.0

    def _advance(self, to: float) -> None:
        if to > self._as_of:
            factor = math.exp2(-(to - self._as_of) / self.half_life)
            for project in self._totals:
                self._totals[project] *= factor
            self._as_of = to

    def add(self, project: str, milli: float, start: float, end: float) -> None:
        """Count ``milli`` milli-GPUs held by ``project`` from ``start`` to ``end``."""
        self._advance(end)
        add_stretch(self._totals, project, milli, start, end, self._as_of, self.half_life)

    def at(self, now: float) -> dict[str, float]:
        """Every project's recent usage at ``now`` (not before the latest stretch's end)."""
        self._advance(now)
        return dict(self._totals)


def shares_with_usage(
    weights: Mapping[str, float], recent: Mapping[str, float]
) -> dict[str, ProjectShare]:
    """The :class:`ProjectShare` of every project named in ``weights`` or ``recent`` (a
    project without a weight has weight 1)."""
    names = set(weights) | set(recent)
    return {
        name: ProjectShare(weights.get(name, 1.0), recent.get(name, 0.0)) for name in sorted(names)
    }
