"""Capacity planning: the smallest cluster on which a workload meets its targets.

``danlu sim plan`` replays one workload with one policy on clusters of different sizes (the
same GPUs per node, more or fewer nodes) and looks for the fewest nodes at which every
target holds, e.g. ``avg_jct<=2h`` and ``p99_queueing_delay<=10m``. Every metric is taken to
fall (or stay) as nodes are added: times shrink, and so does the share of the GPUs in use.
So an upper bound (``<=``) holds from some size on, and a lower bound (``>=``, e.g.
``gpu_utilization>=0.5``: no idle cluster) up to some size. The search bisects between
``--min-nodes`` and ``--max-nodes`` for the fewest nodes meeting the upper bounds, then
checks the lower bounds there: if they miss at the smallest size fast enough, they miss
at every larger one too. Scheduling is not always so tidy (a policy's decisions can change a
run's figures either way by a few percent), so every size simulated is reported, and the
answer is a size that meets the targets with the size below it missing an upper bound (or
the smallest size allowed). A cluster on which some job can never run (it asks for more
GPUs than the cluster has) misses every target.

The search is a plain function over a ``simulate(nodes) -> summary`` callable
(:func:`plan_capacity`), so the CLI's simulator and a test's stand-in drive it alike.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

from danlu.core.errors import ConfigError, SpecError
from danlu.core.units import format_duration, parse_duration
from danlu.core.values import plain_float
from danlu.sim.setting_types import check_whole

SECONDS_METRICS: Final = frozenset(
    {
        "avg_jct",
        "median_jct",
        "p99_jct",
        "makespan",
        "avg_queueing_delay",
        "p99_queueing_delay",
        "interference_seconds",
    }
)
"""Metrics in seconds: their bound may be written as a duration (``2h``, ``90m``)."""

METRICS: Final = (
    *sorted(SECONDS_METRICS),
    "gpu_allocation_ratio",
    "gpu_utilization",
    "fragmentation",
    "preemptions",
    "restarts",
    "max_job_restarts",
    "timed_out",
)
"""The summary metrics a target may name (:meth:`danlu.sim.metrics.SimResult.summary`)."""

SAID_AS: Final = {
    "avg_wait": "avg_queueing_delay",
    "p99_wait": "p99_queueing_delay",
    "wait": "avg_queueing_delay",
    "jct": "avg_jct",
    "gpu_util": "gpu_utilization",
    "utilization": "gpu_utilization",
    "utilisation": "gpu_utilization",
}
"""The metric a target written as ``danlu sim plan``'s table heads its column (``p99 wait``,
``GPU util``) means, for the error's "did you mean" (``p99_wait`` is nearest
``p99_jct`` by spelling)."""

RATIO_METRICS: Final = frozenset({"gpu_allocation_ratio", "gpu_utilization", "fragmentation"})
"""Metrics from 0 to 1: a lower bound (``>=``) above 1 is refused, as no run meets it."""

MOST_NODES: Final = 4096
"""``max_nodes`` at most, as ``danlu sim plan --max-nodes`` (and ``--nodes``) bounds it: the
search simulates ``max_nodes`` nodes first, so a Python caller's ``max_nodes`` of 10**9
(a target no size meets, tried up to "as many as it takes") built a cluster of a billion
nodes, for ever or until memory ran out."""

_TARGET = re.compile(r"^\s*([a-z0-9_]+)\s*(<=|>=)\s*(\S.*?)\s*$")


@dataclass(frozen=True, slots=True)
class Target:
    """``metric op bound``: the run's ``metric`` must be at most (``<=``) or at least
    (``>=``) ``bound``."""

    metric: str
    op: str
    bound: float

    def met(self, summary: Mapping[str, float]) -> bool:
        """Whether ``summary`` meets this target (a missing or NaN value does not)."""
        value = summary.get(self.metric, math.nan)
        if math.isnan(value):
            return False
        return value <= self.bound if self.op == "<=" else value >= self.bound

    def __str__(self) -> str:
        """As written on the command line, a time bound as a duration: ``avg_jct<=2h``.
        The bound shown is the one checked, which :func:`parse_target` reads back exactly
        (a duration's text keeps two units: 3661 s was shown as ``1h1m``, 3660 s)."""
        return f"{self.metric}{self.op}{_bound_text(self.metric, self.bound)}"


def _bound_text(metric: str, bound: float) -> str:
    """``bound`` as :func:`parse_target` reads it back to the same number: a time bound
    as a duration when one says it exactly (``2h``), else the number, as short as ``:g``
    writes it when that is exact, else in full (``:g`` keeps six digits)."""
    if metric in SECONDS_METRICS and bound > 0:
        duration = format_duration(bound)
        try:
            if parse_duration(duration, "--target") == bound:
                return duration
        except SpecError:  # days by their magnitude (1e+05d) are no duration to read
            pass
    short = f"{bound:g}"
    return short if float(short) == bound else repr(float(bound))


def parse_target(text: str, flag: str = "--target") -> Target:
    """``avg_jct<=2h``, ``p99_queueing_delay<=600``, ``gpu_utilization>=0.6``: a
    :class:`Target`. Raises :class:`ConfigError` naming ``flag`` and the fix."""
    match = _TARGET.match(text)
    if match is None:
        raise ConfigError(
            f"{flag} {text!r}: write METRIC<=BOUND or METRIC>=BOUND, e.g. {flag} avg_jct<=2h"
        )
    metric, op, raw = match.groups()
    if metric not in METRICS:
        near = [SAID_AS[metric]] if metric in SAID_AS else []
        near = near or difflib.get_close_matches(metric, METRICS, n=1, cutoff=0.6)
        hint = f"did you mean {near[0]}? " if near else ""
        raise ConfigError(
            f"{flag} {text!r}: unknown metric {metric!r}; {hint}valid: {', '.join(METRICS)}"
        )
    try:
        bound = parse_duration(raw, flag) if metric in SECONDS_METRICS else plain_float(raw)
    except (SpecError, ValueError):
        kind = (
            "a number of seconds or a duration (90m, 2h)"
            if metric in SECONDS_METRICS
            else "a number"
        )
        raise ConfigError(f"{flag} {text!r}: the bound must be {kind}") from None
    if not math.isfinite(bound):
        raise ConfigError(f"{flag} {text!r}: the bound must be finite")
    if op == "<=" and bound < 0:
        raise ConfigError(f"{flag} {text!r}: {metric} is never below 0, so no cluster meets it")
    if op == ">=" and metric in RATIO_METRICS and bound > 1:
        raise ConfigError(
            f"{flag} {text!r}: {metric} is a ratio from 0 to 1, so no cluster meets it"
        )
    return Target(metric, op, bound)


@dataclass(frozen=True, slots=True)
class Trial:
    """One cluster size simulated: its nodes, the run's summary, and whether it met every
    target (``missed``: the targets it missed, or why it could not run every job);
    ``big_enough``: every job ran and every upper bound (``<=``) held."""

    nodes: int
    summary: Mapping[str, float]
    missed: tuple[str, ...]
    big_enough: bool = False

    @property
    def met(self) -> bool:
        return not self.missed


@dataclass(frozen=True, slots=True)
class Plan:
    """What the search found: ``nodes`` (None when even ``max_nodes`` misses a target) and
    every size it simulated, smallest first."""

    nodes: int | None
    trials: tuple[Trial, ...] = field(default=())


Simulate = Callable[[int], tuple[Mapping[str, float], int]]
"""``simulate(nodes)`` -> (the run's summary, how many jobs could never run there)."""


def judge(nodes: int, summary: Mapping[str, float], rejected: int, targets: list[Target]) -> Trial:
    """The :class:`Trial` of a run on ``nodes`` nodes."""
    if rejected:
        return Trial(nodes, summary, (f"{rejected} job(s) never fit",))
    missed = [t for t in targets if not t.met(summary)]
    big_enough = all(t.op != "<=" for t in missed)
    return Trial(nodes, summary, tuple(map(str, missed)), big_enough)


def plan_capacity(
    simulate: Simulate, targets: list[Target], min_nodes: int, max_nodes: int
) -> Plan:
    """The fewest nodes in ``[min_nodes, max_nodes]`` at which every target holds: the
    fewest that are big enough (by bisection over ``simulate``, each size simulated once),
    if the lower bounds hold there too. :class:`ConfigError` for no target, or bounds that
    are not whole numbers with ``1 <= min_nodes <= max_nodes <= MOST_NODES``."""
    if not targets:
        raise ConfigError("give at least one --target, e.g. --target avg_jct<=2h")
    check_whole("min_nodes (--min-nodes)", min_nodes, "1")  # 1.5 nodes were bisected
    check_whole("max_nodes (--max-nodes)", max_nodes, "64")
    if not 1 <= min_nodes <= max_nodes:
        raise ConfigError(
            f"--min-nodes {min_nodes} and --max-nodes {max_nodes}: need 1 <= min <= max"
        )
    if max_nodes > MOST_NODES:
        raise ConfigError(
            f"max_nodes (--max-nodes) must be at most {MOST_NODES:,} nodes, got {max_nodes:,}: "
            "the search simulates that many first; bound the search to a cluster you "
            "would build"
        )
    tried: dict[int, Trial] = {}

    def trial(nodes: int) -> Trial:
        if nodes not in tried:
            summary, rejected = simulate(nodes)
            tried[nodes] = judge(nodes, summary, rejected, targets)
        return tried[nodes]

    def done(answer: int | None) -> Plan:
        return Plan(answer, tuple(tried[n] for n in sorted(tried)))

    if not trial(max_nodes).big_enough:
        return done(None)
    if trial(min_nodes).big_enough:
        return done(min_nodes if tried[min_nodes].met else None)
    low, high = min_nodes, max_nodes  # low is too small, high big enough
    while high - low > 1:
        middle = (low + high) // 2
        if trial(middle).big_enough:
            high = middle
        else:
            low = middle
    return done(high if tried[high].met else None)
