"""A dependency that ``danlu submit --after`` added and that the spec's validation refuses
(a job id that is no id, a condition that is none) is named by ``--after`` and the value
given there, as the other flags' values are: it was named ``job.yaml:
depends_on.0.condition: ...``, a field and an index of a list the file may not even hold.
A dependency the file lists is still named by the file."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from danlu.cli.main import app

HELLO = """\
name: hello
command: [python, -c, "print('hello')"]
resources: {gpus: 1, gpu_memory: 20GiB}
"""
CONDITIONS = "Input should be 'succeeded', 'failed', 'finished' or 'started'"


@pytest.fixture
def spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DANLU_URL", "http://127.0.0.1:9")  # never reached: refused first
    monkeypatch.setenv("DANLU_TOKEN", "t")
    path = tmp_path / "job.yaml"
    path.write_text(HELLO)
    return path


def _stderr(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 2, result.output
    return result.stderr


def test_a_bad_condition_is_named_by_after(spec: Path) -> None:
    err = _stderr("submit", str(spec), "--after", "3f2a9c01d2e4:fail")
    assert err == f"error: --after '3f2a9c01d2e4:fail': {CONDITIONS}\n"


def test_a_bad_job_id_is_named_by_after(spec: Path) -> None:
    err = _stderr("submit", str(spec), "--after", "nosuch")
    assert err.startswith("error: --after 'nosuch': 'nosuch' is not a job id"), err
    assert str(spec) not in err and "depends_on" not in err


def test_the_after_that_was_wrong_is_named_past_the_files_own(spec: Path) -> None:
    spec.write_text(HELLO + "depends_on: [3f2a9c01d2e4]\n")
    err = _stderr("submit", str(spec), "--after", "5b2a9c01d2e4", "--after", "5b2a9c01d2e4:later")
    assert err == f"error: --after '5b2a9c01d2e4:later': {CONDITIONS}\n"


def test_the_files_own_dependency_is_named_by_the_file(spec: Path) -> None:
    spec.write_text(HELLO + "depends_on: [{job: 3f2a9c01d2e4, condition: later}]\n")
    err = _stderr("submit", str(spec), "--after", "5b2a9c01d2e4")
    assert err == f"error: {spec}: depends_on.0.condition: {CONDITIONS}\n"


def _refusing_server(monkeypatch: pytest.MonkeyPatch, field: str) -> None:
    """The job commands talk to a server that refuses every submission, a job's or an
    array's, with a 422 on ``field``, as danlu's does for a dependency on no job."""
    import httpx

    from danlu.cli import jobs as jobs_cli
    from danlu.client import Client

    def handler(request: httpx.Request) -> httpx.Response:
        body = {"error": {"type": "SpecError", "field": field, "message": "no job 'ffff'"}}
        return httpx.Response(422, json=body)

    def factory(home: Path | None, url: str | None, token: str | None) -> Client:
        return Client("http://fake", "t", transport=httpx.MockTransport(handler))

    monkeypatch.setattr(jobs_cli, "client_factory", factory)


@pytest.mark.parametrize(
    ("field", "array"), [("depends_on.1.job", ()), ("trial.depends_on.1.job", ("--array", "0-1"))]
)
def test_the_servers_refusal_of_an_after_is_named_by_it(
    spec: Path, monkeypatch: pytest.MonkeyPatch, field: str, array: tuple[str, ...]
) -> None:
    _refusing_server(monkeypatch, field)
    spec.write_text(HELLO + "depends_on: [3f2a9c01d2e4]\n")
    err = _stderr("submit", str(spec), "--after", "ffff", *array)
    assert err == "error: --after 'ffff': no job 'ffff'\n"


def test_the_servers_refusal_of_the_files_own_dependency_keeps_its_field(
    spec: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _refusing_server(monkeypatch, "depends_on.0.job")
    spec.write_text(HELLO + "depends_on: [3f2a9c01d2e4]\n")
    err = _stderr("submit", str(spec), "--after", "ffff")
    assert err == "error: depends_on.0.job: no job 'ffff'\n"
