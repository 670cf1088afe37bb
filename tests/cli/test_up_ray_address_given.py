"""``--ray-address`` given without ``--executor ray`` stops ``danlu up`` / ``danlu server``
with exit 2 (docs/deploy.md) even when its value is ``auto``, the setting's default: the
check compared the value with the default only, so ``--ray-address auto`` started the local
executor and ran the jobs on this host. An empty variable is still no setting."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from danlu.cli import server as server_cli
from danlu.config import check_executor_settings, load_settings
from danlu.core.errors import ConfigError

APP = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
server_cli.register(APP)


@pytest.mark.parametrize("command", ["up", "server"])
def test_ray_address_auto_without_the_ray_executor_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    import danlu.server.main as server_main

    def serve(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the control plane started")

    monkeypatch.setattr(server_main, "run", serve)  # a start fails the test, never hangs it
    home = tmp_path / "home"
    args = [command, "--home", str(home), "--port", "0", "--ray-address", "auto"]
    result = CliRunner().invoke(APP, args)
    assert result.exit_code == 2, result.output
    text = " ".join(result.stderr.split())
    assert "--ray-address (DANLU_RAY_ADDRESS) applies to --executor ray" in text, text
    assert not (home / "danlu.db").exists(), "refused after the store was made"


@pytest.mark.parametrize(
    ("variable", "value"),
    [("DANLU_RAY_ADDRESS", "auto"), ("DANLU_SLURM_PENDING_LIMIT", "300")],
)
def test_a_variable_of_another_executor_at_its_default_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError, match=variable):
        check_executor_settings(load_settings(home=tmp_path))


def test_ray_address_auto_with_the_ray_executor_and_empty_variables_are_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    check_executor_settings(load_settings(home=tmp_path, executor="ray", ray_address="auto"))
    for name in ("DANLU_RAY_ADDRESS", "DANLU_SLURM_PARTITION", "DANLU_SLURM_PENDING_LIMIT"):
        monkeypatch.setenv(name, "")
    settings = load_settings(home=tmp_path)
    check_executor_settings(settings)
    assert (settings.ray_address, settings.slurm_pending_limit) == ("auto", 300.0)
