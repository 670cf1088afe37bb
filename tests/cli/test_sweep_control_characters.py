"""``danlu sweep ls`` and ``danlu sweep show`` print a sweep's name, metric, reason and
string parameter values with their control characters written as escapes: a stored sweep or
a string choice may hold an ESC sequence or a line break, which rich's markup escaping
alone let through to the terminal (through the in-memory API of ``cli_fake_api``)."""

from __future__ import annotations

import pytest
from cli_fake_api import FakeApi, invoke, jobs_app, serve_jobs_commands

SWEEP = "5a7e0c9d1b2f"
ESC = "\x1b[2J"  # clears the screen when a terminal prints it


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    api = serve_jobs_commands(monkeypatch)
    job = api.add_job("lr-0", "SUCCEEDED")
    api.sweeps[SWEEP] = {
        "id": SWEEP,
        "name": "lr",
        "user": "admin",
        "array": False,
        "state": "FAILED",
        "reason": f"trial failed:{ESC}\nretry",
        "metric": f"loss{ESC}",
        "goal": "minimize",
        "total": 1,
        "submitted": 1,
        "created_at": 1000.0,
        "finished_at": 1100.0,
        "spec": {"parallel": 1},
        "trials": [
            {
                "job_id": job["id"],
                "trial": 0,
                "state": "SUCCEEDED",
                "parameters": {"opt": f"adam{ESC}"},
                "best": 0.5,
                "step": 20,
                "stopped_early": False,
            }
        ],
        "best": None,
    }
    return api


def _app() -> object:
    from danlu.cli import sweep as sweep_cli

    app = jobs_app()
    sweep_cli.register(app)
    return app


def test_sweep_show_writes_control_characters_as_escapes(fake: FakeApi) -> None:
    code, out, err = invoke(_app(), "sweep", "show", SWEEP)
    assert code == 0, (out, err)
    assert "\x1b" not in out, repr(out)
    assert "adam\\x1b[2J" in out, out
    assert "trial failed:\\x1b[2J\\nretry" in out.replace("\n", ""), out


def test_sweep_ls_writes_control_characters_as_escapes(
    fake: FakeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    code, out, err = invoke(_app(), "sweep", "ls")
    assert code == 0, (out, err)
    assert "\x1b" not in out, repr(out)
    assert "loss\\x1b[2J" in out, out
