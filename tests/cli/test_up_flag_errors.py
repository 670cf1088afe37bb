"""``danlu up`` / ``danlu server`` report a bad setting given as a flag by the flag (and its
variable), not by the ``DANLU_*`` variable alone, which the user never set; a bad variable
is still reported by the variable."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from danlu.cli import server as server_cli
from danlu.config import load_settings
from danlu.core.errors import ConfigError

APP = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
server_cli.register(APP)


@pytest.mark.parametrize(
    ("args", "shown"),
    [
        (["--interval", "-1"], "--interval (DANLU_INTERVAL): "),
        (["--executor", "bogus"], "--executor (DANLU_EXECUTOR): "),
    ],
)
def test_a_bad_flag_is_named_by_its_flag(tmp_path: Path, args: list[str], shown: str) -> None:
    result = CliRunner().invoke(APP, ["up", "--home", str(tmp_path / "home"), *args])
    assert result.exit_code == 2
    assert shown in " ".join(result.stderr.split())


def test_a_bad_variable_is_still_named_by_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DANLU_INTERVAL", "-1")
    result = CliRunner().invoke(APP, ["up", "--home", str(tmp_path / "home")])
    assert result.exit_code == 2
    text = " ".join(result.stderr.split())
    assert "DANLU_INTERVAL: " in text and "--interval" not in text


def test_load_settings_names_a_flag_only_for_an_override_it_maps() -> None:
    with pytest.raises(ConfigError, match=r"^--interval \(DANLU_INTERVAL\): "):
        load_settings(flags={"interval": "--interval"}, interval=-1)
    with pytest.raises(ConfigError, match=r"^DANLU_INTERVAL: "):
        load_settings(interval=-1)
