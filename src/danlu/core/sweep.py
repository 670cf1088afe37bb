"""The sweep spec: a hyper-parameter search that the control plane runs as trial jobs.

Minimal form (YAML or JSON)::

    name: lr-sweep
    trial:                        # a job spec, as for `danlu submit` (its name is optional)
      command: [python, train.py]
      resources: {gpus: 1}
    parameters:
      lr: {distribution: log_uniform, low: 1.0e-4, high: 0.1}
      layers: {distribution: int, low: 2, high: 8}
      optimizer: {values: [sgd, adam]}
    metric: {name: loss, goal: minimize}
    trials: 20                    # how many trials in all
    parallel: 4                   # how many at once (queued or running)

Each trial is a job named ``<sweep>-<n>`` (:func:`trial_name`) with the trial spec and three
more environment variables: ``DANLU_HPARAMS`` (the trial's parameters as a JSON object),
``DANLU_SWEEP_ID`` and ``DANLU_TRIAL`` (``n``, from 0); ``danlu.train.env.JobEnv.hparams``
reads them. A trial spec's ``checkpoint_dir`` is each trial's parent directory: the trial
checkpoints in ``<checkpoint_dir>/<its job name>`` (:func:`trial_checkpoint_dir`). The trial
reports ``metric.name`` in its metric records (``danlu.train`` reports what the loop logs).
``method: grid`` tries every combination of ``values`` lists instead of sampling, ``method:
tpe`` draws where the ended trials did best (Optuna's TPE sampler).
``early_stopping: {rule: median, min_steps: 100, min_trials: 3}`` stops a trial whose best
value by a step is worse than the median of the other trials' best values by that step.
A sweep without a ``metric`` just runs its trials (``random`` or ``grid``; ``tpe`` and the
early stopping need one); a *job array* (``danlu submit --array``, :mod:`danlu.core.job_array`)
is such a grid over one parameter, ``index``, with ``array: true``.

Errors are :class:`~danlu.core.errors.SpecError` naming the field, as for job specs.
"""

from __future__ import annotations

import json
import math
import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from danlu.core.errors import SpecError
from danlu.core.metric_record import RECORD_FIELDS, check_metric_name
from danlu.core.spec import (
    MAX_PATH,
    SPEC_LIMITS,
    JobSpec,
    beyond_store,
    check_finite,
    is_checkpoint_location,
    name_error,
    no_boolean,
    parse_spec,
    spec_error,
    true_or_false,
    valid_name,
)
from danlu.core.spec_text import given_words
from danlu.core.values import (
    MAX_INT,
    check_values,
    quoted,
    range_message,
    show_number,
)

MAX_TRIALS = 10_000
"""The most trials one sweep may run."""
MAX_PARALLEL = 1_000
MAX_PARAMETERS = 64
MAX_VALUES = 1_000
"""The most ``values`` one parameter may list."""
MEMBERSHIP_ENV = ("DANLU_SWEEP_ID", "DANLU_TRIAL")
"""What makes a job one of a sweep's trials: the variables a rerun of it leaves out."""
TRIAL_ENV = ("DANLU_HPARAMS", *MEMBERSHIP_ENV, "DANLU_ARRAY_INDEX")
"""The environment variables the control plane gives trials (a trial spec may not set them;
``DANLU_ARRAY_INDEX`` only a job array's)."""
ARRAY_PARAMETER = "index"
"""A job array's one parameter: each task's index."""
MAX_SEED = MAX_INT
"""The largest ``seed``: an integer the store takes (the server's bound on every integer)."""


def _finite_value(value: str | int | float | bool) -> str | int | float | bool:
    """Refuse a NaN or an infinity in a ``values`` list (pydantic runs this on each item, so
    that the error names it: ``parameters.lr.values.1``, as the server's check of the body
    does)."""
    if isinstance(value, float):
        check_finite(value)
    return value


