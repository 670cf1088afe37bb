"""A sweep whose ``metric`` no trial reports (``metric: {name: accuracy}`` for trials that
report ``loss``) ran every trial to its end and ended DONE with no best trial, and ``danlu
sweep show`` said not a word of why. It now prints one ``note:`` line naming the metric and
the numeric fields the trials do report; a sweep whose trials reported the metric, a job
array (no metric) and ``--json`` get no such line."""

from __future__ import annotations

from typing import Any

import pytest
import typer
from cli_fake_api import FakeApi, invoke, jobs_app, serve_jobs_commands

SWEEP_ID = "44f166e5cd88"


def _app() -> typer.Typer:
    from danlu.cli import sweep as sweep_cli

    app = jobs_app()
    sweep_cli.register(app)
    return app


def _sweep(api: FakeApi, metric: str | None, trials: list[dict[str, Any]]) -> None:
    api.sweeps[SWEEP_ID] = {
        "id": SWEEP_ID,
        "name": "acc-sweep",
        "user": "admin",
        "array": metric is None,
        "state": "DONE",
        "reason": "2 trials ended",
        "metric": metric,
        "goal": "maximize" if metric else None,
        "total": len(trials),
        "submitted": len(trials),
        "created_at": 1000.0,
        "finished_at": 2000.0,
        "spec": {"parallel": 1},
        "notes": [],
        "trials": trials,
        "best": None,
    }


def _trial(api: FakeApi, number: int, best: float | None = None) -> dict[str, Any]:
    job = api.add_job(f"acc-sweep-{number}", state="SUCCEEDED")
    records = [
        {"step": step, "time": 1000.0 + step, "loss": 1.0 / step, "applied": True, "note": "x"}
        for step in (1, 2)
    ]
    api.add_metrics(job["id"], records)
    return {
        "job_id": job["id"],
        "trial": number,
        "state": "SUCCEEDED",
        "parameters": {"lr": 0.01},
        "best": best,
        "step": None if best is None else 2,
        "stopped_early": False,
    }


def _notes(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("note:")]


def test_a_metric_no_trial_reports_is_said_with_what_they_report(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = serve_jobs_commands(monkeypatch)
    _sweep(api, "accuracy", [_trial(api, 0), _trial(api, 1)])
    code, out, err = invoke(_app(), "sweep", "show", SWEEP_ID)
    assert code == 0, out + err
    assert _notes(out) == [
        "note: no trial has reported accuracy; they report loss: metric.name must name one of them"
    ], out


def test_no_note_when_a_trial_reported_the_metric(monkeypatch: pytest.MonkeyPatch) -> None:
    api = serve_jobs_commands(monkeypatch)
    _sweep(api, "loss", [_trial(api, 0, best=0.5), _trial(api, 1)])
    code, out, err = invoke(_app(), "sweep", "show", SWEEP_ID)
    assert code == 0, out + err
    assert _notes(out) == []
    assert not [r for r in api.requests if r.url.path.endswith("/metrics")]


def test_no_note_for_an_array_nor_with_json(monkeypatch: pytest.MonkeyPatch) -> None:
    api = serve_jobs_commands(monkeypatch)
    _sweep(api, None, [_trial(api, 0)])
    code, out, _ = invoke(_app(), "sweep", "show", SWEEP_ID)
    assert code == 0 and _notes(out) == []
    _sweep(api, "accuracy", [_trial(api, 1)])
    code, out, _ = invoke(_app(), "sweep", "show", SWEEP_ID, "--json")
    assert code == 0 and "no trial has reported" not in out


def test_trials_of_the_wrong_type_are_reported_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = serve_jobs_commands(monkeypatch)
    _sweep(api, "accuracy", [_trial(api, 0) | {"state": ["SUCCEEDED"]}])
    code, out, err = invoke(_app(), "sweep", "show", SWEEP_ID)
    assert code == 2 and "trials[0].state" in err, out + err
    api.sweeps[SWEEP_ID]["trials"] = "none"
    code, out, err = invoke(_app(), "sweep", "show", SWEEP_ID)
    assert code == 2 and "trials" in err, out + err
