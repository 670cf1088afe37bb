"""``danlu sweep show ARRAY`` lists an array's tasks as docs/sweeps.md shows them: number,
job, state, index (``index=N``). It showed them as trials, with a metric (``BEST``) and a
``STEP`` column that could only say ``-``; so did a sweep without a metric. A sweep with a
metric keeps both columns."""

from __future__ import annotations

from typing import Any

import pytest
from cli_fake_api import invoke, serve_jobs_commands
from test_sweep_metric_unreported import SWEEP_ID, _app, _sweep, _trial


def _header(out: str) -> list[str]:
    line = next(line for line in out.splitlines() if "JOB" in line)
    return [cell.strip() for cell in line.strip("┃ ").split("┃")]


def _show(monkeypatch: pytest.MonkeyPatch, metric: str | None, array: bool) -> str:
    api = serve_jobs_commands(monkeypatch)
    trials: list[dict[str, Any]] = [_trial(api, 0), _trial(api, 1)]
    _sweep(api, metric, trials)
    api.sweeps[SWEEP_ID]["array"] = array
    code, out, err = invoke(_app(), "sweep", "show", SWEEP_ID)
    assert code == 0, out + err
    return out


def test_an_arrays_tasks_are_number_job_state_index(monkeypatch: pytest.MonkeyPatch) -> None:
    out = _show(monkeypatch, None, array=True)
    assert _header(out) == ["TASK", "JOB", "STATE", "PARAMETERS"], out


def test_a_sweep_without_a_metric_has_no_metric_column(monkeypatch: pytest.MonkeyPatch) -> None:
    out = _show(monkeypatch, None, array=False)
    assert _header(out) == ["TRIAL", "JOB", "STATE", "PARAMETERS"], out


def test_a_sweep_with_a_metric_keeps_it_and_the_step(monkeypatch: pytest.MonkeyPatch) -> None:
    out = _show(monkeypatch, "loss", array=False)
    assert _header(out) == ["TRIAL", "JOB", "STATE", "loss", "STEP", "PARAMETERS"], out
