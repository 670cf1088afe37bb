"""``danlu logs -f JOB`` exits as ``danlu wait`` does once the job has ended: 0 when it
SUCCEEDED, 1 when it FAILED or was CANCELLED (said on stderr), after writing its output.
Against the in-memory API of ``cli_fake_api``."""

from __future__ import annotations

import pytest
from cli_fake_api import FakeApi, invoke, jobs_app, serve_jobs_commands

from danlu.cli import waiting


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    return serve_jobs_commands(monkeypatch)


@pytest.mark.parametrize(
    ("state", "exit_code", "said"),
    [("FAILED", 3, "ended FAILED (exit 3)"), ("CANCELLED", None, "ended CANCELLED")],
)
def test_follow_of_a_job_that_did_not_succeed_exits_1(
    fake: FakeApi, state: str, exit_code: int | None, said: str
) -> None:
    job = fake.add_job("train", "RUNNING", exit_code=exit_code)
    fake.logs[job["id"]] = b"step 1\nTraceback ...\n"
    fake.progress[job["id"]] = ["RUNNING", state]  # ends while followed
    code, out, err = invoke(jobs_app(), "logs", "-f", job["id"])
    assert code == waiting.NOT_SUCCEEDED == 1
    assert out == "step 1\nTraceback ...\n"
    assert f"job {job['id']} {said}" in err


def test_follow_of_a_job_that_succeeded_exits_0(fake: FakeApi) -> None:
    job = fake.add_job("train", "RUNNING", exit_code=0)
    fake.logs[job["id"]] = b"done\n"
    fake.progress[job["id"]] = ["SUCCEEDED"]
    code, out, err = invoke(jobs_app(), "logs", "-f", job["id"])
    assert (code, out, err) == (0, "done\n", "")


def test_plain_logs_of_a_failed_job_still_exits_0(fake: FakeApi) -> None:
    job = fake.add_job("train", "FAILED", exit_code=3)
    fake.logs[job["id"]] = b"boom\n"
    assert invoke(jobs_app(), "logs", job["id"])[:2] == (0, "boom\n")
