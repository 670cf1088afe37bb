"""``danlu metrics --keys ""`` (``--keys "$KEYS"`` with the variable unset) or ``--keys ,``
names no metric: it showed the first 8 without a word, as if --keys had been left out. Now
it is refused naming ``--keys``, exit 2, before the server is asked."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from danlu.cli.main import app


@pytest.fixture(autouse=True)
def no_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DANLU_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("DANLU_TOKEN", "t")


@pytest.mark.parametrize("keys", ["", " ", ",", " , ,"])
@pytest.mark.parametrize("follow", [[], ["--follow"]])
def test_keys_naming_no_metric_are_refused(keys: str, follow: list[str]) -> None:
    result = CliRunner().invoke(app, ["metrics", "j1", "--keys", keys, *follow])
    assert result.exit_code == 2, result.output
    assert result.stderr == (
        "error: --keys: empty; give metric names, comma-separated (e.g. loss,lr), or leave "
        "--keys out for the first 8\n"
    )


@pytest.mark.parametrize("keys", ["loss", "loss,,lr", " loss "])
def test_keys_naming_a_metric_go_on_to_the_server(keys: str) -> None:
    result = CliRunner().invoke(app, ["metrics", "j1", "--keys", keys])
    assert result.exit_code == 2
    assert "cannot reach the danlu server" in result.stderr