_ListedValue = Annotated[str | int | float | bool, AfterValidator(_finite_value)]
"""One item of a parameter's ``values`` list, finite where it is a number."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Parameter(_Strict):
    """One searched parameter: ``values`` (a list to choose from), or a ``distribution``
    between ``low`` and ``high``: ``uniform``, ``log_uniform`` (uniform in the logarithm,
    both bounds positive) or ``int`` (an integer, both bounds included).

    An ``int`` distribution's bounds are integers, exact to the last digit (a float rounds
    2**53 + 1 to 2**53; a stored spec's ``5.0`` reads as 5): :meth:`int_bounds`. The others'
    are floats: :meth:`float_bounds`."""

    values: list[_ListedValue] | None = Field(default=None, min_length=1, max_length=MAX_VALUES)
    distribution: Literal["uniform", "log_uniform", "int"] | None = None
    low: int | float | None = None
    high: int | float | None = None
    _numbers = field_validator("low", "high", mode="before")(no_boolean)

    @field_validator("low", "high")
    @classmethod
    def _bound_type(cls, value: int | float | None, info: ValidationInfo) -> int | float | None:
        """An ``int`` distribution's whole float bound as the integer (a stored spec's
        ``5.0``), a float distribution's integer bound as the float; a bound that is not
        finite (NaN, an infinity, or text read as one: ``nan``, ``1e999``) is refused here,
        so that the error names the bound (``parameters.lr.low``), not the parameter; the
        rest is checked by :meth:`_one_kind`, naming the parameter."""
        if isinstance(value, float):
            check_finite(value)
        kind = info.data.get("distribution")
        if kind == "int" and isinstance(value, float) and value.is_integer():
            return int(value)  # finite: NaN and the infinities are no whole numbers
        if kind in ("uniform", "log_uniform") and isinstance(value, int):
            try:
                return float(value)
            except OverflowError:
                raise ValueError(
                    f"must be a finite number (within about 1.8e308; got {show_number(value)})"
                ) from None
        return value

    @model_validator(mode="after")
    def _one_kind(self) -> Parameter:
        if (self.values is None) == (self.distribution is None):
            raise ValueError(
                "give either values: [a, b, ...] or distribution: uniform | log_uniform | int "
                "with low and high"
            )
        if self.distribution is None:
            if self.low is not None or self.high is not None:
                raise ValueError("low and high go with a distribution, not with values")
            return self  # each value is checked as an item (:func:`_finite_value`)
        low, high = self.low, self.high
        if low is None or high is None:
            raise ValueError(f"a {self.distribution} distribution needs low and high")
        if low > high:  # exact between an int and a float too
            raise ValueError(f"low ({_shown(low)}) is above high ({_shown(high)})")
        if self.distribution == "int":
            if not (isinstance(low, int) and isinstance(high, int)):  # whole floats: ints
                raise ValueError("an int distribution needs whole numbers for low and high")
            if max(abs(low), abs(high)) > MAX_INT:
                # an integer the store takes (1e300 is a whole number too)
                raise ValueError(
                    f"an int distribution's low and high lie within -2**62..2**62 (got "
                    f"{_shown(low)}..{_shown(high)})"
                )
            return self
        if not math.isfinite(high - low):  # floats here (:meth:`_bound_type`)
            # a uniform draw is low + (high - low) * u: every trial drew inf, outside the
            # range and not JSON
            raise ValueError(
                f"the range {low:g}..{high:g} is too wide: high - low must be a "
                "finite number (within about 1.8e308); narrow it"
            )
        if self.distribution == "log_uniform" and low <= 0:
            raise ValueError(f"a log_uniform distribution needs low > 0 (got {low:g})")
        return self

    def int_bounds(self) -> tuple[int, int]:
        """An ``int`` distribution's ``low`` and ``high``, exact."""
        low, high = self.low, self.high
        if self.distribution != "int" or not (isinstance(low, int) and isinstance(high, int)):
            raise TypeError(f"int_bounds of a {self.distribution} parameter")
        return low, high

    def float_bounds(self) -> tuple[float, float]:
        """A ``uniform`` or ``log_uniform`` distribution's ``low`` and ``high``."""
        if self.distribution not in ("uniform", "log_uniform"):
            raise TypeError(f"float_bounds of a {self.distribution} parameter")
        return float(self.low or 0.0), float(self.high or 0.0)


def _count(prefix: str = "") -> Any:
    """A before-validator for a whole-number field (named ``prefix`` + its name in
    :data:`SWEEP_LIMITS`; else 0..2**62): :func:`~danlu.core.spec.no_boolean`, and a number
    beyond 2**62 refused with the field's range (``trials: 1e20`` got pydantic's "Unable to
    parse input string as an integer, exceeded maximum size")."""

    def check(value: Any, info: ValidationInfo) -> Any:
        no_boolean(value)
        name = f"{prefix}{info.field_name}"
        return beyond_store(value, SWEEP_LIMITS.get(name, (0, MAX_INT)))

    return check


