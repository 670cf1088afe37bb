"""Policies by name. ``make_policy("tiresias", thresholds=(3600,))`` builds one.

The registry is an ordinary object: :func:`default_registry` returns a fresh one holding the
built-in policies, and callers that add their own register on their instance (no global state
to reset between tests).
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from dataclasses import fields, is_dataclass
from typing import Any

from danlu.core.errors import ConfigError, UnknownNameError
from danlu.sched.placement.gang import STRATEGIES
from danlu.sched.policies.base import Policy
from danlu.sched.policies.danlu import DanluPolicy
from danlu.sched.policies.fifo import FifoPolicy
from danlu.sched.policies.priority import PriorityPolicy
from danlu.sched.policies.sjf import SjfPolicy
from danlu.sched.policies.tiresias import TiresiasPolicy
from danlu.sched.policies.value_density import ValueDensityPolicy

PolicyFactory = Callable[..., Policy]


class PolicyRegistry:
    """Named policy factories."""

    def __init__(self) -> None:
        self._factories: dict[str, PolicyFactory] = {}

    def register(self, name: str, factory: PolicyFactory) -> None:
        if name in self._factories:
            raise ConfigError(f"a policy named {name!r} is already registered")
        self._factories[name] = factory

    def names(self) -> list[str]:
        return sorted(self._factories)

    def create(self, name: str, **options: Any) -> Policy:
        """Build policy ``name``; unknown names and options raise errors listing valid ones."""
        factory = self._factories.get(name)
        if factory is None:
            raise UnknownNameError("policy", name, self.names())
        if is_dataclass(factory):
            valid = {f.name for f in fields(factory) if f.init} - {"name"}
            unknown = sorted(set(options) - valid)
            if unknown:
                raise ConfigError(
                    f"policy {name!r} has no option {unknown[0]!r}; "
                    f"options: {', '.join(sorted(valid))}"
                )
            hints = typing.get_type_hints(factory)
            for key, value in options.items():
                _check_type(name, key, value, hints.get(key))
        placement = options.get("placement")
        if placement is not None and placement not in STRATEGIES:
            raise UnknownNameError("placement", str(placement), list(STRATEGIES))
        return factory(**options)


def _check_type(policy: str, key: str, value: object, hint: object) -> None:
    """Raise :class:`ConfigError` when ``value`` does not have the option's declared type
    (bool, int, float, str or a tuple of numbers; an int is a valid float, a bool is not a
    number)."""
    what: str | None = None
    if hint is bool:
        what = None if isinstance(value, bool) else "true or false"
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        what = None if ok else "a whole number"
    elif hint is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        what = None if ok else "a number"
    elif hint is str:
        what = None if isinstance(value, str) else "a string"
    elif typing.get_origin(hint) is tuple:
        ok = isinstance(value, tuple | list) and all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in value
        )
        what = None if ok else "a list of numbers"
    if what is not None:
        raise ConfigError(f"policy {policy!r} option {key!r} must be {what}, got {value!r}")


def default_registry() -> PolicyRegistry:
    """A new registry holding danlu's built-in policies."""
    registry = PolicyRegistry()
    registry.register("fifo", FifoPolicy)
    registry.register("priority", PriorityPolicy)
    registry.register("sjf", SjfPolicy)
    registry.register("tiresias", TiresiasPolicy)
    registry.register("value-density", ValueDensityPolicy)
    registry.register("danlu", DanluPolicy)
    return registry


def make_policy(name: str, **options: Any) -> Policy:
    """Build a built-in policy by name."""
    return default_registry().create(name, **options)
