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