def _shown(value: int | float) -> str:
    """A bound as an error message shows it: an integer exactly (``9,007,199,254,740,993``;
    a huge one by its magnitude), a float as ``%g``."""
    return show_number(value) if isinstance(value, int) else f"{value:g}"


class Metric(_Strict):
    """The trials' objective: the metric record field ``name``, minimised or maximised."""

    name: str = Field(min_length=1, max_length=64)
    goal: Literal["minimize", "maximize"] = "minimize"

    @property
    def sign(self) -> float:
        """-1 for a maximised metric, 1 for a minimised one: ``sign * value`` is lower when
        better."""
        return -1.0 if self.goal == "maximize" else 1.0


class EarlyStopping(_Strict):
    """The median stopping rule: a trial past ``min_steps`` whose best value so far is worse
    than the median of the best values of the other trials that reached its step (at least
    ``min_trials`` of them) is stopped (cancelled, its results kept)."""

    rule: Literal["median"] = "median"
    min_steps: int = Field(default=0, ge=0)
    min_trials: int = Field(default=3, ge=1, le=MAX_TRIALS)
    _numbers = field_validator("min_steps", "min_trials", mode="before")(_count("early_stopping."))


class SweepSpec(_Strict):
    """A hyper-parameter sweep as submitted."""

    name: str
    trial: dict[str, Any]
    """The job spec of every trial (validated as a :class:`~danlu.core.spec.JobSpec`, its
    name defaulting to the sweep's)."""
    parameters: dict[str, Parameter] = Field(min_length=1, max_length=MAX_PARAMETERS)
    metric: Metric | None = None
    """What the trials optimise; without it the sweep just runs them (no best trial)."""
    method: Literal["random", "grid", "tpe"] = "random"
    """``random``: independent draws; ``grid``: every combination of ``values`` lists;
    ``tpe``: Optuna's tree-structured Parzen estimator, which draws from where the ended
    trials did best (random for the first ``startup_trials``; needs ``danlu[hpo]`` on the
    server)."""
    trials: int | None = Field(default=None, ge=1, le=MAX_TRIALS)
    """How many trials in all; ``random`` and ``tpe`` need it, ``grid`` defaults to every
    combination."""
    startup_trials: int = Field(default=5, ge=0, le=MAX_TRIALS)
    """``tpe``: how many trials are drawn at random before the model guides the draws."""
    parallel: int = Field(default=1, ge=1, le=MAX_PARALLEL)
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    """Random draws come from the seed and the trial number alone; 0..:data:`MAX_SEED`."""
    early_stopping: EarlyStopping | None = None
    array: bool = False
    """A job array: one parameter, ``index``, a ``values`` list of whole numbers searched by
    ``grid``; each trial also gets ``DANLU_ARRAY_INDEX``."""
    _numbers = field_validator("trials", "startup_trials", "parallel", mode="before")(_count())
    _array = field_validator("array", mode="before")(true_or_false)

    @field_validator("seed", mode="before")
    @classmethod
    def _seed_range(cls, value: Any) -> Any:
        """The seed's range as the server's check of the body says it (:data:`SWEEP_LIMITS`),
        rather than pydantic's ``less than or equal to`` alone."""
        no_boolean(value)
        number = isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))
        if number and not 0 <= value <= MAX_SEED:
            raise ValueError(range_message(0, MAX_SEED, value))
        return value

    @model_validator(mode="after")
    def _check(self) -> SweepSpec:
        if not valid_name(self.name):
            raise ValueError(f"name: {name_error(self.name)}")
        if self.metric is None and self.method == "tpe":
            raise ValueError("metric: tpe search draws where trials did best; give a metric")
        if self.metric is None and self.early_stopping is not None:
            raise ValueError("metric: early stopping compares trials' values; give a metric")
        if self.array:
            index = self.parameters.get(ARRAY_PARAMETER)
            if (
                set(self.parameters) != {ARRAY_PARAMETER}
                or self.method != "grid"
                or index is None
                or not all(type(v) is int for v in index.values or ())
            ):
                raise ValueError(
                    "array: a job array has one parameter, index, with a values list of whole "
                    "numbers, and method: grid"
                )
        for key in self.parameters:
            if not key or len(key) > 64:
                raise ValueError(f"parameters: {key!r} is not a parameter name (1-64 chars)")
        if self.method == "grid":
            ranged = [k for k, p in self.parameters.items() if p.values is None]
            if ranged:
                raise ValueError(
                    f"parameters.{ranged[0]}: grid search takes values lists only; write "
                    "values: [...] or use method: random"
                )
            size = grid_size(self)
            if size > MAX_TRIALS:
                raise ValueError(
                    f"parameters: the grid has {show_number(size)} combinations; at most "
                    f"{MAX_TRIALS:,}: list fewer values, or use method: random with trials"
                )
        elif self.trials is None:
            raise ValueError(f"trials: {self.method} search needs how many trials to run, e.g. 20")
        return self

    @property
    def total(self) -> int:
        """How many trials the sweep runs."""
        if self.method == "grid":
            return min(self.trials or MAX_TRIALS, grid_size(self))
        return self.trials or 0

    def trial_spec(self, *, stored: bool = False) -> JobSpec:
        """The trials' job spec, validated (without the parameters' environment);
        ``stored``: of a sweep accepted before, read as it was taken
        (:func:`~danlu.core.spec.parse_spec`: a check added since for new specs does not
        stop its later trials)."""
        return parse_spec({"name": self.name, **self.trial}, stored=stored)


