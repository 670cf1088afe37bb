"""Where a key a spec does not know was meant to go, for the error that refuses it
(:func:`~danlu.core.spec_errors.spec_error`): a field spelt nearly so in the same section
(``paramaters``, ``gpu-memory``, ``max_restart``), or written under another tool's name
(``objective``, ``n_trials``, W&B's ``min`` and ``max``), is named ("did you mean
parameters?"); a field of another section (``gpus: 2`` at a job spec's top level,
``command`` at a sweep's) is named with where it goes. A job spec and a sweep spec each have
their sections (:func:`field_hint`)."""

from __future__ import annotations

import difflib
import functools
import json
import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

JOB_SPEC = "job spec"
SWEEP_SPEC = "sweep spec"
_ANY_PARAMETER = "parameters.*"
"""The section of every parameter of a sweep (``parameters.lr``), as :class:`_Schema` keys
it."""
_PARAMETER_SHOWN = "parameters.<name>"
"""How an error names a parameter's section when it does not know which parameter."""

_ALIASES: dict[str, dict[str, str]] = {
    JOB_SPEC: {
        "cmd": "command",
        "environment": "env",
        "timeout": "time_limit",
        "walltime": "time_limit",
        "retries": "max_restarts",
        "max_retries": "max_restarts",
        "cwd": "workdir",
        "working_dir": "workdir",
        "dependencies": "depends_on",
        "num_gpus": "gpus",
        "gpu_count": "gpus",
        "vram": "gpu_memory",
        "batch_size": "global_batch_size",
    },
    SWEEP_SPEC: {
        "objective": "metric",
        "early_terminate": "early_stopping",
        "n_trials": "trials",
        "num_trials": "trials",
        "max_trials": "trials",
        "num_samples": "trials",
        "parallelism": "parallel",
        "concurrency": "parallel",
        "max_concurrent_trials": "parallel",
        "params": "parameters",
        "hyperparameters": "parameters",
        "search_space": "parameters",
        "algorithm": "method",
        "sampler": "method",
        "random_seed": "seed",
        "direction": "goal",
        "min": "low",
        "max": "high",
        "choices": "values",
    },
}
"""What other tools (W&B sweeps, Optuna, Ray Tune, Slurm) and habit call a field, by the
kind of spec: the field meant (its name, in whichever section it is)."""


_SPELT_ONLY: dict[tuple[str, str], tuple[str, ...]] = {(JOB_SPEC, ""): ("array",)}
"""Keys a spec file may hold that its model does not (a job spec's ``array``, the range of a
job array, which ``danlu submit`` takes out before the spec is checked), by kind and
section: named for a key spelt nearly so (``arary``), never said to be a field elsewhere."""


@dataclass(frozen=True)
class _Schema:
    """A kind of spec's known keys: each section's fields (dotted section, ``""`` the top
    level), and where each field goes by its name (names of more than one field left out:
    a sweep's ``name`` is its own, its metric's and its trial's)."""

    sections: dict[str, tuple[str, ...]]
    homes: dict[str, str]


def _fields(model: type[BaseModel]) -> tuple[str, ...]:
    return tuple(model.model_fields)


@functools.cache
def _schema(kind: str) -> _Schema | None:
    """The :class:`_Schema` of a job spec or a sweep spec (whose ``trial`` is a job spec);
    None for another kind."""
    from danlu.core.spec import JobSpec, Resources, TrainingHints  # they import this module
    from danlu.core.sweep import EarlyStopping, Metric, Parameter, SweepSpec

    job = {
        "": _fields(JobSpec),
        "resources": _fields(Resources),
        "training": _fields(TrainingHints),
    }
    if kind == JOB_SPEC:
        sections, inner = job, {}
    elif kind == SWEEP_SPEC:
        sections = {
            "": _fields(SweepSpec),
            "metric": _fields(Metric),
            "early_stopping": _fields(EarlyStopping),
            _ANY_PARAMETER: _fields(Parameter),
        }
        inner = {f"trial.{section}".rstrip("."): names for section, names in job.items()}
    else:
        return None
    found: dict[str, list[str]] = {}
    for section, names in (sections | inner).items():
        for name in names:
            found.setdefault(name, []).append(f"{section}.{name}" if section else name)
    homes = {name: paths[0] for name, paths in found.items() if len(paths) == 1}
    return _Schema(sections, homes)


