"""A policy registered under a name ``--policy`` could never give (empty, or holding
whitespace) is refused as the scorer registry refuses an empty name, instead of being
taken and then unreachable."""

from __future__ import annotations

import pytest

from danlu.core.errors import ConfigError
from danlu.sched.policies.fifo import FifoPolicy
from danlu.sched.registry import PolicyRegistry


@pytest.mark.parametrize("name", ["", " ", "my policy", "mine\n", "\tmine"])
def test_a_name_no_flag_can_give_is_refused(name: str) -> None:
    registry = PolicyRegistry()
    with pytest.raises(ConfigError, match="a policy needs a name without whitespace"):
        registry.register(name, FifoPolicy)
    assert registry.names() == []


def test_a_plain_name_is_taken() -> None:
    registry = PolicyRegistry()
    registry.register("my-fifo", FifoPolicy)
    assert registry.create("my-fifo") == FifoPolicy()
