"""An error that spans lines (``danlu estimate``'s failed trace quotes the traced
program's last output lines) is printed a line at a time, each line's control characters
written as escapes, instead of one line of literal ``\\n``; and the CLI's consoles print
text as it is, never Rich's emoji codes: ``a:b:c`` in a job's command, a workload file's
header quoted in an error or a GPU's name was shown as ``a🅱c``. The estimate tests trace
on the CPU (a few seconds each)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from cli_fake_api import serve_commands
from typer.testing import CliRunner

from danlu.cli import estimate as estimate_cli
from danlu.cli import jobs as jobs_cli
from danlu.cli.main import app as main_app
from danlu.cli.markup import visible_lines

ESTIMATE = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
estimate_cli.register(ESTIMATE)
ESTIMATE.command("noop", hidden=True)(lambda: None)  # keeps ``estimate`` a subcommand

EMOJI_PRONE = "a:b:c step:100:loss x:ok:y"
"""Text Rich's emoji codes would change (``:b:``, ``:100:``, ``:ok:``)."""

FAILING_MODEL = """
import os
import sys


def factory():
    sys.stderr.write("loading weights\\x1b[2J\\x1b]0;owned\\x07\\n")
    sys.stderr.write("50%\\r100%\\n")
    sys.stderr.write("no weights here\\n")
    sys.stderr.flush()
    os._exit(3)
"""


def test_visible_lines_keeps_line_breaks_and_escapes_the_rest() -> None:
    assert visible_lines("one\x1b[31m\r\ntwo\rthree\n\n") == "one\\x1b[31m\ntwo\\rthree"
    assert visible_lines("single") == "single"
    assert visible_lines("a\u2028b\x85c") == "a\\u2028b\\x85c"  # no other line break


def test_a_failed_trace_prints_its_output_lines_readably_and_escaped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "cli_failing_model.py").write_text(FAILING_MODEL)
    monkeypatch.chdir(tmp_path)  # the model is found from the current directory
    args = ["estimate", "cli_failing_model:factory", "--batch-size", "2"]
    result = CliRunner().invoke(ESTIMATE, args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert lines == [
        "error: tracing cli_failing_model:factory failed: the tracer exited with status 3",
        "loading weights\\x1b[2J\\x1b]0;owned\\x07",  # shown, not acted on
        "50%",  # (the tracer reads a carriage return as a line break)
        "100%",
        "no weights here",
    ]
    assert "\x1b" not in result.stderr and "\r" not in result.stderr and "\x07" not in result.stderr
    assert "\\n" not in result.stderr  # line breaks are line breaks


def test_estimate_prints_a_gpu_name_without_emoji(tmp_path: Path) -> None:
    table = tmp_path / "gpus.json"
    table.write_text(json.dumps({EMOJI_PRONE: {"capacity_bytes": 80 * 1024**3}}))
    args = ["estimate", "danlu.estimate.zoo:mlp_small", "--batch-size", "2"]
    result = CliRunner().invoke(ESTIMATE, [*args, "--gpu", EMOJI_PRONE, "--gpu-table", str(table)])
    assert result.exit_code == 0, result.output
    assert f"on {EMOJI_PRONE}" in " ".join(result.stdout.split())
    assert "🅱" not in result.stdout and "💯" not in result.stdout


def test_show_prints_a_command_without_emoji(monkeypatch: pytest.MonkeyPatch) -> None:
    api = serve_commands(monkeypatch)  # the module's own consoles, not a test's
    job = api.add_job("j", "PENDING")
    job["spec"] = {"command": ["env", "PATH=/opt:b:/usr", EMOJI_PRONE]}
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    jobs_cli.register(app)
    result = CliRunner().invoke(app, ["show", job["id"]])
    assert result.exit_code == 0, result.output
    shown = " ".join(result.stdout.split())
    assert "PATH=/opt:b:/usr" in shown and "'a:b:c step:100:loss x:ok:y'" in shown
    assert "🅱" not in result.stdout and "💯" not in result.stdout and "🆗" not in result.stdout


def test_sim_error_quotes_a_workload_header_without_emoji(tmp_path: Path) -> None:
    workload = tmp_path / "w.csv"
    workload.write_text("name,a:b:c,step:100:loss\nx,1,2\n")
    result = CliRunner().invoke(main_app, ["sim", "run", "--workload", str(workload), "--quiet"])
    assert result.exit_code == 2, result.output
    error = "".join(result.stderr.split())
    assert "'a:b:c'" in error and "'step:100:loss'" in error
    assert "🅱" not in result.stderr and "💯" not in result.stderr
