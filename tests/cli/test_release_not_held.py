"""``danlu release`` of a job that was never held said ``released job X``: the API answers
200 for it and changes nothing (docs/api.md), and the reply alone cannot tell. The command
reads the job's ``held_at`` first and says the job was not held (exit 0); a held job is
still said to be released. Against the in-memory API of ``cli_fake_api``."""

from __future__ import annotations

import json

import pytest
from cli_fake_api import FakeApi, invoke, jobs_app, serve_jobs_commands

APP = jobs_app()


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    return serve_jobs_commands(monkeypatch)


def test_release_of_a_job_not_held_says_so(fake: FakeApi) -> None:
    job = fake.add_job("train", "RUNNING")
    code, out, err = invoke(APP, "release", job["id"])
    assert code == 0, err
    assert out.strip() == f"job {job['id']} (RUNNING) was not held; nothing to release"
    assert "released" not in out


def test_release_of_a_held_job_says_released(fake: FakeApi) -> None:
    job = fake.add_job("train", "PENDING")
    assert invoke(APP, "hold", job["id"])[0] == 0
    assert fake.jobs[job["id"]]["held_at"] is not None
    code, out, _ = invoke(APP, "release", job["id"])
    assert code == 0
    assert out.strip() == f"released job {job['id']}: PENDING"
    assert fake.jobs[job["id"]]["held_at"] is None


def test_release_by_prefix_releases_the_job(fake: FakeApi) -> None:
    """The job found by a prefix is the one released."""
    job = fake.add_job("train", "PENDING", held_at=1500.0)
    code, out, _ = invoke(APP, "release", job["id"][:8])
    assert code == 0 and out.strip() == f"released job {job['id']}: PENDING"
    assert fake.jobs[job["id"]]["held_at"] is None


def test_release_json_is_the_reply_either_way(fake: FakeApi) -> None:
    job = fake.add_job("train", "RUNNING")
    code, out, _ = invoke(APP, "release", job["id"], "--json")
    assert code == 0 and json.loads(out)["id"] == job["id"]


def test_release_of_an_unknown_job_is_an_error(fake: FakeApi) -> None:
    code, _, err = invoke(APP, "release", "nosuchjob")
    assert code == 2 and "not found" in err
