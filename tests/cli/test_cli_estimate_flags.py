"""``danlu estimate``'s memory flags checked before anything is traced: a ``--margin`` that
leaves nothing of the limit, or a ``--gpu-memory`` of nothing, is an error naming the flag
(exit 2), not an answer of "none fits"."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from danlu.cli import estimate as estimate_cli

APP = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
estimate_cli.register(APP)
APP.command("noop", hidden=True)(lambda: None)  # keeps ``estimate`` a subcommand


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--margin", "200GiB"], "--margin"),
        (["--margin", "80GiB"], "--margin"),  # all of the H100's 80 GiB
        (["--gpu-memory", "0"], "--gpu-memory"),
        (["--gpu-memory", "0GiB", "--margin", "0%"], "--gpu-memory"),
    ],
)
def test_a_limit_that_leaves_nothing_is_refused(flags: list[str], named: str) -> None:
    args = ["estimate", "no_such_module_here:factory", "--max-batch", "--gpu", "h100", *flags]
    result = CliRunner().invoke(APP, args)
    assert result.exit_code == 2, result.output
    assert f"error: {named}" in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("flags", "named", "fix"),
    [
        (["--batch-size", "8", "--margin", "10%"], "--margin", "add --max-batch"),
        (["--batch-size", "8", "--margin", "5%"], "--margin", "add --max-batch"),  # default's
        (["--sweep", "8,16", "--margin", "2GiB"], "--margin", "add --max-batch"),
        (["--batch-size", "8", "--fit-points", "8,16"], "--fit-points", "add --sweep"),
    ],
)
def test_a_flag_that_changes_nothing_without_its_mode_is_refused(
    flags: list[str], named: str, fix: str
) -> None:
    """``--margin`` serves ``--max-batch`` only, ``--fit-points`` ``--sweep`` and
    ``--max-batch``: without them each was read as nothing (``--sweep 8,16 --margin 10%``
    judged the rows against the whole limit), yet looked as if it had been used."""
    args = ["estimate", "no_such_module_here:factory", *flags]
    result = CliRunner().invoke(APP, args)
    assert result.exit_code == 2, result.output
    error = " ".join(result.stderr.split())
    assert error.startswith(f"error: {named}: "), error
    assert "nothing without" in error and fix in error, error


@pytest.mark.parametrize(
    "flags",
    [
        ["--max-batch", "--margin", "10%", "--fit-points", "1,2"],
        ["--sweep", "8,16", "--fit-points", "1,2"],
        ["--batch-size", "8"],  # neither given: their defaults are no flag
    ],
)
def test_the_flags_with_their_mode_go_on_to_the_trace(flags: list[str]) -> None:
    result = CliRunner().invoke(APP, ["estimate", "no_such_module_here:factory", *flags])
    assert result.exit_code == 2, result.output
    assert "error: MODEL_REF: cannot find module 'no_such_module_here'" in result.stderr


@pytest.mark.parametrize(
    "flags",
    [
        ["--batch-size", "8", "--sweep", ""],
        ["--batch-size", "8", "--sweep", "", "--fit-points", "1,2"],
        ["--sweep", " "],
    ],
)
def test_an_empty_sweep_is_refused(flags: list[str]) -> None:
    """``--sweep "$SIZES"`` with the variable unset was read as no sweep: the command traced
    one batch size and printed no rows, with no word that the sweep was empty."""
    result = CliRunner().invoke(APP, ["estimate", "no_such_module_here:factory", *flags])
    assert result.exit_code == 2, result.output
    error = " ".join(result.stderr.split())
    assert error.startswith("error: --sweep: "), error
