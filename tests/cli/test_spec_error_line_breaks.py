"""A spec the CLI cannot read whose error spans lines (the YAML reader's words, then a line
with the fix: a tab in the file) is printed with its line breaks, not a literal ``\\n``;
each line's control characters are still written as escapes, and an error the server sent
stays one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_fake_api import invoke, jobs_app, serve_jobs_commands

from danlu.cli.options import error_line
from danlu.client.errors import InvalidRequestError

TAB_SPEC = "name: a\ncommand: [echo, hi]\nresources:\n\tgpus: 1\n"
FIX = "YAML indents with spaces, never tabs: replace the tab on line 4 with spaces"


def test_submit_prints_a_yaml_errors_fix_on_its_own_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    serve_jobs_commands(monkeypatch)
    spec = tmp_path / "job.yaml"
    spec.write_text(TAB_SPEC)
    code, out, err = invoke(jobs_app(), "submit", str(spec))
    assert code == 2, (out, err)
    lines = err.splitlines()
    assert lines[0].startswith(f"error: {spec}: the job spec is not valid YAML"), err
    assert FIX in lines, err
    assert "\\n" not in err, err
    assert "\t" not in err and "\\tgpus: 1" in err, err  # the quoted line's tab, escaped


def test_a_local_errors_lines_keep_their_control_characters_escaped(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from danlu.core.errors import SpecError

    error_line(SpecError("", "first\x1b[2J line\nsecond [bold]line[/bold]"))
    err = capsys.readouterr().err
    assert err.splitlines() == ["error: first\\x1b[2J line", "second [bold]line[/bold]"]


def test_a_servers_error_with_a_line_break_stays_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    error_line(InvalidRequestError(422, "invalid_spec", "name", "bad\nFAKE LINE"))
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "bad\\nFAKE LINE" in err, err


def test_sweep_submit_prints_a_yaml_errors_fix_on_its_own_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import typer

    from danlu.cli import sweep as sweep_cli

    serve_jobs_commands(monkeypatch)
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    sweep_cli.register(app)
    spec = tmp_path / "sweep.yaml"
    spec.write_text("name: s\nbase:\n\tcommand: [echo]\n")
    code, out, err = invoke(app, "sweep", "submit", str(spec))
    assert code == 2, (out, err)
    assert err.startswith(f"error: {spec}: "), err
    assert FIX.replace("line 4", "line 3") in err.splitlines(), err
    assert "\\n" not in err, err
