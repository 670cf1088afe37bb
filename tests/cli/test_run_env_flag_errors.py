"""``danlu run --env`` given a value it cannot take is one error line naming ``--env`` and
that value, before anything is sent: ``--env =x`` said ``env: --env '=x': ...`` (a spec
field and the flag, one after the other) and ``--env HF_HOME`` not set here said
``env.HF_HOME: ...``, a field of a spec the user never wrote."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from danlu.cli.main import app


@pytest.fixture(autouse=True)
def _no_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DANLU_URL", "http://127.0.0.1:9")  # never reached: refused first
    monkeypatch.setenv("DANLU_TOKEN", "t")
    monkeypatch.delenv("DANLU_WALK_UNSET", raising=False)


def _stderr(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 2, result.output
    return result.stderr


def test_an_env_without_a_name_is_named_by_the_flag() -> None:
    err = _stderr("run", "--env", "=x", "--", "true")
    assert err == "error: --env '=x': write NAME=VALUE or NAME\n"


def test_an_env_not_set_here_is_named_by_the_flag() -> None:
    err = _stderr("run", "--env", "DANLU_WALK_UNSET", "--", "true")
    assert err == (
        "error: --env 'DANLU_WALK_UNSET': not set here; write --env DANLU_WALK_UNSET=VALUE\n"
    )
