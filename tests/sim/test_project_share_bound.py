"""A project's weight in the simulator is at most 1,000,000, as docs/queue-policies.md and
the control plane have it: fair-share adds the weights up and divides by them, and two
projects of weight 1e308 (an infinite sum) were each owed no GPU, so that equal weights
gave unequal waits and preemptions under ``reclaim``."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from danlu.cli.main import app
from danlu.core.errors import ConfigError
from danlu.sim.config import SimConfig


def test_a_weight_above_the_most_is_refused_naming_the_project_and_the_flag() -> None:
    with pytest.raises(ConfigError, match=r"--project-share.*'?vision'?s weight.*1,000,000"):
        SimConfig(project_shares={"vision": 1e308})
    with pytest.raises(ConfigError, match="at most"):
        SimConfig(project_shares={"a": 1.0, "b": 1.5e6})


def test_weights_up_to_the_most_are_accepted() -> None:
    config = SimConfig(project_shares={"a": 1e6, "b": 1e-6, "c": 2.0})
    assert config.project_shares["a"] == 1e6


def test_the_command_line_exits_2_naming_the_flag() -> None:
    args = ["sim", "run", "--jobs", "5", "--project-share", "a=1e308", "--quiet"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert "--project-share" in result.output and "at most" in result.output
