"""``danlu sim``'s failure and interference flags, and names holding ``=``.

- ``--node-repair``, ``--gpu-repair``, ``--checkpoint-every`` and ``--failure-seed`` were
  neither parsed nor refused without ``--node-mtbf``/``--gpu-mtbf`` (``--checkpoint-every
  abc`` ran, with no failures), nor ``--interference-gpu`` without ``--interference``:
  each is now checked, and one given without the flag that enables it is refused;
- ``--quota 'x=y=1'`` was refused: a name may hold ``=``, the number follows the last one.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from danlu.cli.main import app
from danlu.cli.sim_flags import parse_project_shares, parse_quotas
from danlu.core.errors import ConfigError

BASE = ["--jobs", "3", "--quiet"]
COMMANDS = {
    "run": ["sim", "run", *BASE],
    "compare": ["sim", "compare", "--policies", "fifo", *BASE],
    "plan": ["sim", "plan", "--target", "avg_jct<=30d", "--max-nodes", "2", "--jobs", "3"],
}


def squash(text: str) -> str:
    """Output without whitespace: Rich wraps long lines at the terminal width."""
    return "".join(text.split())


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize(
    ("flags", "named"),
    [
        # invalid values given without --node-mtbf/--gpu-mtbf: before, exit 0
        (["--checkpoint-every", "abc"], "--checkpoint-every"),
        (["--node-repair", "-5"], "--node-repair"),
        (["--gpu-repair", "xyz"], "--gpu-repair"),
        # valid values that change nothing without the flag that enables them
        (["--node-repair", "4h"], "--node-mtbf"),
        (["--node-repair", "1h"], "--node-mtbf"),  # the default's value, given all the same
        (["--gpu-mtbf", "8d", "--node-repair", "4h"], "--node-mtbf"),
        (["--node-mtbf", "8d", "--gpu-repair", "4h"], "--gpu-mtbf"),
        (["--checkpoint-every", "10m"], "--node-mtbf or --gpu-mtbf"),
        (["--failure-seed", "7"], "--node-mtbf or --gpu-mtbf"),
        (["--interference-gpu", "nosuch"], "--interference"),
        (["--interference-gpu", "k80"], "--interference"),
    ],
)
def test_a_flag_without_its_enabling_flag_is_refused(
    command: str, flags: list[str], named: str
) -> None:
    result = CliRunner().invoke(app, [*COMMANDS[command], *flags])
    assert result.exit_code == 2, result.output
    output = squash(result.output)
    assert squash(flags[-2]) in output and squash(named) in output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    "flags",
    [
        [],
        ["--gpu-mtbf", "30d", "--checkpoint-every", "10m", "--failure-seed", "7"],
        ["--node-mtbf", "30d", "--node-repair", "2h", "--gpu-mtbf", "60d", "--gpu-repair", "2h"],
    ],
    ids=["defaults", "gpu-only", "both"],
)
def test_flags_with_their_enabling_flag_run(flags: list[str]) -> None:
    result = CliRunner().invoke(app, [*COMMANDS["run"], *flags])
    assert result.exit_code == 0, result.output


def test_names_holding_an_equals_sign_get_quotas_and_shares() -> None:
    quotas = parse_quotas(["x=y=1", "plain=2"], ["a=b=3"])  # before: ConfigError
    assert {name: q.gpus for name, q in quotas.projects.items()} == {"x=y": 1.0, "plain": 2.0}
    assert {name: q.gpus for name, q in quotas.users.items()} == {"a=b": 3.0}
    assert parse_project_shares(["x=y=2"]) == {"x=y": 2.0}


def test_the_cli_keeps_a_quota_of_a_project_holding_an_equals_sign(tmp_path: Path) -> None:
    path = tmp_path / "q.csv"
    path.write_text("name,submit_time,gpus,duration,project\nj1,0,1,100,x=y\nj2,0,1,100,x=y\n")
    base = ["sim", "run", "--workload", str(path), "--nodes", "1", "--quiet"]
    result = CliRunner().invoke(app, [*base, "--quota", "x=y=1", "--policy", "fifo"])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(app, [*base, "--project-share", "x=y=2", "--policy", "fair-share"])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("pair", ["x=y=", "x=y=abc", "=1", "noequals"])
def test_a_pair_without_a_number_after_its_last_equals_sign_is_refused(
    pair: str,
) -> None:
    result = CliRunner().invoke(app, [*COMMANDS["run"], "--quota", pair])
    assert result.exit_code == 2, result.output
    assert "PROJECT=GPUS" in result.output


@pytest.mark.parametrize("pair", ["vision=1_6", "vision=\u0661\u0666"])
def test_a_number_not_written_plainly_is_refused(pair: str) -> None:
    """``float`` reads ``1_6`` as 16 and ``١٦`` (Arabic-Indic digits) as 16: a quota or share
    of a number no one wrote plainly."""
    for flag, form in (("--quota", "PROJECT=GPUS"), ("--project-share", "NAME=WEIGHT")):
        result = CliRunner().invoke(app, [*COMMANDS["run"], flag, pair])
        assert result.exit_code == 2, result.output
        assert form in result.output
    with pytest.raises(ConfigError, match="--user-quota"):
        parse_quotas([], ["ana=1_6"])
