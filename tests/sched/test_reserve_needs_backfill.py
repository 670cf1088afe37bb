"""``reserve`` (EASY backfill) only limits which later jobs backfill: given without
``backfill`` (``fifo``'s default) it was ignored without a word, and ``danlu sim run
--policy fifo --option reserve=true`` ran strict order. It is a :class:`ConfigError` naming
both options and the fix; every combination that means something still builds."""

from __future__ import annotations

from typing import Any

import pytest

from danlu.core.errors import ConfigError
from danlu.sched.policies.fifo import FifoPolicy
from danlu.sched.policies.priority import PriorityPolicy
from danlu.sched.policies.sjf import SjfPolicy
from danlu.sched.registry import make_policy


@pytest.mark.parametrize(
    ("policy", "options"),
    [
        ("fifo", {"reserve": True}),
        ("fifo", {"reserve": True, "backfill": False}),
        ("sjf", {"reserve": True, "backfill": False}),
        ("priority", {"reserve": True, "backfill": False}),
        ("priority", {"reserve": True, "backfill": False, "preempt": False}),
    ],
)
def test_reserve_without_backfill_is_refused(policy: str, options: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=rf"^{policy} policy: reserve .*set backfill=true"):
        make_policy(policy, **options)


def test_direct_construction_refuses_it_too() -> None:
    for build in (FifoPolicy, SjfPolicy, PriorityPolicy):
        with pytest.raises(ConfigError, match="backfill"):
            build(reserve=True, backfill=False)


@pytest.mark.parametrize(
    ("policy", "options"),
    [
        ("fifo", {}),
        ("fifo", {"backfill": True}),
        ("fifo", {"backfill": True, "reserve": True}),
        ("sjf", {"reserve": True}),
        ("sjf", {"backfill": False}),
        ("priority", {"reserve": True}),
        ("priority", {"backfill": False}),
    ],
)
def test_meaningful_combinations_still_build(policy: str, options: dict[str, Any]) -> None:
    built = make_policy(policy, **options)
    for key, value in options.items():
        assert getattr(built, key) == value
