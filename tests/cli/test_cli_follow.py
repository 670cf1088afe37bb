"""``danlu metrics -f`` and ``danlu events -f``: every record printed once, as one line
each however narrow the output (a pipe is 80 columns), through Typer's CliRunner against the
in-memory API of ``cli_fake_api``."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import pytest
from cli_fake_api import FakeApi, metrics_and_events_app, serve_commands
from rich.console import Console
from typer.testing import CliRunner

from danlu.cli import events as events_cli
from danlu.cli import metrics as metrics_cli
from danlu.cli import run as run_cli

T0 = 1_796_131_413.0


APP = metrics_and_events_app()


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    api = serve_commands(monkeypatch)
    monkeypatch.setattr(metrics_cli, "console", Console(width=80))
    monkeypatch.setattr(metrics_cli, "FOLLOW_SECONDS", 0.0)
    return api


def test_metrics_follow_prints_every_record_once_with_its_own_keys(fake: FakeApi) -> None:
    job = fake.add_job("train", state="RUNNING")["id"]
    fake.add_metrics(job, [{"step": 10, "time": T0, "loss": 1.0}])
    fake.progress[job] = ["RUNNING", "RUNNING", "SUCCEEDED"]
    fake.metric_arrivals = [
        [],  # the first read: the tail
        [
            {"step": 10, "time": T0 + 5, "val_loss": 2.0},  # an eval at the step shown
            {"step": 5, "time": T0 + 6, "loss": 3.0},  # a restart from the checkpoint at 4
            {"step": 11, "time": T0 + 7, "loss": 0.9},
        ],
        [{"step": 6, "time": T0 + 8, "loss": 2.5, "lr": 0.001}],
    ]
    result = CliRunner().invoke(APP, ["metrics", job, "-f"])
    assert result.exit_code == 0, result.output
    lines = [ln.split("  ", 2)[::2] for ln in result.stdout.splitlines()]
    assert lines == [
        ["step 10", "loss 1"],
        ["step 10", "val_loss 2"],
        ["step 5", "loss 3"],
        ["step 11", "loss 0.9"],
        ["step 6", "loss 2.5  lr 0.001"],
    ]


def test_metrics_follow_keeps_the_keys_asked_for(fake: FakeApi) -> None:
    job = fake.add_job("train", state="SUCCEEDED")["id"]
    fake.add_metrics(job, [{"step": 1, "time": T0, "loss": 1.0, "lr": 0.1}])
    fake.metric_arrivals = [[], [{"step": 2, "time": T0, "loss": 0.5, "lr": 0.1}]]
    result = CliRunner().invoke(APP, ["metrics", job, "-f", "--keys", "lr"])
    assert result.exit_code == 0, result.output
    assert [ln.split("  ")[2:] for ln in result.stdout.splitlines()] == [["lr 0.1"], ["lr 0.1"]]


class _Stub:
    """A client whose job has ended: what ``follow`` and ``attach`` read of it."""

    def feed(self, **query: Any) -> list[dict[str, Any]]:
        return []

    def get_job(self, job: str) -> dict[str, Any]:
        return {"state": "CANCELLED", "exit_code": None}

    def metrics_page(self, job: str, **query: Any) -> tuple[list[dict[str, Any]], int]:
        return [], 0

    def metrics(self, job: str, **query: Any) -> list[dict[str, Any]]:
        return []

    def follow_logs(self, job: str) -> Iterator[str]:
        return iter(())

    def follow_log_bytes(self, job: str) -> Iterator[bytes]:
        return iter(())

    def why(self, job: str) -> dict[str, Any]:
        return {"reason": "time limit reached: ran 2h of 2h; stopped with SIGTERM, then SIGKILL"}


def test_followed_lines_are_not_wrapped_at_80_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    narrow = Console(file=out, width=80)
    monkeypatch.setattr(events_cli, "console", narrow)
    monkeypatch.setattr(metrics_cli, "console", narrow)
    monkeypatch.setattr(run_cli, "err", narrow)
    monkeypatch.setattr(events_cli, "FOLLOW_SECONDS", 0.0)
    event = {
        "id": 7,
        "job_id": "c92ba5c9bb8a",
        "time": T0,
        "old": "RUNNING",
        "new": "CANCELLED",
        "reason": "time limit reached: ran 2h of 2h",
        "job_name": "train-gpt",
        "user": "alice",
        "project": "research",
    }
    stub: Any = _Stub()
    events_cli.follow(stub, [event], {}, reads=1)
    record = {"step": 1200, "time": T0, "loss": 0.53121, "lr": 0.001, "grad_norm": 1.234}
    record |= {"tokens_per_s": 123456.7, "batch_size": 512, "val_loss": 0.61}
    metrics_cli.follow(stub, "c92ba5c9bb8a", [record], [], 0)
    assert run_cli.attach(stub, "c92ba5c9bb8a") == run_cli.FAILED_WITHOUT_CODE
    lines = out.getvalue().splitlines()
    assert len(lines) == 3, lines
    assert lines[0].endswith("RUNNING -> CANCELLED: time limit reached: ran 2h of 2h")
    assert lines[1].startswith("step 1200") and lines[1].endswith("val_loss 0.61")
    assert lines[2].endswith("stopped with SIGTERM, then SIGKILL")
