"""A PREEMPTING job whose run never launched (the API's ``launched`` false: preempted before
the executor launched it) reads ``PREEMPTING (not launched)`` in ``danlu ls`` and ``danlu
show``, as the API says: it read ``PREEMPTING`` as if a run checkpointed. A launched one
reads ``PREEMPTING`` as before. Against the in-memory API of ``cli_fake_api``."""

from __future__ import annotations

import pytest
from cli_fake_api import FakeApi, invoke, jobs_app, serve_jobs_commands

APP = jobs_app()
SHARE = {"node": "node-0", "gpu": 0, "milli": 1000, "memory": 80 * 1024**3}


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    return serve_jobs_commands(monkeypatch)


def _row(out: str, job_id: str) -> str:
    (line,) = [line for line in out.splitlines() if job_id in line]
    return line


def test_ls_and_show_say_a_job_preempted_before_its_launch_is_not_launched(
    fake: FakeApi,
) -> None:
    stopped = fake.add_job("stopped", "PREEMPTING", launched=False, allocation=[SHARE])["id"]
    ran = fake.add_job("ran", "PREEMPTING", launched=True, allocation=[SHARE | {"gpu": 1}])["id"]
    code, out, err = invoke(APP, "ls")
    assert code == 0, err
    assert "PREEMPTING (not launched)" in _row(out, stopped)
    assert "PREEMPTING" in _row(out, ran) and "not launched" not in _row(out, ran)
    code, out, err = invoke(APP, "show", stopped)
    assert code == 0, err
    lines = out.splitlines()
    assert any(line.split() == ["state", "PREEMPTING", "(not", "launched)"] for line in lines)
