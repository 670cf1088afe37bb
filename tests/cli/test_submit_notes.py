"""``danlu submit`` of a job whose ``gpu_memory: auto`` the server could not estimate: the
server tells it in the job's ``pending_reason`` (``waiting for the next scheduling round
(memory estimate skipped (...): using whole GPUs)``), but the CLI printed the pending
reason only for a job waiting on another, so the user never learnt that the job got whole
GPUs. It now prints each of the submission's notes on a ``note:`` line, as ``danlu sweep
submit`` and ``danlu submit --array`` print a sweep's. Against the real API app in this
process, on a SQLite store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_fake_api import invoke, jobs_app
from cli_real_api import real_api

from danlu.cli.markup import submission_notes

SKIPPED = (
    "note: memory estimate skipped (training.model 'elsewhere.models:build' is not in a "
    "package this server traces"
)
WHOLE = "): using whole GPUs"


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The API app on a fresh home, which the commands reach as its admin."""
    with real_api(tmp_path, monkeypatch, width=300):
        yield


def _spec(tmp_path: Path, name: str) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        f"name: {name}\n"
        "command: [python, train.py]\n"
        "resources: {gpus: 1, gpu_memory: auto}\n"
        "training: {model: 'elsewhere.models:build'}\n"
    )
    return str(path)


def test_submit_says_the_memory_was_not_estimated(server: None, tmp_path: Path) -> None:
    code, out, err = invoke(jobs_app(), "submit", _spec(tmp_path, "whole"))
    assert code == 0, out + err
    first, *notes = out.splitlines()
    assert first.startswith("submitted job ") and first.endswith("(whole): PENDING"), out
    assert len(notes) == 1 and notes[0].startswith(SKIPPED) and notes[0].endswith(WHOLE), out


def test_a_job_waiting_on_another_prints_what_it_waits_for_then_the_notes(
    server: None, tmp_path: Path
) -> None:
    code, out, err = invoke(jobs_app(), "submit", _spec(tmp_path, "first"))
    assert code == 0, out + err
    first_id = out.split()[2]
    code, out, err = invoke(jobs_app(), "submit", _spec(tmp_path, "second"), "--after", first_id)
    assert code == 0, out + err
    line, *notes = out.splitlines()
    assert line.endswith(f"(second): PENDING, waiting for job {first_id} (first) to succeed"), out
    assert len(notes) == 1 and notes[0].startswith(SKIPPED) and notes[0].endswith(WHOLE), out


def test_a_semicolon_within_a_notes_parentheses_does_not_part_it() -> None:
    reason = (
        "waiting for the next scheduling round (memory estimate failed (ValueError: a; b): "
        "using whole GPUs; model family gpt inferred from its layers)"
    )
    waits, notes = submission_notes({"pending_reason": reason, "waiting_on": None})
    assert waits == ""
    assert notes == [
        "memory estimate failed (ValueError: a; b): using whole GPUs",
        "model family gpt inferred from its layers",
    ]


def test_a_reason_of_another_form_gives_no_notes() -> None:
    assert submission_notes({"pending_reason": "waiting for 1 GPU(s)"}) == ("", [])
    assert submission_notes({"pending_reason": None, "waiting_on": "ab"}) == ("", [])
