"""``danlu show`` (and the one-line answers of ``submit``, ``cancel``, ``update``,
``hold`` and ``release``) print a job's id, name, project, user, reason, allocation node and
events as text, not as Rich markup: ``[/x]`` is shown as it is instead of crashing, and
``[bold]y`` keeps its brackets. Against the in-memory API of ``cli_fake_api``."""

from __future__ import annotations

from typing import Any

import pytest
import typer
from cli_fake_api import FakeApi, GiB, serve_commands
from rich.console import Console
from typer.testing import CliRunner

from danlu.cli import job_submit
from danlu.cli import jobs as jobs_cli

CLOSE = "[/x]"  # a closing tag with nothing open: Rich raises MarkupError on it
BOLD = "[bold]y"  # a style tag: Rich would eat the brackets


def _app() -> typer.Typer:
    app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
    jobs_cli.register(app)
    return app


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    fake = serve_commands(monkeypatch)
    monkeypatch.setattr(jobs_cli, "console", Console(width=300))
    return fake


def _rekey(api: FakeApi, job: dict[str, Any], new_id: str) -> dict[str, Any]:
    """Give ``job`` the id ``new_id`` (markup-like) in the fake's tables."""
    old = job["id"]
    job["id"] = new_id
    api.jobs[new_id] = api.jobs.pop(old)
    api.events[new_id] = api.events.pop(old)
    api.logs[new_id] = api.logs.pop(old)
    return job


def _invoke(*args: str) -> str:
    result = CliRunner().invoke(_app(), list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert result.exit_code == 0, result.output
    return result.stdout


def test_show_prints_markup_like_fields_as_they_are(api: FakeApi) -> None:
    job = api.add_job(
        f"n{CLOSE}",
        "PENDING",
        project=f"p{BOLD}",
        user=f"u{CLOSE}",
        pending_reason=f"r{CLOSE} {BOLD}",
    )
    job = _rekey(api, job, "j[bold]1")
    api.events[job["id"]].append(
        {
            "id": 2,
            "job_id": job["id"],
            "time": 1001.0,
            "old": f"o{BOLD}",
            "new": f"w{CLOSE}",
            "reason": f"e{CLOSE}",
        }
    )
    out = _invoke("show", job["id"])
    for text in (
        "j[bold]1",
        f"n{CLOSE}",
        f"p{BOLD}",
        f"u{CLOSE}",
        f"r{CLOSE} {BOLD}",
        f"o{BOLD}",
        f"w{CLOSE}",
        f"e{CLOSE}",
    ):
        assert text in out, (text, out)


def test_show_prints_allocation_node_names_as_they_are(api: FakeApi) -> None:
    alloc = [
        {"node": f"node{CLOSE}", "gpu": 0, "milli": 1000, "memory": 20 * GiB},
        {"node": f"node{BOLD}", "gpu": 1, "milli": 500, "memory": GiB},
    ]
    job = api.add_job("placed", "RUNNING", allocation=alloc)
    out = _invoke("show", job["id"])
    assert f"node{CLOSE} gpu 0" in out and f"node{BOLD} gpu 1" in out, out


def test_one_line_answers_print_the_id_and_state_as_they_are(api: FakeApi) -> None:
    job = _rekey(api, api.add_job("line", "PENDING"), f"j{BOLD}")
    assert f"j{BOLD}" in _invoke("update", job["id"], "--priority", "3")
    assert f"j{BOLD}" in _invoke("hold", job["id"])
    assert f"j{BOLD}" in _invoke("release", job["id"])
    assert f"cancelled job j{BOLD}" in _invoke("cancel", job["id"])


def test_the_submitted_line_prints_name_and_reason_as_they_are(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = Console(width=300, record=True)
    monkeypatch.setattr(jobs_cli, "console", out)
    job = {
        "id": f"j{BOLD}",
        "name": f"n{CLOSE}",
        "state": "PENDING",
        "waiting_on": ["a"],
        "pending_reason": f"after{CLOSE}",
    }
    job_submit._submitted(job, json_out=False)
    text = out.export_text()
    assert f"submitted job j{BOLD} (n{CLOSE}): PENDING, after{CLOSE}" in text, text


# -- danlu user add: the reserved names in its help ------------------------------------------


def test_user_add_help_names_the_reserved_names() -> None:
    from danlu.cli import admin as admin_cli
    from danlu.server.services.users import RESERVED_NAMES

    app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
    admin_cli.register(app)
    result = CliRunner().invoke(app, ["user", "add", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.replace("│", " ").split())  # one line, without the boxes
    said = [sentence for sentence in text.split(". ") if "reserved" in sentence]
    assert said, text
    for name in RESERVED_NAMES:  # the names the server refuses (a 422 naming `name`)
        assert name in said[0].replace(",", " ").split(), (name, said)
