"""A sweep's ``notes`` (what its submission tells of every trial: a memory estimate that was
not possible, the model family inferred) were shown by none of ``danlu sweep show``,
``danlu sweep submit`` and ``danlu submit --array``: only ``--json`` passed them on. Each
now prints a ``note:`` line for each, its text as text (no markup, no raw control
characters); a note list of the wrong type is an error naming the field (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
from cli_fake_api import TOKEN, invoke, jobs_app, no_raw_control
from rich.console import Console

from danlu.cli import jobs as jobs_cli
from danlu.client import Client

SWEEP_ID = "5a7e0c9d1b2f"
NOTE = "gpu_memory: auto not possible ([red]no trace[/red]\x1b[2J): whole GPUs used"
FAMILY = "model family gpt inferred from its layers"


def _sweep(notes: Any) -> dict[str, Any]:
    return {
        "id": SWEEP_ID,
        "name": "lr",
        "user": "admin",
        "array": False,
        "state": "RUNNING",
        "reason": None,
        "metric": "loss",
        "goal": "minimize",
        "total": 2,
        "submitted": 1,
        "created_at": 1000.0,
        "finished_at": None,
        "spec": {"parallel": 1},
        "notes": notes,
        "trials": [],
        "best": None,
    }


def _serve(monkeypatch: pytest.MonkeyPatch, sweep: dict[str, Any]) -> list[httpx.Request]:
    """Every command's client talks to a stub answering ``GET /sweeps/{id}`` and
    ``POST /sweeps`` with ``sweep``; the requests it was sent."""
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(201 if request.method == "POST" else 200, json=sweep)

    def factory(home: Path | None, url: str | None, token: str | None) -> Client:
        return Client("http://fake", TOKEN, transport=httpx.MockTransport(handler))

    monkeypatch.setattr(jobs_cli, "client_factory", factory)
    monkeypatch.setattr(jobs_cli, "console", Console(width=300))
    return sent


def _app() -> typer.Typer:
    from danlu.cli import sweep as sweep_cli

    app = jobs_app()
    sweep_cli.register(app)
    return app


def _notes(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("note:")]


def test_sweep_show_prints_each_note(monkeypatch: pytest.MonkeyPatch) -> None:
    _serve(monkeypatch, _sweep([NOTE, FAMILY]))
    code, out, err = invoke(_app(), "sweep", "show", SWEEP_ID)
    assert code == 0, out + err
    assert _notes(out) == [
        "note: gpu_memory: auto not possible ([red]no trace[/red]\\x1b[2J): whole GPUs used",
        f"note: {FAMILY}",
    ]
    no_raw_control(out)
    assert "TRIAL" in out  # the table still comes


def test_sweep_show_without_notes_prints_none(monkeypatch: pytest.MonkeyPatch) -> None:
    _serve(monkeypatch, _sweep([]))
    code, out, err = invoke(_app(), "sweep", "show", SWEEP_ID)
    assert code == 0, out + err
    assert _notes(out) == [] and "note" not in out


def test_sweep_show_json_passes_the_notes_through(monkeypatch: pytest.MonkeyPatch) -> None:
    _serve(monkeypatch, _sweep([FAMILY]))
    code, out, err = invoke(_app(), "sweep", "show", SWEEP_ID, "--json")
    assert code == 0, out + err
    assert json.loads(out)["notes"] == [FAMILY]


def test_notes_that_are_no_list_of_text_are_an_error_naming_the_field(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _serve(monkeypatch, _sweep("not a list"))
    code, out, err = invoke(_app(), "sweep", "show", SWEEP_ID)
    assert code == 2
    assert "notes" in err and _notes(out) == []


def test_sweep_submit_prints_each_note(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    sent = _serve(monkeypatch, _sweep([FAMILY]))
    spec = tmp_path / "sweep.yaml"
    spec.write_text(
        "name: lr\ntrial: {command: [echo], resources: {gpus: 1}}\n"
        "parameters: {lr: {values: [0.1, 0.2]}}\nmetric: {name: loss, goal: minimize}\ntrials: 2\n"
    )
    code, out, err = invoke(_app(), "sweep", "submit", str(spec))
    assert code == 0, out + err
    assert [r.method for r in sent] == ["POST"]
    assert out.startswith(f"sweep {SWEEP_ID} (lr): RUNNING")
    assert _notes(out) == [f"note: {FAMILY}"]


def test_an_array_submitted_prints_each_note(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _serve(monkeypatch, _sweep([FAMILY]) | {"array": True, "metric": None, "goal": None})
    spec = tmp_path / "job.yaml"
    spec.write_text("name: lr\ncommand: [echo]\n")
    code, out, err = invoke(_app(), "submit", str(spec), "--array", "0-1")
    assert code == 0, out + err
    assert out.startswith(f"submitted array {SWEEP_ID} (lr)")
    assert _notes(out) == [f"note: {FAMILY}"]


def test_sweep_submit_shows_counts_of_another_type_as_text(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``sweep submit``'s line (its reply unchecked) took ``submitted`` and ``total`` as
    markup: ``[/x]`` there was a MarkupError traceback."""
    _serve(monkeypatch, _sweep([]) | {"submitted": "[/x]", "total": "[bold]2"})
    spec = tmp_path / "sweep.yaml"
    spec.write_text(
        "name: lr\ntrial: {command: [echo], resources: {gpus: 1}}\n"
        "parameters: {lr: {values: [0.1, 0.2]}}\nmetric: {name: loss, goal: minimize}\n"
        "trials: 2\n"
    )
    code, out, err = invoke(_app(), "sweep", "submit", str(spec))
    assert code == 0, out + err
    assert "RUNNING; [/x] of [bold]2 trials submitted" in out
