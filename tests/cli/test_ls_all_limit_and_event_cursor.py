"""``danlu ls --all --limit N`` is refused (``--all`` lists every job: the limit was
dropped without a word), and ``danlu show`` stops with an error against a server that does
not read events on from ``after_id`` (it asked for the same page forever). ``danlu top``
into a pipe prints a frame each interval (a Live view showed nothing until Ctrl-C), and
exits 141 once the pipe's reader has gone."""

from __future__ import annotations

import json
from typing import Any

import pytest
import typer
from cli_fake_api import FakeApi, serve_commands
from rich.console import Console
from typer.testing import CliRunner

from danlu.cli import job_views
from danlu.cli import jobs as jobs_cli

APP = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
jobs_cli.register(APP)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    api = serve_commands(monkeypatch)
    monkeypatch.setattr(jobs_cli, "console", Console(width=200))
    return api


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(APP, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def test_ls_all_with_a_limit_is_refused_naming_both(fake: FakeApi) -> None:
    for i in range(3):
        fake.add_job(f"job-{i}", "SUCCEEDED")
    code, out, err = run("ls", "--all", "--limit", "2", "--json")
    assert code == 2 and out == ""
    assert "--limit" in err and "--all" in err


@pytest.mark.parametrize("args", [("--all",), ("--limit", "2"), ("--limit", "100")])
def test_ls_takes_all_or_a_limit_alone(fake: FakeApi, args: tuple[str, ...]) -> None:
    for i in range(3):
        fake.add_job(f"job-{i}", "SUCCEEDED")
    code, out, _ = run("ls", *args, "--json")
    assert code == 0
    assert len(json.loads(out)) == (2 if args == ("--limit", "2") else 3)


def _event(job_id: str, event_id: int) -> dict[str, Any]:
    return {
        "id": event_id,
        "job_id": job_id,
        "time": 1000.0 + event_id,
        "old": "PENDING",
        "new": "RUNNING",
        "reason": f"cycle {event_id}",
    }


def test_show_stops_at_a_server_that_answers_the_same_events_again(
    fake: FakeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = fake.add_job("cycler", "RUNNING")
    page = [_event(job["id"], i) for i in range(1, job_views.EVENTS_PAGE + 1)]
    asked: list[int] = []

    def events(self: Any, job_id: str, after_id: int = 0, limit: int = 100) -> list[Any]:
        asked.append(after_id)
        if len(asked) > 5:  # the old loop: stop the test rather than hang
            raise AssertionError(f"asked for events {len(asked)} times: {asked}")
        return page  # after_id ignored: always the first page

    monkeypatch.setattr("danlu.client.rest.Client.events", events)
    code, _, err = run("show", job["id"], "--json")
    assert code == 2
    assert "later events cannot be read" in err
    assert asked == [0, job_views.EVENTS_PAGE]


def test_top_into_a_pipe_prints_a_frame_each_interval(
    fake: FakeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake.add_job("runner", "RUNNING")
    naps: list[float] = []

    def sleep(seconds: float) -> None:
        naps.append(seconds)
        if len(naps) == 2:
            raise KeyboardInterrupt  # Ctrl-C after the second frame

    monkeypatch.setattr(job_views.time, "sleep", sleep)
    code, out, _ = run("top", "--interval", "5")
    assert code == 0
    assert naps == [5.0, 5.0]
    assert out.count("runner") == 2  # two whole frames, not a Live view shown at the end


def test_top_into_a_pipe_whose_reader_has_gone_exits_as_sigpipe(
    fake: FakeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Gone(Console):
        def print(self, *args: Any, **kwargs: Any) -> None:
            raise BrokenPipeError(32, "Broken pipe")

    def sleep(seconds: float) -> None:
        raise AssertionError("top went on after its reader had gone")

    monkeypatch.setattr(jobs_cli, "console", Gone(width=200))
    monkeypatch.setattr(job_views.time, "sleep", sleep)
    code, _, _ = run("top")
    assert code == 141
