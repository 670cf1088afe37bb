"""The sweep's searcher: which parameters trial ``n`` runs with, and which trials to stop.

Plain functions over value types (the control plane's adapter,
:mod:`danlu.server.services.sweeps`, turns its rows into them):

- :func:`trial_parameters` draws trial ``n``'s parameters: ``random`` each from a generator
  seeded with the sweep's seed, ``n`` and the parameter's name alone, so a trial's
  parameters do not depend on when it was drawn, on the other trials, or on the order the
  parameters are written in; ``grid`` takes the ``n``-th combination of the ``values``
  lists (the first parameter written varying slowest); ``tpe`` asks Optuna's TPE sampler
  (seeded with the seed and ``n``, told the parameters in the order of their names) given
  the ended trials' parameters and values (:class:`Ended`), and draws as ``random`` does
  for the first ``startup_trials``.
- :func:`median_stop` is the median stopping rule (Golovin et al., "Google Vizier", KDD 2017):
  stop a trial whose best value by its latest step is worse than the median of the other
  trials' best values by that step -- unless its training is done (:attr:`Curve.done`): its
  process is about to exit on its own, so stopping it saves nothing and would only record a
  finished trial as cut short. A report whose value is not finite (NaN, an infinity: a
  diverged trial) advances the trial's latest step but never becomes its best; a trial with
  no finite report has no best (:data:`math.inf` in its :class:`Curve`), worse than every
  value: the rule stops it, and it raises the median as a peer.
"""

from __future__ import annotations

import bisect
import math
import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from danlu.core.sweep import EarlyStopping, Parameter, SweepSpec

Value = str | int | float | bool


@dataclass(frozen=True)
class Ended:
    """An ended trial as ``tpe`` learns from it: its parameters and its best value of the
    metric (in the metric's own sign)."""

    parameters: Mapping[str, Value]
    value: float


def trial_parameters(
    spec: SweepSpec,
    n: int,
    ended: Sequence[Ended] = (),
    running: Sequence[Mapping[str, Value]] = (),
) -> dict[str, Value]:
    """The parameters of trial ``n`` (from 0) of ``spec``. ``tpe`` only (the other methods
    ignore them): ``ended``, the trials that ended with a value; ``running``, the parameters
    of the trials not ended yet, which the sampler counts as doing badly (Optuna's "constant
    liar"), so that trials drawn while others run try elsewhere."""
    if spec.method == "grid":
        return _grid_point(spec.parameters, n)
    if spec.method == "tpe" and n >= spec.startup_trials and ended:
        return _tpe(spec, n, ended, running)
    return {
        name: _draw(param, random.Random(f"danlu-sweep:{spec.seed}:{n}:{name}"))
        for name, param in spec.parameters.items()
    }


def _tpe(
    spec: SweepSpec, n: int, ended: Sequence[Ended], running: Sequence[Mapping[str, Value]]
) -> dict[str, Value]:
    """Ask a fresh Optuna study, told the ``ended`` and ``running`` trials, for the next
    point.

    Optuna works in floats, which hold integers exactly only up to 2**53 (the range
    2**53 + 1..2**53 + 3 drew 2**53, one near 2**62 drew NaN): an ``int`` parameter is
    searched as its offset from ``low``, exact while the range is narrower than 2**53, and
    a draw is kept within the range (a wider one's offsets are rounded)."""
    import optuna  # the ``hpo`` extra, checked at submission

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    distributions: dict[str, optuna.distributions.BaseDistribution] = {}
    offsets: dict[str, tuple[int, int]] = {}  # an int parameter's low and high
    for name, param in sorted(spec.parameters.items()):  # the order written does not count
        if param.values is not None:
            distributions[name] = optuna.distributions.CategoricalDistribution(param.values)
        elif param.distribution == "int":
            low, high = offsets[name] = param.int_bounds()
            distributions[name] = optuna.distributions.IntDistribution(0, high - low)
        else:
            low_f, high_f = param.float_bounds()
            distributions[name] = optuna.distributions.FloatDistribution(
                low_f, high_f, log=param.distribution == "log_uniform"
            )
    seed = random.Random(f"danlu-sweep-tpe:{spec.seed}:{n}").randrange(2**32)
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=0, constant_liar=True)
    goal = "minimize" if spec.metric is None else spec.metric.goal  # tpe: never None
    study = optuna.create_study(direction=goal, sampler=sampler)
    told = [(t.parameters, t.value) for t in ended if math.isfinite(t.value)]
    for parameters, value in [*told, *((p, None) for p in running)]:
        params = {k: v for k, v in parameters.items() if k in distributions}
        if set(params) != set(distributions):
            continue
        shifted = _offsets(params, offsets)
        if shifted is None:  # an int parameter's value no integer: not the spec's trial
            continue
        states = optuna.trial.TrialState
        state = states.COMPLETE if value is not None else states.RUNNING
        try:
            frozen = optuna.trial.create_trial(
                params=shifted, distributions=distributions, value=value, state=state
            )
        except ValueError:  # a value outside today's ranges: not the spec's trial
            continue
        study.add_trial(frozen)
    asked = study.ask(distributions)
    out: dict[str, Value] = {}
    for name in spec.parameters:
        drawn = asked.params[name]
        if name in offsets:
            low, high = offsets[name]
            drawn = low + min(max(int(drawn), 0), high - low)
        out[name] = drawn
    return out


