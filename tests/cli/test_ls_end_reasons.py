"""``danlu ls``'s "where / why" of a job that ended with no GPUs held and no exit code
(cancelled, or failed at launch or by a dependency, before it ever ran): the job's
``end_reason`` (the reason of the event that ended it, as the server gives it); it was
blank, then read from the events feed."""

from __future__ import annotations

import pytest
from cli_fake_api import FakeApi, invoke, jobs_app, serve_jobs_commands

APP = jobs_app()


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    return serve_jobs_commands(monkeypatch)


def _row(out: str, job_id: str) -> str:
    (line,) = [line for line in out.splitlines() if job_id in line]
    return line


def test_ls_says_why_a_job_ended_before_it_ran(fake: FakeApi) -> None:
    cancelled = fake.add_job("queued")
    fake.end_job(cancelled["id"], "CANCELLED", "cancelled by alice")
    orphan = fake.add_job("after-x")
    fake.end_job(orphan["id"], "CANCELLED", "dependency job 0000000000aa FAILED")
    unlaunched = fake.add_job("bad-dir")
    fake.end_job(unlaunched["id"], "FAILED", "cannot be launched: no such directory")
    stopped = fake.add_job("ran", started_at=1500.0)
    fake.end_job(stopped["id"], "CANCELLED", "cancelled by bob")
    done = fake.add_job(
        "done", "SUCCEEDED", exit_code=0, started_at=1500.0, end_reason="exited with code 0"
    )
    code, out, err = invoke(APP, "ls")
    assert code == 0, err
    assert "cancelled by alice (before it ran)" in _row(out, cancelled["id"])
    assert "dependency job 0000000000aa FAILED (before it ran)" in _row(out, orphan["id"])
    assert "cannot be launched: no such directory (before it ran)" in _row(out, unlaunched["id"])
    stopped_row = _row(out, stopped["id"])
    assert "cancelled by bob" in stopped_row and "before it ran" not in stopped_row
    done_row = _row(out, done["id"])
    assert "exit 0" in done_row and "exited" not in done_row  # its own exit code shown


def test_ls_reads_no_feed(fake: FakeApi) -> None:
    job = fake.add_job("mine", user="alice", project="nlp")
    fake.end_job(job["id"], "CANCELLED", "cancelled by alice")
    code, out, err = invoke(APP, "ls", "--user", "alice")
    assert code == 0, err
    assert "cancelled by alice (before it ran)" in _row(out, job["id"])
    assert [r.url.path for r in fake.requests] == ["/api/v1/jobs"]


def test_ls_shows_nothing_where_an_older_server_sends_no_end_reason(fake: FakeApi) -> None:
    job = fake.add_job("queued")
    fake.end_job(job["id"], "CANCELLED", "cancelled by alice")
    del fake.jobs[job["id"]]["end_reason"]
    code, out, err = invoke(APP, "ls")
    assert code == 0, err
    row = _row(out, job["id"])
    assert "CANCELLED" in row and "cancelled by" not in row and "before it ran" not in row
    assert [r.url.path for r in fake.requests] == ["/api/v1/jobs"]


def test_ls_shows_an_ending_reason_as_text(fake: FakeApi) -> None:
    job = fake.add_job("queued")
    fake.end_job(job["id"], "CANCELLED", "[bold]x[/bold] \x1b[31m")
    code, out, err = invoke(APP, "ls")
    assert code == 0, err
    assert "[bold]x[/bold] \\x1b[31m" in _row(out, job["id"])
