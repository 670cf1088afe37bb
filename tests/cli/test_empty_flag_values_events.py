"""``danlu events`` refuses an empty ``--project``/``--user`` and a ``--state`` that is no job
state (an unset shell variable matched no job: "no events", exit 0; a state was sent on for
the server to refuse by its query field), and ``danlu submit ""`` names SPEC (it tried to read
the current directory as the spec: "Is a directory"). Nothing is sent. Against the in-memory
API of ``cli_fake_api``."""

from __future__ import annotations

import pytest
import typer
from cli_fake_api import FakeApi, serve_commands
from typer.testing import CliRunner

from danlu.cli import events as events_cli
from danlu.cli import jobs as jobs_cli

APP = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
for module in (jobs_cli, events_cli):
    module.register(APP)


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    return serve_commands(monkeypatch)


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(APP, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, " ".join(result.stderr.split())


@pytest.mark.parametrize("flag", ["--project", "--user"])
@pytest.mark.parametrize("value", ["", "  "])
def test_events_refuses_an_empty_project_or_user(api: FakeApi, flag: str, value: str) -> None:
    code, out, err = run("events", flag, value)
    assert (code, out) == (2, "")
    assert err == f"error: {flag}: empty; give a {flag[2:]}, or leave {flag} out for every one"
    assert api.requests == []


@pytest.mark.parametrize("state", ["", "FAILED,", "done"])
def test_events_refuses_a_state_that_is_no_job_state(api: FakeApi, state: str) -> None:
    code, out, err = run("events", "--state", state)
    assert (code, out) == (2, "")
    assert err.startswith("error: --state: "), err
    assert "is not a job state; use one of PENDING" in err
    assert api.requests == []


def test_events_sends_the_states_given_in_capitals(api: FakeApi) -> None:
    run("events", "--state", "failed, cancelled", "--state", "SUCCEEDED")  # no /events here
    assert [request.url.path for request in api.requests] == ["/api/v1/events"]
    sent = api.requests[0].url.params.get_list("state")
    assert sent == ["FAILED", "CANCELLED", "SUCCEEDED"]


def test_submit_refuses_an_empty_spec_path(api: FakeApi) -> None:
    code, _, err = run("submit", "")
    assert code == 2
    assert err == "error: SPEC: empty; give the job spec file (YAML or JSON)"
    assert api.requests == []