def _offsets(
    params: Mapping[str, Value], offsets: Mapping[str, tuple[int, int]]
) -> dict[str, Value] | None:
    """``params`` with each int parameter's value as its offset from its ``low`` (as
    :func:`_tpe` searches it); None when one of them is no integer."""
    out = dict(params)
    for name, (low, _) in offsets.items():
        value = out[name]
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            return None
        out[name] = value - low
    return out


def _grid_point(parameters: Mapping[str, Parameter], n: int) -> dict[str, Value]:
    out: dict[str, Value] = {}
    rest = n
    names = list(parameters)
    for name in reversed(names):  # the last parameter varies fastest
        values = parameters[name].values or []
        rest, index = divmod(rest, len(values))
        out[name] = values[index]
    return {name: out[name] for name in names}


def _draw(param: Parameter, rng: random.Random) -> Value:
    if param.values is not None:
        return param.values[rng.randrange(len(param.values))]
    if param.distribution == "int":
        return rng.randint(*param.int_bounds())  # exact: a float rounds beyond 2**53
    low, high = param.float_bounds()
    if param.distribution == "log_uniform":
        # exp(log(x)) can round past x: a draw stays within the bounds the user gave
        return min(max(math.exp(rng.uniform(math.log(low), math.log(high))), low), high)
    return rng.uniform(low, high)


@dataclass(frozen=True)
class Curve:
    """One trial's objective over its steps, as best-so-far values (lower is better: a
    maximised metric is negated by :func:`curve`)."""

    steps: tuple[int, ...]
    """The steps with a report of the metric, ascending (a report that is not finite too)."""
    best: tuple[float, ...]
    """The best finite value by each of :attr:`steps`; :data:`math.inf` (worse than any
    value) while the trial has reported no finite value."""
    done: bool = False
    """The trial's training is done: its latest record that carries ``progress`` (danlu.train's
    fraction done) says 1 or more. The median rule does not stop it."""

    def best_by(self, step: int) -> float | None:
        """The best value reported at or before ``step``; None before the first report,
        :data:`math.inf` when no report by then was finite."""
        i = bisect.bisect_right(self.steps, step)
        return self.best[i - 1] if i else None

    @property
    def last_step(self) -> int:
        return self.steps[-1] if self.steps else -1


def curve(points: Sequence[tuple[int, float]], goal: str, done: bool = False) -> Curve:
    """A trial's :class:`Curve` from its ``(step, value)`` reports (any order); ``done``: its
    training is done (:attr:`Curve.done`). A value that is not finite (NaN, an infinity: the
    trial diverged) still counts as a report at its step, so that the trial is judged at the
    step it reached, but never as its best: -inf is no perfect loss."""
    sign = -1.0 if goal == "maximize" else 1.0
    steps: list[int] = []
    best: list[float] = []
    for step, value in sorted(points, key=lambda point: point[0]):  # NaN has no order
        v = sign * value if math.isfinite(value) else math.inf
        if steps and steps[-1] == step:
            best[-1] = min(best[-1], v)
            continue
        steps.append(step)
        best.append(min(v, best[-1]) if best else v)
    return Curve(tuple(steps), tuple(best), done)


STOPPED_EARLY = "stopped early: "
"""How the reason of every trial :func:`median_stop` rules out begins (dependencies on a
sweep read a trial cancelled with it as one that ended as its sweep meant)."""


def median_stop(
    rule: EarlyStopping, trial: Curve, others: Sequence[Curve], goal: str
) -> str | None:
    """Why the median rule stops ``trial`` now, or None to let it run: a trial whose training
    is done (:attr:`Curve.done`) runs on to its own exit. ``others``: every other trial of
    the sweep (running or ended, done or not) with at least one report. A trial with no
    finite value by the step (:attr:`Curve.best`) is worse than every value: it is stopped
    unless the median is no better, and as a peer it counts as worse than the others."""
    step = trial.last_step
    if trial.done or step < 0 or step < rule.min_steps:
        return None
    mine = trial.best_by(step)
    peers = [b for c in others if c.last_step >= step and (b := c.best_by(step)) is not None]
    if mine is None or len(peers) < rule.min_trials:
        return None
    median = statistics.median(peers)
    if mine <= median:
        return None
    sign = -1.0 if goal == "maximize" else 1.0
    if math.isinf(mine):  # only NaN or infinities reported: the median is finite
        return (
            f"{STOPPED_EARLY}no finite value by step {step} (NaN or infinite: diverged), "
            f"worse than the median {sign * median:.6g} of {len(peers)} other trials by "
            "that step"
        )
    return (
        f"{STOPPED_EARLY}best {sign * mine:.6g} by step {step} is worse than the median "
        f"{sign * median:.6g} of {len(peers)} other trials by that step"
    )