def trial_name(sweep_name: str, n: int) -> str:
    """Trial ``n``'s job name: ``<sweep_name>-<n>``, the sweep's name cut to fit a job name's
    63 characters. Unique within a sweep: the digits after the last ``-`` are ``n``."""
    suffix = f"-{n}"
    return sweep_name[: 63 - len(suffix)] + suffix


def trial_checkpoint_dir(checkpoint_dir: str | None, name: str) -> str | None:
    """The checkpoint directory of the trial whose job is named ``name``, when the trial spec
    names ``checkpoint_dir``: ``<checkpoint_dir>/<name>``, a directory of its own (every trial
    in the one directory resumed from the others' checkpoints, and their retention deleted
    each other's). None without one: each job then gets its own under the home at launch."""
    if checkpoint_dir is None:
        return None
    return checkpoint_dir + ("" if checkpoint_dir.endswith("/") else "/") + name


_BATCH_PARAMETER = re.compile(r"(global_?|train_?)?(batch(_?size)?|bs)")
"""A parameter name that says a batch size (``batch_size``, ``batch``, ``bs``,
``global_batch_size``, ``train_batch_size``; in any case, ``-`` as ``_``)."""


def fixed_batch_note(spec: SweepSpec, trial: JobSpec) -> str | None:
    """A note for a sweep that searches a batch size (a parameter named like one, see
    :data:`_BATCH_PARAMETER`) while its trial spec (``trial``, parsed) names
    ``training.global_batch_size``; None otherwise. Every trial then gets that batch in
    ``DANLU_GLOBAL_BATCH_SIZE``, which replaces the batch a danlu.train script asks for
    (docs/train.md): the searched value changed nothing the trials trained, they all ran
    the spec's batch, and the sweep's best trial stood out by the noise of its other
    parameters, without a word."""
    batch = trial.training.global_batch_size
    if batch is None or spec.array:
        return None
    named = [
        name
        for name in spec.parameters
        if _BATCH_PARAMETER.fullmatch(name.casefold().replace("-", "_"))
    ]
    if not named:
        return None
    return (
        f"every trial trains the global batch {batch} of trial.training.global_batch_size, "
        f"whatever its {named[0]} says (DANLU_GLOBAL_BATCH_SIZE replaces the batch a "
        "danlu.train script asks for): to search the batch size, leave "
        "training.global_batch_size out of the trial spec and give gpu_memory for the "
        "largest batch (danlu estimate MODEL --batch-size N)"
    )


def grid_size(spec: SweepSpec) -> int:
    """How many combinations the ``values`` lists make."""
    return math.prod(len(p.values or ()) for p in spec.parameters.values())


SWEEP_LIMITS: dict[str, tuple[float, float]] = {
    "trials": (1, MAX_TRIALS),
    "startup_trials": (0, MAX_TRIALS),
    "parallel": (1, MAX_PARALLEL),
    "seed": (0, MAX_SEED),
    "early_stopping.min_trials": (1, MAX_TRIALS),
    **{f"trial.{path}": limits for path, limits in SPEC_LIMITS.items()},
}
"""The ranges of a sweep's numbers by dotted path, for
:func:`~danlu.core.values.check_values` on a sweep's body: an integer beyond 2**62 gets its
field's own range (``trial.priority: must lie within -1,000,000..1,000,000``)."""


