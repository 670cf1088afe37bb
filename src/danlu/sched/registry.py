"""Policies by name. ``make_policy("tiresias", thresholds=(3600,))`` builds one.

The registry is an ordinary object: :func:`default_registry` returns a fresh one holding the
built-in policies, and callers that add their own register on their instance (no global state
to reset between tests).
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from dataclasses import fields, is_dataclass
from typing import Any

from danlu.core.errors import ConfigError, UnknownNameError
from danlu.sched.placement.gang import STRATEGIES
from danlu.sched.policies.base import Policy
from danlu.sched.policies.danlu import DanluPolicy
from danlu.sched.policies.fair_share import FairSharePolicy
from danlu.sched.policies.fifo import FifoPolicy
from danlu.sched.policies.optimus import OptimusPolicy
from danlu.sched.policies.options import check_option_type
from danlu.sched.policies.pollux import PolluxPolicy
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
        """Make :meth:`create` build a policy named ``name`` with ``factory``. A name that
        is empty or holds whitespace (``--policy`` and ``DANLU_POLICY`` could never name
        it), one already registered, or a factory that is not callable is a
        :class:`ConfigError`."""
        if not isinstance(name, str) or not name or name != "".join(name.split()):
            raise ConfigError(
                f"a policy needs a name without whitespace (what --policy names), got {name!r}"
            )
        if not callable(factory):  # else a bare TypeError at the first create
            raise ConfigError(
                f"policy {name!r}: the factory must be a callable that builds the policy "
                f"(a policy class or a function), got {factory!r}"
            )
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
                check_option_type(name, key, value, hints.get(key))
        else:
            accepted = _keywords(factory)
            unknown = [] if accepted is None else sorted(set(options) - set(accepted))
            if unknown:
                listed = ", ".join(accepted or ()) or "none"
                raise ConfigError(
                    f"policy {name!r} has no option {unknown[0]!r}; options: {listed}"
                )
        placement = options.get("placement")
        if placement is not None and not isinstance(placement, str):
            raise ConfigError(
                f"policy {name!r} option 'placement' must be a string, got {placement!r}"
            )
        if placement is not None and placement not in STRATEGIES:
            raise UnknownNameError("placement", str(placement), list(STRATEGIES))
        return factory(**options)


def _keywords(factory: PolicyFactory) -> list[str] | None:
    """The option keywords a factory that is no dataclass (a function, a class of one's
    own) accepts, sorted; None when it takes any (``**options``: it checks them itself) or
    its signature cannot be read. Without this, an option it lacks was a bare TypeError."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):  # a callable without a readable signature
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return sorted(p.name for p in params if p.kind in keyword)


def default_registry() -> PolicyRegistry:
    """A new registry holding danlu's built-in policies."""
    registry = PolicyRegistry()
    registry.register("fifo", FifoPolicy)
    registry.register("priority", PriorityPolicy)
    registry.register("sjf", SjfPolicy)
    registry.register("fair-share", FairSharePolicy)
    registry.register("tiresias", TiresiasPolicy)
    registry.register("value-density", ValueDensityPolicy)
    registry.register("danlu", DanluPolicy)
    registry.register("pollux", PolluxPolicy)
    registry.register("optimus", OptimusPolicy)
    return registry


def make_policy(name: str, **options: Any) -> Policy:
    """Build a built-in policy by name."""
    return default_registry().create(name, **options)
