"""``danlu metrics --superseded`` reads a record's ``rollback`` generation (the API adds it,
above 0, to a record danlu.train reported after an in-process rollback) as a field of the
run that reported it, beside ``attempt``: not as a metric column."""

from __future__ import annotations

import io
from typing import Any

import pytest
from cli_fake_api import invoke
from rich.console import Console
from test_cli_follow_and_node_reply_types import _metrics, serve

from danlu.cli import main as main_cli
from danlu.cli import metrics as metrics_cli


def _rows(text: str) -> list[list[str]]:
    return [ln.replace("│", " ").split() for ln in text.splitlines() if "│" in ln]


RECORDS: list[dict[str, Any]] = [
    {"step": 4, "time": 0, "loss": 9.0, "attempt": 1, "superseded": True},
    {"step": 4, "time": 0, "loss": 1.5, "attempt": 1, "rollback": 1, "superseded": False},
]


def test_the_table_shows_the_rollback_with_the_attempt_not_as_a_metric() -> None:
    records = [metrics_cli.without_run_fields(r) for r in RECORDS]
    assert metrics_cli.metric_keys(records) == ["loss"]
    out = io.StringIO()
    Console(file=out, width=100).print(metrics_cli.table(RECORDS, ["loss"], runs=True))
    assert _rows(out.getvalue()) == [
        ["4", "-", "1", "yes", "9"],
        ["4", "-", "1", "rollback", "1", "no", "1.5"],
    ]
    assert metrics_cli.line(RECORDS[1], ["loss"], runs=True) == (
        "step 4  -  attempt 1 rollback 1  loss 1.5"
    )


def test_metrics_superseded_has_no_rollback_column(monkeypatch: pytest.MonkeyPatch) -> None:
    serve(monkeypatch, _metrics([dict(r) for r in RECORDS]))
    code, out, err = invoke(main_cli.app, "metrics", "j1", "--superseded")
    assert code == 0, (out, err)
    header = next(ln for ln in out.splitlines() if "step" in ln)
    assert header.replace("┃", " ").split() == ["step", "time", "attempt", "superseded", "loss"]
    assert _rows(out)[-1][2:6] == ["1", "rollback", "1", "no"]


def test_a_rollback_that_is_no_whole_number_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    serve(monkeypatch, _metrics([{**RECORDS[1], "rollback": "one"}]))
    code, out, err = invoke(main_cli.app, "metrics", "j1", "--superseded")
    assert code == 2, (out, err)
    assert "for field rollback of metric record" in " ".join(err.split())
