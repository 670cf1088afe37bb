"""Type checks of the simulator's settings given through the Python API (:class:`SimConfig
<danlu.sim.config.SimConfig>`, :class:`~danlu.sim.failures.Failures`, the allocation
experiment's load and seeds): a value of the wrong type is a :class:`ConfigError` naming
the field, before any comparison with it raised a bare TypeError (``interval="60"``) or a
later step misread it (a seed of 1.5 failed in numpy's seeding; a project weight keyed
by a number never matched a workload's project names).

A bool is no number here (``True`` is not a weight of 1, nor a seed of 1); NumPy's numbers
are numbers."""

from __future__ import annotations

import json
import numbers
from collections.abc import Callable, Mapping
from typing import Any

from danlu.core.errors import ConfigError, DanluError, UnknownNameError
from danlu.core.values import quoted


def check_real(field: str, value: Any, example: str) -> None:
    """Refuse ``value`` for ``field`` unless it is a real number (not a bool); ``example``
    shows a good value in the message."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ConfigError(
            f"{field} must be a number, e.g. {example}; got {quoted(value)} "
            f"({type(value).__name__})"
        )


def check_whole(field: str, value: Any, example: str) -> None:
    """Refuse ``value`` for ``field`` unless it is an integer (not a bool, nor a float such
    as 2.0); ``example`` shows a good value in the message."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ConfigError(
            f"{field} must be a whole number, e.g. {example}; got {quoted(value)} "
            f"({type(value).__name__})"
        )


def check_share(field: str, value: Any) -> None:
    """Refuse ``value`` for ``field`` unless it is a number in (0, 1]: a job's speed beside
    another as a fraction of its speed alone (:class:`~danlu.sim.interference.Interference`)."""
    check_real(field, value, "0.5")
    if not 0 < value <= 1:  # NaN too
        raise ConfigError(
            f"{field} must be a rate above 0 and at most 1 (a job's speed beside another as "
            f"a fraction of its speed alone), e.g. 0.5; got {value}"
        )


def check_instance(field: str, value: Any, kind: type, optional: bool = False) -> None:
    """Refuse ``value`` for ``field`` unless it is a ``kind`` (or None when ``optional``)."""
    if (value is None and optional) or isinstance(value, kind):
        return
    article = "an" if kind.__name__[:1] in "AEIOU" else "a"
    wanted = f"{article} {kind.__name__}" + (" or None" if optional else "")
    raise ConfigError(f"{field} must be {wanted}; got {quoted(value)} ({type(value).__name__})")


def check_project_shares(shares: Any) -> None:
    """Refuse ``project_shares`` unless it maps project names (strings, as the workload's
    ``project`` column gives them) to numbers; their values are checked by the caller."""
    if not isinstance(shares, Mapping):
        raise ConfigError(
            "project_shares must be a mapping of project names to weights, e.g. "
            f"{{'team-a': 2.0}}; got {quoted(shares)} ({type(shares).__name__})"
        )
    for name, weight in shares.items():
        if not isinstance(name, str):
            raise ConfigError(
                f"project_shares: the project name {quoted(name)} must be a string (a "
                "workload's project name), or it matches no project"
            )
        check_real(f"project_shares: {name}'s weight", weight, "2.0")


def option_refusal(
    error: DanluError, options: Mapping[str, Any], build: Callable[[Mapping[str, Any]], object]
) -> DanluError:
    """``error``, raised by ``build(options)`` (a scorer or policy built with the command
    line's ``--option KEY=VALUE`` options), as a :class:`ConfigError` that names the option
    at fault as the command line gives it: the first that ``build`` refuses alone, or all
    of them when none does alone. The scorers and policies name only their parameter
    (``danlu scorer: fgd_weight must be finite and >= 0, got -1``), not the flag that set
    it. ``error`` itself when it is no refusal of options: there are none, or ``build``
    refuses no options either (an unknown scorer name)."""
    if not options or not isinstance(error, ConfigError | UnknownNameError):
        return error
    if _refuses(build, {}):
        return error
    at_fault = [key for key in options if _refuses(build, {key: options[key]})][:1]
    shown = " ".join(f"--option {key}={_shown(options[key])}" for key in at_fault or options)
    return ConfigError(f"options ({shown}): {error}")


def _refuses(build: Callable[[Mapping[str, Any]], object], options: Mapping[str, Any]) -> bool:
    """Whether ``build(options)`` raises a danlu error."""
    try:
        build(options)
    except DanluError:
        return True
    return False


def _shown(value: Any) -> str:
    """An option's value as written after ``KEY=`` (cut short): text as it is, a list,
    mapping, boolean or null as the JSON the command line parsed it from (``[-1]``,
    ``true``, ``null``: they were shown as Python writes them, ``(-1,)``, ``True``,
    ``None``, which no one typed), a number as it reads (``-1``, ``nan``)."""
    if isinstance(value, str):
        text = value
    elif value is None or isinstance(value, bool | list | tuple | dict):
        try:
            text = json.dumps(value, ensure_ascii=False)
        except (TypeError, ValueError):  # a value no JSON holds, an integer too long
            text = quoted(value)
    else:
        text = quoted(value)
    return text if len(text) <= 40 else f"{text[:37]}..."
