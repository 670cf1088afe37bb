"""Policy options are checked when a policy is built: a value of the wrong type or outside a
knob's range is a :class:`ConfigError` naming the option and what it accepts, raised before
any round runs (through the registry, as ``danlu sim run --option`` builds policies, and on
direct construction of every built-in policy)."""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path
from typing import Any

import pytest

from danlu.core.errors import ConfigError
from danlu.sched.policies.danlu import DanluPolicy
from danlu.sched.policies.fifo import FifoPolicy
from danlu.sched.policies.tiresias import TiresiasPolicy
from danlu.sched.policies.value_density import ValueDensityPolicy
from danlu.sched.registry import default_registry, make_policy


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


@pytest.mark.parametrize("name", default_registry().names())
def test_every_numeric_option_has_a_range(name: str) -> None:
    """A new numeric option of a built-in policy cannot skip the range check: each int,
    float or tuple-of-numbers option has a range in its class's ``option_ranges``, and
    those ranges name real options."""
    policy = make_policy(name)
    cls = type(policy)
    hints = typing.get_type_hints(cls)
    numeric = {
        f.name
        for f in dataclasses.fields(policy)
        if f.init and (hints[f.name] in (int, float) or typing.get_origin(hints[f.name]) is tuple)
    }
    assert numeric == set(cls.option_ranges), name  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("policy", "options", "message"),
    [
        ("priority", {"aging_per_hour": -1}, r"aging_per_hour must be in \[0, inf\), got -1"),
        ("value-density", {"min_remaining": 0}, r"min_remaining must be in \(0, inf\)"),
        ("value-density", {"priority_scale": 0.0}, r"priority_scale must be in \(0, inf\)"),
        ("value-density", {"default_duration": float("inf")}, r"default_duration must be in"),
        ("value-density", {"restart_cost": float("nan")}, r"restart_cost must be in \[0, inf\)"),
        ("tiresias", {"thresholds": (3600.0, -1.0)}, r"every value of thresholds must be in"),
        ("tiresias", {"starvation_factor": -2.0}, r"starvation_factor must be in \[0, inf\)"),
        ("pollux", {"population": 100_000_000}, r"population must be in \[2, 1000\]"),
        ("pollux", {"generations": 10**9}, r"generations must be in \[0, 1000\]"),
    ],
)
def test_other_policies_ranges(policy: str, options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=rf"{policy} policy: {message}"):
        make_policy(policy, **options)


def test_direct_construction_checks_too() -> None:
    """Built without the registry (as the server's settings and the benchmarks do), a policy
    checks its options the same way, default named."""
    with pytest.raises(ConfigError, match=r"got -5 \(default 30.0\)"):
        ValueDensityPolicy(restart_cost=-5)
    with pytest.raises(ConfigError, match="'backfill' must be true or false"):
        FifoPolicy(backfill="yes")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="thresholds must ascend"):
        TiresiasPolicy(thresholds=(7200.0, 3600.0))
    assert TiresiasPolicy(thresholds=(3600.0,), starvation_factor=0).thresholds == (3600.0,)


def test_every_danlu_knob_type_is_checked_on_construction() -> None:
    with pytest.raises(ConfigError, match="'lend' must be true or false"):
        DanluPolicy(lend="maybe")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="'max_moves' must be a whole number"):
        DanluPolicy(max_moves=2.5)  # type: ignore[arg-type]


def test_every_danlu_knob_is_in_the_documented_table() -> None:
    """docs/danlu-policy.md lists every knob of the danlu policy with its default: a knob
    added to ``DanluPolicy`` without a row there fails here (``name`` is the registry's)."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "danlu-policy.md").read_text()
    rows = [line for line in doc.splitlines() if line.startswith("| `")]
    documented = {name for row in rows for name in re.findall(r"`([a-z_]+)`", row.split("|")[1])}
    knobs = {
        f.name for f in dataclasses.fields(DanluPolicy) if f.init and not f.name.startswith("_")
    }
    assert knobs - {"name"} <= documented, sorted(knobs - {"name"} - documented)
