"""``danlu wait`` and ``danlu webhook ls / deliveries`` printed server text (a job's name, a
sweep's reason, a webhook's URL, an endpoint's error quoted in its last error) with Rich
markup escaped but control characters raw: an ESC sequence stored in a job's name, or sent
back by a webhook's endpoint, recoloured or cleared the terminal, and a line break split a
table row, spoofing rows. They are written as escapes (``\\x1b``, ``\\n``) now, as
:func:`danlu.core.values.visible` does for the other commands: shown, never acted on."""

from __future__ import annotations

import io

import pytest
import typer
from cli_fake_api import TOKEN, FakeApi, invoke, jobs_app, no_raw_control, serve_jobs_commands
from rich.console import Console

from danlu.cli import admin as admin_cli
from danlu.cli import jobs as jobs_cli
from danlu.cli import run as run_cli
from danlu.cli import top as top_view
from danlu.cli import webhook as webhook_cli
from danlu.client import Client

EVIL = "tr\x1b[2Jain\nFAKE ROW\r\u202eok\x9b31m"
"""A clear-screen, a line break, a carriage return, a bidi override and a C1 CSI."""
SHOWN = "tr\\x1b[2Jain\\nFAKE ROW\\r\\u202eok\\x9b31m"
"""``EVIL`` as the terminal must show it."""
T0 = 1_796_131_413.0


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    return serve_jobs_commands(monkeypatch)


def _app() -> typer.Typer:
    app = jobs_app()
    webhook_cli.register(app)
    return app


def test_wait_shows_a_stored_control_name_escaped(fake: FakeApi) -> None:
    job = fake.add_job(EVIL, state="FAILED", exit_code=3)["id"]
    code, out, _ = invoke(jobs_app(), "wait", job)
    assert code == 1, out  # a failed job: the exit status says so
    no_raw_control(out)
    assert f"({SHOWN}): FAILED (exit 3)" in out
    assert len(out.splitlines()) == 1, out  # no line of its own for the name's line break


def test_wait_shows_a_failed_sweeps_reason_escaped(fake: FakeApi) -> None:
    trial = fake.add_job("t", state="SUCCEEDED")
    sweep = "5eeb0c9d8a11"
    fake.sweeps[sweep] = {
        "id": sweep,
        "name": "s",
        "state": "FAILED",
        "reason": EVIL,
        "array": False,
        "submitted": 1,
        "total": 1,
        "trials": [{"job_id": trial["id"], "stopped_early": False}],
    }
    code, out, err = invoke(jobs_app(), "wait", sweep)
    assert code == 1, (out, err)
    no_raw_control(err)
    assert SHOWN in err, err


def test_run_says_why_its_job_failed_escaped(
    fake: FakeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``danlu run``'s last line, the job's state and the server's reason for it."""
    job = fake.add_job("t", state="FAILED", exit_code=3, pending_reason=EVIL)["id"]
    said = io.StringIO()
    monkeypatch.setattr(run_cli, "err", Console(file=said, width=400))
    with Client("http://fake", TOKEN, transport=fake.transport()) as client:
        assert run_cli.attach(client, job) == 3  # the job's own exit code
    no_raw_control(said.getvalue())
    assert said.getvalue() == f"danlu: job {job} FAILED: {SHOWN}\n"


@pytest.fixture
def hooks(fake: FakeApi, monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    monkeypatch.setattr(jobs_cli, "console", Console(width=400))
    monkeypatch.setattr(admin_cli.common, "console", Console(width=400))
    fake.webhooks["whk1"] = {
        "id": "whk1",
        "url": "https://hooks.example.com/" + EVIL,
        "states": ["FAILED"],
        "project": None,
        "user": None,
        "pending": 0,
        "delivered": 0,
        "failed": 1,
        "last_error": "HTTP 500: " + EVIL,
    }
    fake.deliveries["whk1"] = [
        {
            "id": 7,
            "created_at": T0,
            "kind": "job.state",
            "event": {"job_id": "abc", "new": "FAILED"},
            "last_error": "HTTP 500: " + EVIL,
            "delivered": False,
            "status_code": 500,
            "done_at": T0 + 60,
            "attempts": 5,
            "next_attempt_at": T0 + 60,
        }
    ]
    return fake


def _rows(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("│")]


def test_webhook_ls_shows_an_endpoints_error_escaped(hooks: FakeApi) -> None:
    code, out, err = invoke(_app(), "webhook", "ls")
    assert code == 0, (out, err)
    no_raw_control(out)
    assert SHOWN in out and len(_rows(out)) == 1, out


def test_webhook_deliveries_show_an_endpoints_error_escaped(hooks: FakeApi) -> None:
    code, out, err = invoke(_app(), "webhook", "deliveries", "whk1")
    assert code == 0, (out, err)
    no_raw_control(out)
    assert f"given up: HTTP 500: {SHOWN}" in out and len(_rows(out)) == 1, out


def test_show_and_ls_show_a_control_state_escaped(fake: FakeApi) -> None:
    """A job's state is server text too: one another version (or a bad reply) sends with an
    escape sequence is shown escaped in ``show`` and ``ls`` (and ``top``'s jobs table:
    :func:`danlu.cli.top.state_text`), not acted on by the terminal."""
    job = fake.add_job("odd", state="X\x1b[2J\x9b1m")["id"]
    for args in (("show", job), ("ls", "--all")):
        code, out, _ = invoke(jobs_app(), *args)
        assert code == 0, out
        no_raw_control(out)
        assert "X\\x1b[2J\\x9b1m" in out, (args, out)
    assert top_view.state_text("RUN\x1b[0m\n").plain == "RUN\\x1b[0m\\n"
    assert top_view.state_text("RUNNING").style == top_view.STATE_STYLE["RUNNING"]
