"""The CLI's ``logs`` against a proxy and ``metrics --json --keys``:

1. ``danlu logs JOB`` against a server that ignores the log offset (a proxy answering its
   sign-in page to every request) printed the page for ever; it is now an error line naming
   the missing ``X-Danlu-Log-Offset`` header (exit 2), the page not printed.
2. ``danlu metrics JOB --json --keys loss`` ignored ``--keys`` (every metric of every record
   came out); each record now holds only its step, time and the metrics named (with
   ``--superseded`` its attempt and whether it is superseded too).
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from cli_fake_api import TOKEN, FakeApi, jobs_app, metrics_and_events_app, serve_commands
from typer.testing import CliRunner

from danlu.cli import jobs as jobs_cli
from danlu.client import Client

PAGE = b"<html><body>Sign in to continue</body></html>\n"


def test_logs_from_a_proxy_that_ignores_the_offset_is_an_error_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.params.get("offset", ""))
        if len(asked) > 50:  # a reader that never stops ends the test instead of hanging it
            return httpx.Response(200, content=b"")
        return httpx.Response(200, content=PAGE, headers={"Content-Type": "text/html"})

    def factory(home: Path | None, url: str | None, token: str | None) -> Client:
        return Client("http://fake", TOKEN, transport=httpx.MockTransport(handler))

    monkeypatch.setattr(jobs_cli, "client_factory", factory)
    result = CliRunner().invoke(jobs_app(), ["logs", "j1"])
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert "X-Danlu-Log-Offset" in result.stderr
    assert result.stderr.startswith("error: GET /api/v1/jobs/j1/logs: ")
    assert asked == ["0"]


def test_logs_from_a_danlu_server_are_still_printed_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = serve_commands(monkeypatch)
    api.log_chunk = 7
    job = api.add_job("train", "SUCCEEDED")
    api.logs[job["id"]] = b"line one\nline two\nline three\n"
    result = CliRunner().invoke(jobs_app(), ["logs", job["id"]])
    assert result.exit_code == 0, result.output
    assert result.stdout == "line one\nline two\nline three\n"


RECORDS = [
    {"step": 1, "time": 100.0, "loss": 2.0, "lr": 0.1, "acc": 0.5},
    {"step": 2, "time": 101.0, "lr": 0.05},
]


def _metrics(monkeypatch: pytest.MonkeyPatch, *args: str) -> list[dict[str, object]]:
    api: FakeApi = serve_commands(monkeypatch)
    job = api.add_job("train", "RUNNING")
    api.add_metrics(job["id"], RECORDS)
    result = CliRunner().invoke(metrics_and_events_app(), ["metrics", job["id"], *args])
    assert result.exit_code == 0, result.output
    found: list[dict[str, object]] = json.loads(result.stdout)
    return found


def test_metrics_json_holds_only_the_keys_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _metrics(monkeypatch, "--json", "--keys", "loss,acc") == [
        {"step": 1, "time": 100.0, "loss": 2.0, "acc": 0.5},
        {"step": 2, "time": 101.0},  # a metric a record lacks stays out, as the API leaves it
    ]


def test_metrics_json_without_keys_is_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _metrics(monkeypatch, "--json") == RECORDS


def test_metrics_json_keys_with_superseded_keep_the_run_fields() -> None:
    from danlu.cli.metrics import picked

    record = {"step": 3, "time": 1.0, "loss": 1.0, "lr": 0.1, "attempt": 2, "superseded": True}
    assert picked(record, ["lr"], runs=True) == {
        "step": 3,
        "time": 1.0,
        "lr": 0.1,
        "attempt": 2,
        "superseded": True,
    }
    # without --superseded the API sends no run fields: a metric named so is a metric
    assert picked({"step": 1, "attempt": 4.0, "loss": 1.0}, ["loss"]) == {"step": 1, "loss": 1.0}
