"""Policy options are checked when a policy is built: a value of the wrong type or outside a
knob's range is a :class:`ConfigError` naming the option and what it accepts, raised before
any round runs (through the registry, as ``danlu sim run --option`` builds policies, and on
direct construction of ``DanluPolicy``)."""

from __future__ import annotations

from typing import Any

import pytest

from danlu.core.errors import ConfigError
from danlu.sched.policies.danlu import DanluPolicy
from danlu.sched.registry import make_policy


@pytest.mark.parametrize(
    ("policy", "options", "message"),
    [
        ("danlu", {"restart_cost": "abc"}, "'restart_cost' must be a number, got 'abc'"),
        ("danlu", {"lend": "maybe"}, "'lend' must be true or false"),
        ("danlu", {"max_moves": 2.5}, "'max_moves' must be a whole number"),
        ("danlu", {"hysteresis": True}, "'hysteresis' must be a number"),
        ("danlu", {"placement": 3}, "'placement' must be a string"),
        ("tiresias", {"thresholds": "abc"}, "'thresholds' must be a list of numbers"),
        ("priority", {"preempt": 1}, "'preempt' must be true or false"),
    ],
)
def test_registry_rejects_wrong_types(policy: str, options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        make_policy(policy, **options)


@pytest.mark.parametrize(
    ("knob", "value", "span"),
    [
        ("restart_cost", -1.0, r"\[0, inf\)"),
        ("hysteresis", 1.0, r"\[0, 1\)"),
        ("move_slack", 0.0, r"\(0, inf\)"),
        ("max_moves", 0, r"\[1, inf\)"),
        ("regret", 0.5, r"\[1, inf\)"),
        ("aging", 0.0, r"\(0, inf\)"),
        ("starve_share", 0.0, r"\(0, 1\]"),
        ("grow_factor", 0.9, r"\[1, inf\)"),
        ("share_p_max", 2.0, r"\[0.05, 1\]"),
        ("loan_weight", 1.5, r"\[0, 1\]"),
        ("min_hold", float("nan"), r"\[0, inf\)"),
    ],
)
def test_danlu_knob_ranges(knob: str, value: float, span: str) -> None:
    with pytest.raises(ConfigError, match=rf"danlu policy: {knob} must be in {span}"):
        DanluPolicy(**{knob: value})


def test_danlu_error_names_the_default() -> None:
    with pytest.raises(ConfigError, match=r"got -5 \(default 30.0\)"):
        make_policy("danlu", restart_cost=-5)


def test_valid_settings_build() -> None:
    """Edges of each range, ints for floats, and lists for tuples are accepted."""
    policy = make_policy(
        "danlu",
        restart_cost=0,
        hysteresis=0.0,
        regret=1,
        starve_share=1.0,
        share_p_max=1.0,
        loan_weight=0.0,
        first_gpus=0,
        lend=False,
    )
    assert isinstance(policy, DanluPolicy)
    assert policy.restart_cost == 0
    make_policy("tiresias", thresholds=[3600, 7200.0])


def test_every_danlu_knob_is_checked() -> None:
    """A new numeric knob cannot skip the range check: each has a range in ``danlu_knobs``;
    every knob's type is checked on direct construction too."""
    import dataclasses
    import typing

    from danlu.sched.policies import danlu_knobs

    hints = typing.get_type_hints(DanluPolicy)
    for f in dataclasses.fields(DanluPolicy):
        if f.init and hints[f.name] in (int, float):
            assert f.name in danlu_knobs._KNOB_RANGES, f.name
    with pytest.raises(ConfigError, match="'lend' must be true or false"):
        DanluPolicy(lend="maybe")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="'max_moves' must be a whole number"):
        DanluPolicy(max_moves=2.5)  # type: ignore[arg-type]
