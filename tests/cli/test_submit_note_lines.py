"""``danlu submit`` prints the ``notes`` of ``POST /jobs``'s reply, each on a ``note:`` line
of its own. It took them back out of the job's ``pending_reason`` by splitting it at each
``"; "`` outside parentheses, so a note with a parenthesis it does not close (a traced
model's error message) ran on into the next one, both on one line. A reply without
``notes`` (a server older than the field) still has them taken from ``pending_reason``.
Against the real API app in this process, on a SQLite store."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_fake_api import invoke, jobs_app
from cli_real_api import real_api

from danlu.server.routes import jobs as job_routes
from danlu.server.routes.estimation import Estimate

UNCLOSED = "memory estimate failed (ValueError: expected ( or [ here): using whole GPUs"
"""A note whose traced model's message opens a parenthesis it never closes."""
NOT_INFERRED = (
    "model family not inferred (no layer it knows, or the trace failed): the interference "
    "model uses its median pair"
)


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The API app on a fresh home whose memory estimate fails with :data:`UNCLOSED`."""

    def failed(*_args: object, **_kwargs: object) -> tuple[Estimate, None]:
        return Estimate(None, UNCLOSED), None

    monkeypatch.setattr(job_routes, "resolve_memory", failed)
    with real_api(tmp_path, monkeypatch, width=300):
        yield


def _spec(tmp_path: Path, name: str) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        f"name: {name}\n"
        "command: [python, train.py]\n"
        "resources: {gpus: 1, gpu_memory: auto}\n"
        "training: {model: 'elsewhere.models:build', family: auto}\n"
    )
    return str(path)


def test_a_note_with_an_unclosed_parenthesis_has_a_line_of_its_own(
    server: None, tmp_path: Path
) -> None:
    code, out, err = invoke(jobs_app(), "submit", _spec(tmp_path, "unclosed"))
    assert code == 0, out + err
    first, *notes = out.splitlines()
    assert first.startswith("submitted job ") and first.endswith("(unclosed): PENDING"), out
    assert notes == [f"note: {UNCLOSED}", f"note: {NOT_INFERRED}"], out


def test_a_job_waiting_on_another_prints_what_it_waits_for_then_each_note(
    server: None, tmp_path: Path
) -> None:
    code, out, err = invoke(jobs_app(), "submit", _spec(tmp_path, "first"))
    assert code == 0, out + err
    first_id = out.split()[2]
    code, out, err = invoke(jobs_app(), "submit", _spec(tmp_path, "second"), "--after", first_id)
    assert code == 0, out + err
    line, *notes = out.splitlines()
    assert line.endswith(f"(second): PENDING, waiting for job {first_id} (first) to succeed"), out
    assert notes == [f"note: {UNCLOSED}", f"note: {NOT_INFERRED}"], out


def test_submit_json_keeps_the_jobs_fields_and_adds_the_notes(server: None, tmp_path: Path) -> None:
    code, out, err = invoke(jobs_app(), "submit", _spec(tmp_path, "json"), "--json")
    assert code == 0, out + err
    job = json.loads(out)
    assert job["notes"] == [UNCLOSED, NOT_INFERRED]
    assert job["pending_reason"] == (
        f"waiting for the next scheduling round ({UNCLOSED}; {NOT_INFERRED})"
    )
    for field in ("id", "name", "state", "waiting_on", "gpu_memory", "spec", "end_reason"):
        assert field in job, field


def test_the_replys_notes_are_taken_over_the_pending_reason() -> None:
    from danlu.cli.markup import submitted_notes

    reply = {
        "pending_reason": f"waiting for job ab12 (a) to succeed; {UNCLOSED}; {NOT_INFERRED}",
        "waiting_on": "ab12",
        "notes": [UNCLOSED, NOT_INFERRED],
    }
    assert submitted_notes(reply) == ("waiting for job ab12 (a) to succeed", reply["notes"])
    alone = {"pending_reason": f"waiting for the next scheduling round ({UNCLOSED})"}
    assert submitted_notes({**alone, "waiting_on": None, "notes": [UNCLOSED]}) == ("", [UNCLOSED])
    assert submitted_notes({**alone, "notes": []}) == ("", [])  # nothing told: none shown


def test_a_reply_without_notes_has_them_from_the_pending_reason() -> None:
    """A server older than the reply's ``notes``: the notes its pending reason holds."""
    from danlu.cli.markup import submitted_notes

    reason = "waiting for the next scheduling round (memory estimate failed (a; b): whole)"
    reply = {"pending_reason": reason, "waiting_on": None}
    assert submitted_notes(reply) == ("", ["memory estimate failed (a; b): whole"])
    assert submitted_notes({**reply, "notes": "not a list"})[1] == [
        "memory estimate failed (a; b): whole"
    ]
