"""``danlu user tokens`` and ``danlu metrics`` printed a token's label and a metric's
name as stored, control characters and all: a user's ESC sequence recoloured (or cleared) the
admin's terminal and a line break split the table, spoofing rows. The server refuses such
names now, but rows stored before stay: the tables write their control characters as escapes
(``\\x1b``, ``\\n``), so the text is shown, never acted on, and nothing stored is lost."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import typer
from cli_fake_api import TOKEN, FakeApi, metrics_and_events_app, no_raw_control, serve_commands
from rich.console import Console
from typer.testing import CliRunner

from danlu.cli import admin as admin_cli
from danlu.cli import jobs as jobs_cli
from danlu.cli import metrics as metrics_cli
from danlu.client import Client

EVIL = "lo\x1b[31mss\nX"
"""A metric name that turns the terminal red from there on, and a second line."""
LABEL = "lab\x1b[31m\nel\r\u202eok\x9b2J"
"""A token label with ESC, a line break, a carriage return, a bidi override and a C1 CSI."""
T0 = 1_796_131_413.0


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    api = serve_commands(monkeypatch)
    monkeypatch.setattr(metrics_cli, "console", Console(width=200))
    monkeypatch.setattr(metrics_cli, "FOLLOW_SECONDS", 0.0)
    return api


def test_the_metrics_table_shows_a_stored_control_name_escaped(fake: FakeApi) -> None:
    job = fake.add_job("train", state="SUCCEEDED")["id"]
    fake.add_metrics(
        job,
        [
            {"step": 1, "time": T0, "loss": 2.0, EVIL: 1.5},
            {"step": 2, "time": T0 + 1, "loss": 1.0, EVIL: 0.5},
        ],
    )
    result = CliRunner().invoke(metrics_and_events_app(), ["metrics", job])
    assert result.exit_code == 0, result.output
    no_raw_control(result.stdout)
    assert "lo\\x1b[31mss\\nX" in result.stdout  # the name, shown (not lost, not markup)
    rows = [ln for ln in result.stdout.splitlines() if ln.startswith("│")]
    assert len(rows) == 2 and "1.5" in rows[0] and "0.5" in rows[1], result.stdout


def test_the_metrics_table_shows_a_string_value_escaped(fake: FakeApi) -> None:
    job = fake.add_job("train", state="SUCCEEDED")["id"]
    fake.add_metrics(job, [{"step": 1, "time": T0, "note": "\x1b[2Jhello\nworld"}])
    result = CliRunner().invoke(metrics_and_events_app(), ["metrics", job, "--keys", "note"])
    assert result.exit_code == 0, result.output
    no_raw_control(result.stdout)
    assert "\\x1b[2Jhello\\nworld" in result.stdout


def test_metrics_follow_lines_show_control_names_escaped(fake: FakeApi) -> None:
    job = fake.add_job("train", state="SUCCEEDED")["id"]
    fake.add_metrics(job, [{"step": 1, "time": T0, EVIL: 1.5, "note": "a\nb"}])
    result = CliRunner().invoke(
        metrics_and_events_app(), ["metrics", job, "-f", "--keys", f"{EVIL},note"]
    )
    assert result.exit_code == 0, result.output
    no_raw_control(result.stdout)
    [only] = result.stdout.splitlines()
    assert only.endswith("lo\\x1b[31mss\\nX 1.5  note a\\nb"), only


def test_metrics_json_keeps_the_stored_name_as_it_is(fake: FakeApi) -> None:
    """``--json`` is for scripts: JSON escapes every control character itself."""
    job = fake.add_job("train", state="SUCCEEDED")["id"]
    fake.add_metrics(job, [{"step": 1, "time": T0, EVIL: 1.5}])
    result = CliRunner().invoke(metrics_and_events_app(), ["metrics", job, "--json"])
    assert result.exit_code == 0, result.output
    no_raw_control(result.stdout)
    assert '"lo\\u001b[31mss\\nX": 1.5' in result.stdout


def _tokens_app(monkeypatch: pytest.MonkeyPatch, rows: list[dict[str, Any]]) -> typer.Typer:
    """``danlu user ...`` whose client gets ``rows`` for ``GET /users/mallory/tokens``."""

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and request.url.path == "/api/v1/users/mallory/tokens":
            return httpx.Response(200, json=rows)
        return httpx.Response(404, json={"error": {"type": "http", "field": None, "message": ""}})

    def factory(*_: Any) -> Client:
        return Client("http://fake", TOKEN, transport=httpx.MockTransport(handler))

    monkeypatch.setattr(jobs_cli, "client_factory", factory)
    monkeypatch.setattr(jobs_cli, "console", Console(width=200))
    app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
    admin_cli.register(app)
    return app


def test_the_token_table_shows_a_stored_control_label_escaped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rows = [
        {"prefix": "abc123", "name": LABEL, "created_at": T0, "last_used_at": None, "job_id": None},
        {
            "prefix": "def456",
            "name": "laptop",
            "created_at": T0,
            "last_used_at": T0,
            "job_id": None,
        },
    ]
    app = _tokens_app(monkeypatch, rows)
    result = CliRunner().invoke(app, ["user", "tokens", "mallory"])
    assert result.exit_code == 0, result.output
    no_raw_control(result.stdout)
    assert "lab\\x1b[31m\\nel\\r\\u202eok\\x9b2J" in result.stdout
    table_rows = [ln for ln in result.stdout.splitlines() if ln.startswith("│")]
    assert [r.split("│")[1].strip() for r in table_rows] == ["abc123", "def456"], result.stdout
