"""``danlu estimate`` prints names it did not make (the model reference, a ``--gpu-table``'s
GPU name) as text: ``[/x]`` crashed the table with a MarkupError, ``[bold]`` vanished, and
an escape sequence in a GPU table's name reached the terminal. One real trace of the zoo's
smallest model (on the CPU, a few seconds)."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from typer.testing import CliRunner

from danlu.cli import estimate as estimate_cli

APP = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
estimate_cli.register(APP)
APP.command("noop", hidden=True)(lambda: None)  # keeps ``estimate`` a subcommand

NAME = "[/x][bold]gpu\x1b[31m"


def test_names_are_printed_as_text(tmp_path: Path) -> None:
    table = tmp_path / "gpus.json"
    table.write_text(json.dumps({NAME: {"capacity_bytes": 80 * 1024**3}}))
    args = ["estimate", "danlu.estimate.zoo:mlp_small", "--batch-size", "2"]
    args += ["--gpu", NAME, "--gpu-table", str(table), "--gpu-memory", "100GiB"]
    result = CliRunner().invoke(APP, args)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 0, result.output
    shown = "[/x][bold]gpu\\x1b[31m"  # the name as it is, its ESC written as an escape
    assert f"{shown} capacity" in result.stdout
    assert f"on {shown}" in result.stdout.splitlines()[-2]  # "fits within ... on NAME"
    assert f"the {shown}'s capacity" in " ".join(result.stderr.split())  # the note
    assert "\x1b" not in result.output


def test_an_error_naming_a_gpu_tables_name_shows_its_control_characters(tmp_path: Path) -> None:
    table = tmp_path / "gpus.json"
    table.write_text(json.dumps({NAME: {"capacity_bytes": 80 * 1024**3}}))
    args = ["estimate", "no_such_module_here:factory", "--batch-size", "2"]
    result = CliRunner().invoke(APP, [*args, "--gpu", "nope", "--gpu-table", str(table)])
    assert result.exit_code == 2, result.output
    assert "error: --gpu: unknown GPU type" in result.stderr
    assert "\\x1b[31m" in result.stderr and "\x1b" not in result.stderr