def field_hint(name: str, section: str, kind: str) -> tuple[str | None, str | None]:
    """For a key ``name`` that ``section`` (dotted; ``""``: the top level) of a ``kind`` of
    spec does not know: ``(meant, None)`` with the dotted path of the field of the same
    section it stands for, or ``(None, home)`` with where the field it names goes in another
    section, or ``(None, None)`` for a name like no field's (``gpuz``) or a section without
    fixed fields (a ``depends_on`` entry's).

    In order: the name in lower case with ``_`` for ``-`` and blanks (``Priority``,
    ``gpu-memory``), or another tool's name for it (:data:`_ALIASES`), a field of the
    section or of another; else a field of the section, an alias or a key of
    :data:`_SPELT_ONLY` spelt nearly so (letters swapped, ``trails``; or one changed, left
    out or added: ``paramaters``, ``objectve``, ``arary``)."""
    schema = _schema(kind)
    pattern = _ANY_PARAMETER if re.fullmatch(r"parameters\.[^.]+", section) else section
    if schema is None or pattern not in schema.sections:
        return None, None
    here = schema.sections[pattern]
    aliases = _ALIASES.get(kind, {})
    plain = re.sub(r"[-\s]+", "_", name.strip().lower())
    prefix = f"{section}." if section else ""
    for candidate in (name, plain, aliases.get(plain)):
        if candidate is None:
            continue
        if candidate in here and candidate != name:
            return prefix + candidate, None
        home = schema.homes.get(candidate)
        if home is not None:
            return None, home.replace(_ANY_PARAMETER, _PARAMETER_SHOWN)
    spelt_only = _SPELT_ONLY.get((kind, pattern), ())
    near = _spelt_nearly(plain, [*here, *aliases, *spelt_only])
    if near is None or near == name:  # array itself, where no array is read (POST /jobs)
        return None, None
    meant = aliases.get(near, near)
    if meant in here or meant in spelt_only:
        return prefix + meant, None
    home = schema.homes.get(meant)
    return None, None if home is None else home.replace(_ANY_PARAMETER, _PARAMETER_SHOWN)


def choice_hint(given: str, choices: list[str]) -> str | None:
    """The one of an enumerated field's ``choices`` that ``given``, which is none of them,
    was meant as: the same in lower case with ``_`` for ``-`` and blanks (``Grid``,
    ``log-uniform``), or spelt nearly so (``fp23``, ``minimise``, ``succeded``); None for
    text like none of them."""
    plain = re.sub(r"[-\s]+", "_", given.strip().lower())
    if plain in choices:
        return plain
    return _spelt_nearly(plain, choices, cutoff=0.7)  # a few choices: grit is grid


def _spelt_nearly(plain: str, names: list[str], cutoff: float = 0.8) -> str | None:
    """The one of ``names`` that ``plain`` is a misspelling of: the same letters in another
    order (``trails``: ``trials``, not ``trial``), else the closest by difflib's ratio, at
    least ``cutoff`` (0.8: ``paramaters``, ``metod``; ``gpuz`` is like no field)."""
    swapped = [n for n in names if len(n) == len(plain) and sorted(n) == sorted(plain)]
    if swapped:
        return swapped[0]
    close = difflib.get_close_matches(plain, names, n=1, cutoff=cutoff)
    return close[0] if close else None


def sweep_example(field: str, given: Any, kind: str) -> str:
    """What to write, as the end of the error (``": write ..."``), for a sweep's section
    given as no mapping or left empty, where the shape is easy to mistake: ``metric: loss``,
    a parameter given its values alone (``lr: [0.1, 0.01]``, ``lr: 0.1``), ``trial:`` naming
    a spec file, ``early_stopping: true``, ``parameters: {}``; ``""`` for anything else."""
    if kind != SWEEP_SPEC or given is None:
        return ""
    parameter = re.fullmatch(r"parameters\.([^.]+)", field)
    if parameter is not None and not isinstance(given, dict):
        name, values = parameter.group(1), given if isinstance(given, list) else [given]
        listed = json.dumps(values, default=str)
        listed = listed if len(listed) <= 60 else "[...]"  # a long list is not shown again
        return (
            f": write {name}: {{values: {listed}}}, or a range: {name}: {{distribution: "
            "uniform, low: 0.0, high: 1.0}"
        )
    if field == "parameters" and given == {}:
        return ": name at least one, e.g. lr: {values: [0.1, 0.01]}"
    if field == "metric" and isinstance(given, str):
        return f": write metric: {{name: {given}}} (goal: minimize, the default, or maximize)"
    if field == "trial" and isinstance(given, str):
        return (
            ": write the trials' job spec under it, indented (command: [...], resources: "
            "{...}); a path to a spec file is not read"
        )
    if field == "early_stopping" and given is True:
        return ": write early_stopping: {rule: median} (min_steps and min_trials optional)"
    return ""
