"""Every number flag of the ``danlu`` command line is written plainly: typer read ``1_000``
as 1000 (``danlu ls --limit 1_0`` listed 10 jobs, ``danlu sim run --nodes 1_6`` simulated
16 nodes, ``danlu wait --poll 1_0`` looked every 10 s), as ``--port`` and ``--quota-gpus``
no longer do. Now such a value is an error line naming the flag, exit 2, before anything is
sent or started; plain values, signs and bounds are read as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from danlu.cli import server as server_cli
from danlu.cli.main import app


def _number_flags() -> list[tuple[tuple[str, ...], str]]:
    """(command path, flag) for every option of the command tree that takes a number."""
    found: list[tuple[tuple[str, ...], str]] = []

    def walk(command: Any, path: tuple[str, ...]) -> None:
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                walk(sub, (*path, name))
            return
        for param in command.params:
            flag = param.opts[0]
            # --port has its own parser and words (test_up_port_review89)
            if param.bare_type() in ("int", "float") and flag.startswith("--") and flag != "--port":
                found.append((path, flag))

    walk(typer.main.get_command(app), ())
    return found


NUMBER_FLAGS = _number_flags()


def test_the_walk_finds_the_number_flags() -> None:
    flags = {(" ".join(path), flag) for path, flag in NUMBER_FLAGS}
    assert {("ls", "--limit"), ("sim run", "--nodes"), ("wait", "--poll")} <= flags
    assert len(flags) >= 40


@pytest.fixture
def unstarted(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """No server is reached nor started: a flag read would otherwise go on to do so."""
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(server_cli, "_start", lambda **given: calls.append(given))
    monkeypatch.setenv("DANLU_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("DANLU_TOKEN", "t")
    return calls


@pytest.mark.parametrize(
    ("path", "flag"), NUMBER_FLAGS, ids=[" ".join((*p, f)) for p, f in NUMBER_FLAGS]
)
def test_a_number_with_an_underscore_is_refused_naming_the_flag(
    unstarted: list[dict[str, Any]], path: tuple[str, ...], flag: str
) -> None:
    result = CliRunner().invoke(app, [*path, flag, "1_0"])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(
        f"error: {flag}: '1_0' is not a number written plainly; write it in ASCII digits "
        f"without '_', e.g. {flag} "
    ), result.output
    assert unstarted == []


@pytest.mark.parametrize(
    ("args", "key", "value"),
    [
        (["up", "--interval", "2.5"], "interval", 2.5),
        (["up", "--interval", " 3 "], "interval", 3.0),
        (["server", "--interval", "1e1"], "interval", 10.0),
    ],
)
def test_plain_numbers_are_read_as_before(
    unstarted: list[dict[str, Any]], args: list[str], key: str, value: float
) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert [call[key] for call in unstarted] == [value]


def _words(text: str) -> str:
    return " ".join(text.replace("\u2502", " ").split())


def test_bounds_are_still_checked() -> None:
    result = CliRunner().invoke(app, ["ls", "--limit", "1001"])
    assert result.exit_code == 2
    assert "--limit: 1001 is out of range; give a whole number from 1 to 1000" in result.output
    result = CliRunner().invoke(app, ["update", "x", "--priority", "-2000000"])
    assert result.exit_code == 2
    assert "from -1000000 to 1000000" in _words(result.output)
    result = CliRunner().invoke(app, ["ls", "--limit", "ten"])
    assert result.exit_code == 2
    assert "--limit: 'ten' is not a whole number" in result.output


def test_an_in_range_number_reaches_the_command(tmp_path: Path) -> None:
    """``sim run --nodes +2 --jobs 3`` (a sign, as typer read it) still simulates: 2 nodes
    of the default 4 GPUs."""
    out = tmp_path / "run.json"
    result = CliRunner().invoke(
        app, ["sim", "run", "--nodes", "+2", "--jobs", "3", "--quiet", "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert '"total_gpus": 8' in out.read_text(), result.output  # 2 nodes of 4 GPUs