def parse_sweep(data: Any) -> SweepSpec:
    """Validate a mapping as a :class:`SweepSpec`, its trial as a job spec; errors name the
    field (``trial.resources.gpus`` for one of the trial's)."""
    if not isinstance(data, dict):
        raise SpecError("", f"a sweep spec must be a mapping of fields, got {given_words(data)}")
    if not data:
        raise SpecError(
            "", "the sweep spec is empty (no fields): write its name, trial and parameters"
        )
    try:
        spec = SweepSpec.model_validate(data)
    except ValidationError as exc:
        raise spec_error(exc, "sweep spec") from None
    # what the store takes, as the server checks the body; here too for what pydantic read
    # as text unchecked (YAML's !!binary) or read in no order (!!set)
    check_values(data, limits=SWEEP_LIMITS)
    if spec.metric is not None:
        _check_metric_name(spec.metric.name)
    try:
        trial = spec.trial_spec()
    except SpecError as exc:
        raise SpecError(f"trial.{exc.field}".rstrip("."), exc.message) from None
    taken = sorted(set(TRIAL_ENV) & set(trial.env))
    if taken and spec.array:  # the job spec of `danlu submit --array`: its env, not trial's
        raise SpecError(
            f"env.{taken[0]}", "is set by the job array for each of its tasks: leave it out"
        )
    if taken:
        raise SpecError(f"trial.env.{taken[0]}", "is set by the sweep for every trial")
    if spec.array:
        _check_array(spec)
    elif spec.method in ("grid", "tpe"):
        _check_repeats(spec)
    if spec.method == "grid":
        _check_grid_trials(spec)
    _check_longest_trial(spec, trial.checkpoint_dir)
    return spec


ParameterValue = str | int | float | bool
"""A value a parameter's ``values`` list may hold."""


_REPEAT_HARM = {
    "grid": "a grid runs every combination, so the same trials would run twice",
    "tpe": (
        "tpe's sampler (Optuna) tells its choices apart with == (1, 1.0 and true are one) "
        "and learns only of the first, so a repeat does not weight the draws as a random "
        "list's does"
    ),
}
"""Why a ``grid`` or ``tpe`` parameter may not list a value twice, by method."""


def _check_repeats(spec: SweepSpec) -> None:
    """Refuse a value a ``grid`` or ``tpe`` parameter lists twice (``lr: {values: [0.1,
    0.1]}``; ``1`` and ``1.0`` are one number), naming it:

    - ``grid``: it ran every combination with it twice, the same trials over again;
    - ``tpe``: Optuna's ``CategoricalDistribution`` finds a choice by ``==`` (``true`` is
      ``1`` to it too), so every trial of the repeat was told to the model as one of the
      first's, and the model drew the repeat by its prior weight alone (the
      ``startup_trials``, drawn at random, did draw it twice as often).

    A ``random`` list may repeat a value, to draw it more often. Checked at submission
    only: a stored sweep's spec is read as it was taken."""
    for name, param in spec.parameters.items():
        seen: dict[tuple[str, ParameterValue], ParameterValue] = {}
        for value in param.values or ():
            kind = type(value).__name__ if isinstance(value, str) else "number"
            if isinstance(value, bool) and spec.method == "grid":  # to tpe, true == 1
                kind = "bool"
            key = (kind, value)
            if key in seen:
                first = seen[key]
                again = "twice" if repr(first) == repr(value) else f"twice ({first!r}, {value!r})"
                raise SpecError(
                    f"parameters.{name}.values",
                    f"{quoted(value)} is listed {again}: {_REPEAT_HARM[spec.method]}; list "
                    "each value once",
                )
            seen[key] = value


def _check_metric_name(name: str) -> None:
    """Refuse a ``metric.name`` no trial can report, which the sweep took and then ran every
    trial without a value (no best trial, no early stopping): a record's own ``step`` or
    ``time``, or a name a record's check refuses (a control character such as a tab, line
    break or ESC; a NUL or a lone surrogate). Checked at submission only: a stored sweep's
    spec is read as it was taken."""
    field = "metric.name"
    if name in RECORD_FIELDS:
        raise SpecError(
            field,
            f"{name!r} is a metric record's own field, not a value a trial reports: name the "
            "metric the trial logs, e.g. loss",
        )
    check_metric_name(name, field)


def _check_grid_trials(spec: SweepSpec) -> None:
    """Refuse a grid's ``trials`` beyond its number of combinations (``trials: 5`` over 2):
    a grid runs each combination once, so the sweep ran fewer trials than it said, without a
    word. Checked on submission only: a sweep stored with such a spec still loads
    (:attr:`SweepSpec.total` runs the grid)."""
    size = grid_size(spec)
    if spec.trials is not None and spec.trials > size:
        raise SpecError(
            "trials",
            f"{spec.trials} is more than the grid's {size} combinations (a grid runs each "
            f"once): leave trials out to run every combination, give at most {size}, or "
            "list more values",
        )


