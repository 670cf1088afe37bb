"""``danlu metrics -f`` reads new records by cursor, and the API now says of each
the ``attempt`` that reported it and whether it is ``superseded`` (a later attempt went back
over its step). Those are not metrics: without ``--superseded`` they are not shown as
columns; with it each line says them. ``superseded`` changes when a restarted run reports
the record's step again, and a record read again within the follower's grace is printed
once all the same."""

from __future__ import annotations

import io
from typing import Any

import pytest
from rich.console import Console

from danlu.cli import metrics as metrics_cli

T0 = 1_796_131_413.0


class _Restarting:
    """A job whose run reports step 3 and is replaced by a run that resumes at step 2: the
    follower reads the records after its cursor three times (the first again within its
    grace), then the job has ended."""

    def __init__(self) -> None:
        first = {"step": 3, "time": T0, "loss": 1.0, "attempt": 1, "superseded": False}
        again = {**first, "superseded": True}
        resumed = {"step": 2, "time": T0, "loss": 0.5, "attempt": 2, "superseded": False}
        self.pages = [([first], 6), ([again, resumed], 7), ([again, resumed], 7)]
        self.states = ["RUNNING", "RUNNING", "SUCCEEDED"]

    def get_job(self, job: str) -> dict[str, Any]:
        return {"state": self.states.pop(0)}

    def metrics_page(self, job: str, **query: Any) -> tuple[list[dict[str, Any]], int]:
        assert query["after_id"] == 5  # the grace keeps the cursor
        return self.pages.pop(0)


def _follow(monkeypatch: pytest.MonkeyPatch, runs: bool) -> list[str]:
    out = io.StringIO()
    monkeypatch.setattr(metrics_cli, "console", Console(file=out, width=80))
    monkeypatch.setattr(metrics_cli, "FOLLOW_SECONDS", 0.0)
    shown = {"step": 1, "time": T0, "loss": 2.0}
    if runs:
        shown |= {"attempt": 1, "superseded": False}
    client: Any = _Restarting()
    metrics_cli.follow(client, "c92ba5c9bb8a", [shown], [], 5, runs=runs)
    words = [ln.split() for ln in out.getvalue().splitlines()]
    return [" ".join(w[:2] + w[3:]) for w in words]  # without the time of day


def test_a_follower_shows_no_attempt_column_and_each_record_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _follow(monkeypatch, runs=False) == ["step 1 loss 2", "step 3 loss 1", "step 2 loss 0.5"]


def test_with_superseded_each_line_says_its_attempt(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _follow(monkeypatch, runs=True) == [
        "step 1 attempt 1 loss 2",
        "step 3 attempt 1 loss 1",  # as it was when it was read: not superseded yet
        "step 2 attempt 2 loss 0.5",
    ]


def test_the_table_says_the_attempt_and_marks_the_superseded() -> None:
    records = [
        {"step": 3, "time": 0, "loss": 1.0, "attempt": 1, "superseded": True},
        {"step": 3, "time": 0, "loss": 0.5, "attempt": None, "superseded": False},
    ]
    out = io.StringIO()
    Console(file=out, width=80).print(metrics_cli.table(records, ["loss"], runs=True))
    rows = [ln.replace("│", " ").split() for ln in out.getvalue().splitlines() if "│" in ln]
    assert rows == [["3", "-", "1", "yes", "1"], ["3", "-", "-", "no", "0.5"]]
    assert metrics_cli.line(records[0], ["loss"], runs=True) == (
        "step 3  -  attempt 1  superseded  loss 1"
    )
