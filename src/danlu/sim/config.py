"""The simulator's settings (:class:`SimConfig`), checked when built."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from danlu.core.errors import ConfigError
from danlu.sched.project_usage import MAX_WEIGHT, MIN_WEIGHT
from danlu.sched.quota import Quotas
from danlu.sim.failures import Failures
from danlu.sim.interference import Interference
from danlu.sim.setting_types import (
    check_instance,
    check_project_shares,
    check_real,
    check_whole,
)

MIN_INTERVAL = 1e-3
"""The shortest ``interval`` (seconds between scheduling instants): a round every
millisecond is far finer than any scheduler's, and the clock advances by it up to 4e12 s
(over 100,000 years; floats there are 1/2048 s apart). A tinier one (``1e-300``) did not
advance the clock at all: the next tick rounded back to the instant, for ever."""


@dataclass(frozen=True)
class SimConfig:
    """Simulation settings."""

    interval: float = 60.0
    """Seconds between scheduling instants (at least :data:`MIN_INTERVAL`)."""
    restart_cost: float = 30.0
    """Seconds of held GPUs without progress charged per (re)allocation."""
    event_rounds: bool = False
    """Also schedule at every arrival and completion, not only on the interval grid."""
    record_events: bool = False
    """Keep every state-change event (memory grows with the workload)."""
    max_time: float = math.inf
    """Stop the clock here (seconds, >= 0; ``math.inf``: run until every job has ended);
    jobs submitted by then and not finished are reported as unfinished, every job submitted
    after it as not submitted (``SimResult.not_submitted``), one that could never have run
    too (its rejection would have come at its submission)."""
    idle_retries: int = 5
    """Rounds in a row a policy may start nothing on an idle cluster, with jobs waiting and
    none left to arrive, before the engine fails the ones that hold the queue up
    (:mod:`danlu.sim.stuck`) and goes on; only while its plan says the decision may change
    with time (a finite ``Plan.recheck_at``: Pollux, for one, gives a job of age 0 no
    GPUs). With ``recheck_at`` infinite they fail at once."""
    interference: Interference | None = None
    """Slow jobs that share a GPU by how fast Gavel measured such pairs
    (:mod:`danlu.sim.interference`); ``None``: sharing costs a job nothing. Applies to every
    job that holds part of a GPU: rigid jobs that ask for one, and profiled jobs a policy
    placed on shares of GPUs (these take a new speed from the next instant, as they advance
    interval by interval)."""
    project_shares: Mapping[str, float] = field(default_factory=dict)
    """Projects' weights for fair-share policies, by the workload's ``project`` names (a
    project missing has weight 1)."""
    failures: Failures | None = None
    """How nodes fail (:mod:`danlu.sim.failures`); ``None``: they never do."""
    gpu_failures: Failures | None = None
    """How single GPUs fail, each on its own (the rest of its node works on); ``None``:
    they never do."""
    quotas: Quotas = field(default_factory=Quotas)
    """Projects' and users' quotas, by the workload's ``project`` and ``user`` names, kept
    as the server keeps them (:class:`danlu.sched.quota.QuotaPolicy` around the policy): a
    job waits while its start would pass one, and a job that alone passes one is rejected."""

    def __post_init__(self) -> None:
        self._check_types()
        if not MIN_INTERVAL <= self.interval < math.inf:
            raise ConfigError(
                f"interval (--interval) must be at least {MIN_INTERVAL:g} s (one scheduling "
                f"round a millisecond) and finite, got {self.interval:g}"
            )
        if not 0 <= self.restart_cost < math.inf:
            raise ConfigError(
                "restart_cost (--restart-cost) must be >= 0 seconds and finite, "
                f"got {self.restart_cost}"
            )
        if math.isnan(self.max_time):
            raise ConfigError(
                "max_time must be a number of seconds (inf: no limit), got nan: NaN compares "
                "false with every instant, so the clock never stopped"
            )
        if self.max_time < 0:
            raise ConfigError(
                f"max_time must be >= 0 seconds (inf: no limit), got {self.max_time:g}: "
                "submissions are at 0 s or later, so the clock would stop before any of them"
            )
        if self.idle_retries < 0:
            raise ConfigError(f"idle_retries must be >= 0 rounds, got {self.idle_retries}")
        for name, weight in self.project_shares.items():
            if not (math.isfinite(weight) and weight > 0):
                raise ConfigError(f"project_shares: {name}'s weight must be above 0, not {weight}")
            if weight > MAX_WEIGHT:
                raise ConfigError(
                    f"project_shares (--project-share): {name}'s weight must be at most "
                    f"{MAX_WEIGHT:,.0f}, not {weight:g}; weights are relative: divide them all "
                    "by the same number"
                )
            if weight < MIN_WEIGHT:
                raise ConfigError(
                    f"project_shares (--project-share): {name}'s weight must be at least "
                    f"{MIN_WEIGHT:.6f}, not {weight!r}; weights are relative: multiply them "
                    "all by the same number"
                )

    def _check_types(self) -> None:
        """Refuse a setting of the wrong type (given through the Python API) as a
        :class:`ConfigError` naming it: the checks of values that follow raised bare
        TypeErrors or AttributeErrors on them (``interval="60"``, ``project_shares`` a list),
        or the run failed later (``failures=3``)."""
        check_real("interval (--interval)", self.interval, "60.0")
        check_real("restart_cost (--restart-cost)", self.restart_cost, "30.0")
        check_real("max_time", self.max_time, "86400.0 (math.inf: no limit)")
        check_whole("idle_retries", self.idle_retries, "5")
        check_instance("interference", self.interference, Interference, optional=True)
        check_project_shares(self.project_shares)
        check_instance("failures", self.failures, Failures, optional=True)
        check_instance("gpu_failures", self.gpu_failures, Failures, optional=True)
        check_instance("quotas", self.quotas, Quotas)