def _check_array(spec: SweepSpec) -> None:
    """A job array as ``danlu submit --array`` makes it (:mod:`danlu.core.job_array`): each
    index once, within ``0..MAX_ARRAY_INDEX`` (a task's ``DANLU_ARRAY_INDEX``:
    ``JobEnv.array_index`` refuses a negative one), and no metric (its tasks are not
    compared). Checked at submission only: a stored sweep's spec is read as it was taken."""
    from danlu.core.job_array import index_out_of_range  # it imports this module

    field = f"parameters.{ARRAY_PARAMETER}.values"
    seen: set[int] = set()
    for value in spec.parameters[ARRAY_PARAMETER].values or ():
        index = int(value)
        wrong = index_out_of_range(index)
        if wrong is not None:
            raise SpecError(field, wrong)
        if index in seen:
            raise SpecError(field, f"index {index} is listed twice; list each index once")
        seen.add(index)
    if spec.metric is not None:
        raise SpecError(
            "metric", "a job array has no metric (its tasks are not compared): leave it out"
        )


_LONGEST_FLOAT = -2.2250738585072014e-308
"""A float whose JSON is as long as any float's (24 characters): what a ``uniform`` or
``log_uniform`` draw may write at most."""
_ID_WIDTH = 32
"""The longest sweep id (its column's width) in ``DANLU_SWEEP_ID``."""


def _longest_value(param: Parameter) -> str | int | float | bool:
    """The value of ``param`` whose JSON is the longest."""
    if param.values is not None:
        return max(param.values, key=lambda v: len(json.dumps(v)))
    if param.distribution == "int":
        return max(param.int_bounds(), key=lambda v: len(str(v)))
    return _LONGEST_FLOAT


def _check_longest_trial(spec: SweepSpec, own_dir: str | None) -> None:
    """Refuse parameters no trial's environment can hold, as the trial's own submission
    would refuse them once the search draws them (``env.DANLU_HPARAMS``, or the command and
    env in all; :func:`danlu.core.spec.parse_spec`): the trial with the longest value of
    every parameter (a grid runs every combination, a random draw may pick any) is checked
    now, naming the parameter with the longest value. Likewise a ``checkpoint_dir``
    (``own_dir``, the trial spec's) too long for the trials' own directories under it
    (:func:`trial_checkpoint_dir`), naming it."""
    longest = {name: _longest_value(param) for name, param in spec.parameters.items()}
    last = max(spec.total - 1, 0)
    # the last trial's name is the longest, hence its checkpoint directory
    checkpoint_dir = trial_checkpoint_dir(own_dir, trial_name(spec.name, last))
    env = {
        **spec.trial.get("env", {}),
        "DANLU_HPARAMS": json.dumps(longest, sort_keys=True),
        "DANLU_SWEEP_ID": "0" * _ID_WIDTH,
        "DANLU_TRIAL": str(last),
    }
    if spec.array:
        env["DANLU_ARRAY_INDEX"] = str(longest[ARRAY_PARAMETER])
    trial = {"name": spec.name, **spec.trial, "env": env}
    if own_dir is not None and checkpoint_dir is not None:
        trial["checkpoint_dir"] = checkpoint_dir
        if not is_checkpoint_location(checkpoint_dir):  # the trial spec's own passed
            raise SpecError(
                "checkpoint_dir" if spec.array else "trial.checkpoint_dir",
                f"is {len(own_dir):,} characters; each trial checkpoints in a directory of "
                f"its own under it ({checkpoint_dir[len(own_dir) :]!r} appended for the "
                f"longest trial name), and a path has at most {MAX_PATH:,} characters: "
                "shorten it",
            )
    try:
        parse_spec(trial)
    except SpecError as exc:
        name = max(longest, key=lambda k: len(json.dumps(longest[k])))
        field = f"parameters.{name}" + (".values" if spec.parameters[name].values else "")
        if exc.field == "env.DANLU_HPARAMS":
            message = f"a trial's DANLU_HPARAMS with the longest values {exc.message}"
        elif exc.field == "command":
            message = f"with the longest values, {exc.message}"
        else:
            raise SpecError(f"trial.{exc.field}".rstrip("."), exc.message) from None
        raise SpecError(field, message) from None
