"""An ``--interval`` too small to advance the clock (``1e-300``: the next tick of
the grid rounded back to the instant, and the simulation never ended) is refused up front,
and the engine's next tick is always after the instant, or a clear error; a name given twice
to ``--quota``, ``--user-quota`` or ``--project-share`` (the last value silently won) is
refused naming the flag and the name."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from danlu.cli.main import app
from danlu.cli.sim_flags import parse_project_shares, parse_quotas
from danlu.core.errors import ConfigError
from danlu.sim.config import MIN_INTERVAL, SimConfig
from danlu.sim.engine import _tick_after

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.mark.parametrize("interval", [1e-300, 5e-324, 1e-9, 9.9e-4], ids=str)
def test_an_interval_below_the_minimum_is_refused(interval: float) -> None:
    with pytest.raises(ConfigError, match=r"--interval.*at least 0\.001 s"):
        SimConfig(interval=interval)


def test_the_minimum_interval_is_allowed() -> None:
    assert SimConfig(interval=MIN_INTERVAL).interval == MIN_INTERVAL == 1e-3


@pytest.mark.parametrize(
    ("instant", "interval"),
    [
        (0.0, 60.0),
        (60.0, 60.0),
        (59.999999, 60.0),
        (0.3, 0.1),
        (0.7, 0.1),
        (1e9 + 0.5, 1e-3),
        (4e12, 1e-3),
        (123456789.123, 7.0),
        (1e300, 1e290),
    ],
    ids=lambda value: repr(value),
)
def test_the_next_tick_is_after_the_instant(instant: float, interval: float) -> None:
    tick = _tick_after(instant, interval)
    assert instant < tick <= instant + 2 * interval + math.ulp(tick)


@pytest.mark.parametrize(
    ("instant", "interval"), [(1.0, 1e-300), (1e14, 1e-3), (1e20, 60.0)], ids=repr
)
def test_a_tick_the_clock_cannot_reach_is_an_error(instant: float, interval: float) -> None:
    with pytest.raises(ConfigError, match="--interval"):
        _tick_after(instant, interval)


def test_the_cli_refuses_the_interval_of_the_review() -> None:
    # In a child process: before the fix this simulation never ended.
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    args = ["sim", "run", "--jobs", "3", "--quiet", "--interval", "1e-300"]
    result = subprocess.run(
        [sys.executable, "-m", "danlu", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    output = " ".join((result.stdout + result.stderr).split())
    assert "--interval" in output and "at least 0.001 s" in output


@pytest.mark.parametrize(
    ("flag", "pairs", "name"),
    [
        ("--quota", (["a=2", "a=8"], []), "a"),
        ("--quota", (["vision=1", "nlp=2", "vision=1"], []), "vision"),
        ("--user-quota", ([], ["ana=1", "bo=1", "ana=4"]), "ana"),
    ],
    ids=["quota", "quota-same-value", "user-quota"],
)
def test_a_quota_named_twice_is_refused(
    flag: str, pairs: tuple[list[str], list[str]], name: str
) -> None:
    with pytest.raises(ConfigError, match=rf"{flag}.*{name!r}.*more than once"):
        parse_quotas(*pairs)


def test_a_project_share_named_twice_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"--project-share.*'research'.*more than once"):
        parse_project_shares(["research=2", "research=3"])
    assert parse_project_shares(["research=2", "vision=3"]) == {"research": 2.0, "vision": 3.0}


@pytest.mark.parametrize(
    "extra",
    [
        ["--quota", "default=2", "--quota", "default=8"],
        ["--project-share", "default=2", "--project-share", "default=1"],
    ],
    ids=["quota", "project-share"],
)
def test_the_cli_refuses_a_name_given_twice(extra: list[str]) -> None:
    result = CliRunner().invoke(app, ["sim", "run", "--jobs", "3", "--quiet", *extra])
    assert result.exit_code == 2, result.output
    output = " ".join(result.output.split())
    assert extra[0] in output and "'default'" in output and "more than once" in output
