"""``danlu show`` with events whose ``time`` is missing, null or not a time the server could
have stored: the row shows ``-`` for it (it showed the epoch, ``00:00:00`` in UTC, as if
the event had a time), and a time of the wrong type or out of range is also an error line
naming the field (exit 2, after the tables), never a traceback."""

from __future__ import annotations

import time
from typing import Any

import pytest
import typer
from cli_fake_api import FakeApi, serve_commands
from rich.console import Console
from typer.testing import CliRunner

from danlu.cli import jobs as jobs_cli

APP = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
jobs_cli.register(APP)
MISSING = object()


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    fake = serve_commands(monkeypatch)
    monkeypatch.setattr(jobs_cli, "console", Console(width=200))
    return fake


def _show_with_event_time(api: FakeApi, stamp: Any) -> tuple[int, str, str]:
    job = api.add_job("train", "RUNNING")
    event = {"id": 2, "job_id": job["id"], "old": "PENDING", "new": "RUNNING", "reason": "go"}
    if stamp is not MISSING:
        event["time"] = stamp
    api.events[job["id"]].append(event)
    result = CliRunner().invoke(APP, ["show", job["id"]])
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, " ".join(result.stderr.split())


def _row(out: str, reason: str) -> list[str]:
    """The cells of the events table's row of ``reason``."""
    rows = [line for line in out.splitlines() if f" {reason} " in line and "│" in line]
    assert len(rows) == 1, out
    return [cell.strip() for cell in rows[0].strip("│ ").split("│")]


EPOCH = time.strftime("%H:%M:%S", time.localtime(0))


@pytest.mark.parametrize("stamp", [MISSING, None])
def test_an_event_without_a_time_shows_a_dash(api: FakeApi, stamp: Any) -> None:
    code, out, err = _show_with_event_time(api, stamp)
    assert (code, err) == (0, "")
    assert _row(out, "go") == ["-", "PENDING", "RUNNING", "go"]
    assert _row(out, "submitted")[0] == time.strftime("%H:%M:%S", time.localtime(1000.0))


@pytest.mark.parametrize("stamp", ["12:00", True, -5, 1e20, 10**400, [1000], {"s": 1000}], ids=repr)
def test_an_event_time_that_is_no_time_shows_a_dash_and_is_an_error(
    api: FakeApi, stamp: Any
) -> None:
    code, out, err = _show_with_event_time(api, stamp)
    assert code == 2
    assert _row(out, "go") == ["-", "PENDING", "RUNNING", "go"]
    assert EPOCH not in out.split("events", 1)[1]
    assert err.startswith("error: server sent ") and "for field time of event 2" in err
    assert "expected POSIX seconds" in err


def test_an_event_at_time_zero_is_shown_as_the_epoch(api: FakeApi) -> None:
    code, out, _ = _show_with_event_time(api, 0)
    assert code == 0
    assert _row(out, "go")[0] == EPOCH
