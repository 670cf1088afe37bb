"""``danlu ls``'s (and ``danlu top``'s) "where / why" of a job that ended with an exit code:
``exit N``, followed by the job's ``end_reason`` where that says more than the code (a run
out of GPU memory, stopped at its time limit, cancelled, lost with its node): an out-of-memory
failure showed ``exit 1`` alone, its cause only in ``danlu show`` and ``danlu events``. A run
that merely exited (``exited 0``, ``failed (exit code 1)``) still shows ``exit N`` alone. The
dashboard's Jobs table follows the same rule (``jobs.js``)."""

from __future__ import annotations

import pytest
from cli_fake_api import FakeApi, invoke, jobs_app, serve_jobs_commands

from danlu.cli.top import jobs_table

APP = jobs_app()

OOM = "out of memory (exit code 1); out of restarts (0 of 0)"
"""What the server gives as the ``end_reason`` of a run out of GPU memory (torch's
``OutOfMemoryError`` in its log) with no restarts left."""


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    return serve_jobs_commands(monkeypatch)


def _row(out: str, job_id: str) -> str:
    (line,) = [line for line in out.splitlines() if job_id in line]
    return line


def _ended(fake: FakeApi, name: str, state: str, code: int, reason: str) -> str:
    job = fake.add_job(name, started_at=1500.0)
    fake.end_job(job["id"], state, reason)
    fake.jobs[job["id"]]["exit_code"] = code
    return str(job["id"])


def test_ls_says_why_a_run_with_an_exit_code_ended(fake: FakeApi) -> None:
    oom = _ended(fake, "oom", "FAILED", 1, OOM)
    limit = _ended(fake, "long", "CANCELLED", 143, "time limit reached: ran 2h of 2h")
    failed = _ended(fake, "bug", "FAILED", 1, "failed (exit code 1); out of restarts (0 of 0)")
    done = _ended(fake, "done", "SUCCEEDED", 0, "exited 0")
    code, out, err = invoke(APP, "ls")
    assert code == 0, err
    assert f"exit 1: {OOM}" in _row(out, oom)
    assert "exit 143: time limit reached: ran 2h of 2h" in _row(out, limit)
    assert "exit 1 " in _row(out, failed) + " " and "failed (" not in _row(out, failed)
    assert "exit 0 " in _row(out, done) + " " and "exited" not in _row(out, done)


@pytest.mark.parametrize(
    ("job", "shown"),
    [
        ({"state": "FAILED", "exit_code": 1, "end_reason": OOM}, f"exit 1: {OOM}"),
        ({"state": "FAILED", "exit_code": 137, "end_reason": "failed (signal 9)"}, "exit 137"),
        ({"state": "SUCCEEDED", "exit_code": 0, "end_reason": "exited 0"}, "exit 0"),
        ({"state": "FAILED", "exit_code": 1}, "exit 1"),  # a server older than end_reason
        ({"state": "FAILED", "exit_code": 1, "end_reason": ""}, "exit 1"),
        ({"state": "RUNNING", "exit_code": 1, "end_reason": None}, "exit 1"),
    ],
)
def test_where_text_adds_a_reason_that_says_more_than_the_exit(
    job: dict[str, object], shown: str
) -> None:
    from danlu.cli.top import where_text

    assert where_text(job) == shown


def test_top_shows_the_same_reason() -> None:
    job = {"id": "0000000000aa", "name": "oom", "state": "FAILED", "exit_code": 1}
    table = jobs_table([job | {"end_reason": OOM}], now=2000.0, width=300)
    assert table.rows[0]["where"].plain == f"exit 1: {OOM}"
