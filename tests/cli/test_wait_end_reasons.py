"""``danlu wait`` and ``danlu logs -f`` say why a job ended where its ``end_reason`` says
more than its exit code, by ``danlu ls``'s rule (:func:`danlu.cli.top.told_end_reason`): a
run out of GPU memory showed ``FAILED (exit 1)`` alone. A run that merely exited still shows
the code alone. Against the in-memory API of ``cli_fake_api``."""

from __future__ import annotations

import pytest
from cli_fake_api import FakeApi, invoke, jobs_app, serve_jobs_commands

from danlu.cli import waiting

APP = jobs_app()

OOM = "out of memory (exit code 1); out of restarts (0 of 0)"
"""The server's ``end_reason`` of a run out of GPU memory with no restarts left."""


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    return serve_jobs_commands(monkeypatch)


def _ended(fake: FakeApi, name: str, state: str, code: int | None, reason: str) -> str:
    job = fake.add_job(name, started_at=1500.0)
    fake.end_job(job["id"], state, reason)
    fake.jobs[job["id"]]["exit_code"] = code
    return str(job["id"])


@pytest.mark.parametrize(
    ("state", "code", "reason", "said"),
    [
        ("FAILED", 1, OOM, f"FAILED (exit 1): {OOM}"),
        ("FAILED", 3, "failed (exit code 3); out of restarts (0 of 0)", "FAILED (exit 3)"),
        ("SUCCEEDED", 0, "exited 0", "SUCCEEDED"),
        ("CANCELLED", None, "cancelled by alice", "CANCELLED by alice"),
    ],
)
def test_wait_says_the_reason_where_it_says_more_than_the_code(
    fake: FakeApi, state: str, code: int | None, reason: str, said: str
) -> None:
    job_id = _ended(fake, "train", state, code, reason)
    status, out, _ = invoke(APP, "wait", job_id, "--poll", "0.1")
    assert status == (0 if state == "SUCCEEDED" else waiting.NOT_SUCCEEDED)
    assert out.splitlines() == [f"job {job_id} (train): {said}"]


def test_wait_shows_a_reason_as_text(fake: FakeApi) -> None:
    """The reason is server text: Rich markup in it is shown, control characters escaped."""
    job_id = _ended(fake, "train", "FAILED", 1, "out of [bold]memory[/] \x1b[2J")
    _, out, _ = invoke(APP, "wait", job_id)
    assert out.splitlines() == [
        f"job {job_id} (train): FAILED (exit 1): out of [bold]memory[/] \\x1b[2J"
    ]


def test_logs_follow_says_why_the_job_failed(fake: FakeApi) -> None:
    job = fake.add_job("train", "RUNNING", started_at=1500.0)
    fake.logs[job["id"]] = b"step 1\n"
    fake.end_job(job["id"], "FAILED", OOM)
    fake.jobs[job["id"]]["exit_code"] = 1
    code, out, err = invoke(APP, "logs", "-f", job["id"])
    assert (code, out) == (waiting.NOT_SUCCEEDED, "step 1\n")
    assert f"job {job['id']} ended FAILED (exit 1): {OOM}" in err
