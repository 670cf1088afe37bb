"""A spec field's value that a flag of ``danlu submit`` (or ``danlu run``) gave and that the
validation refuses is named by that flag: ``danlu submit job.yaml --name "my job"`` said
``job.yaml: name: use 1-63 letters ...``, sending the user to a file that holds a valid
name. A value the file gave is still named by the file."""

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
SET_KEY_CASES = [
    ("resources.gpus", "write key=value, e.g. --set resources.gpus=2"),
    ("=1", "an override key must be a dotted field name, e.g. resources.gpus"),
    ("a..b=1", "an override key must be a dotted field name, e.g. resources.gpus"),
]
"""A ``--set`` item whose key names no field one can set, and what it is told: named by
that ``--set``, not by the spec file (``error: job.yaml: ...`` sent the user to a file with
nothing wrong in it; ``danlu rerun JOB --set =1`` named nothing)."""
NAME_RULE = "use 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit"


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
    assert result.stdout == ""  # refused before anything is sent or printed
    return result.stderr


@pytest.mark.parametrize(
    ("flag", "value", "says"),
    [
        ("--name", "my job", NAME_RULE),
        ("--gpus", "abc", "'abc' is not a GPU count"),
        ("--gpu-memory", "2XB", "'2XB' is not a byte size"),
        ("--time-limit", "soon", "'soon' is not a duration"),
        ("--priority", "99999999", "must lie within -1,000,000..1,000,000"),
    ],
)
def test_a_flags_bad_value_is_named_by_the_flag(
    spec: Path, flag: str, value: str, says: str
) -> None:
    err = _stderr("submit", str(spec), flag, value)
    assert err.startswith(f"error: {flag}: {says}"), err
    assert str(spec) not in err


def test_the_last_set_of_a_field_is_named(spec: Path) -> None:
    err = _stderr("submit", str(spec), "--name", "ok", "--set", "name=a/b")
    assert err == f"error: --set 'name=a/b': name: {NAME_RULE}\n"


def test_a_files_bad_value_is_named_by_the_file(spec: Path) -> None:
    spec.write_text(HELLO.replace("name: hello", "name: my job"))
    err = _stderr("submit", str(spec), "--gpus", "2")
    assert err == f"error: {spec}: name: {NAME_RULE}\n"
    spec.write_text(HELLO + "name: again\n")  # the file's own error, whatever the flags
    err = _stderr("submit", str(spec), "--name", "ok")
    assert err.startswith(f"error: {spec}: name: written twice"), err


def test_run_names_its_flag() -> None:
    err = _stderr("run", "--name", "my job", "--", "echo")
    assert err == f"error: --name: {NAME_RULE}\n"


def test_the_error_keeps_the_spec_field(tmp_path: Path) -> None:
    from danlu.cli.run import run_body
    from danlu.cli.spec_flags import FlagValueError

    with pytest.raises(FlagValueError) as raised:
        run_body(["true"], name=None, workdir=tmp_path, env={}, options={"resources.gpus": "x"})
    assert raised.value.field == "resources.gpus" and raised.value.flag == "--gpus"
    assert str(raised.value).startswith("--gpus: 'x' is not a GPU count")


# A dependency that ``--after`` added and that the validation (or the server) refuses is
# named by ``--after`` and its value, not ``job.yaml: depends_on.0.condition``, a field and an
# index of a list the file may not even hold. One the file lists is still named by the file.
CONDITIONS = "is not one of succeeded, failed, finished or started"


def test_a_bad_condition_is_named_by_after(spec: Path) -> None:
    err = _stderr("submit", str(spec), "--after", "3f2a9c01d2e4:fail")
    assert (
        err == f"error: --after '3f2a9c01d2e4:fail': 'fail' {CONDITIONS} (did you mean failed?)\n"
    )


def test_a_bad_job_id_is_named_by_after(spec: Path) -> None:
    err = _stderr("submit", str(spec), "--after", "nosuch")
    assert err.startswith("error: --after 'nosuch': 'nosuch' is not a job id"), err
    assert str(spec) not in err and "depends_on" not in err


def test_the_after_that_was_wrong_is_named_past_the_files_own(spec: Path) -> None:
    spec.write_text(HELLO + "depends_on: [3f2a9c01d2e4]\n")
    err = _stderr("submit", str(spec), "--after", "5b2a9c01d2e4", "--after", "5b2a9c01d2e4:later")
    assert err == f"error: --after '5b2a9c01d2e4:later': 'later' {CONDITIONS}\n"


def test_the_files_own_dependency_is_named_by_the_file(spec: Path) -> None:
    spec.write_text(HELLO + "depends_on: [{job: 3f2a9c01d2e4, condition: later}]\n")
    err = _stderr("submit", str(spec), "--after", "5b2a9c01d2e4")
    assert err == f"error: {spec}: depends_on.0.condition: 'later' {CONDITIONS}\n"


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


def test_a_spec_file_that_is_no_mapping_is_said_in_yamls_words(spec: Path) -> None:
    """A spec file holding a list said ``got list``, Python's name for it."""
    spec.write_text("- hello\n- world\n")
    err = _stderr("submit", str(spec))
    assert err == (
        f"error: {spec}: a job spec must be a mapping of fields, got a list (['hello', 'world'])\n"
    )


@pytest.mark.parametrize(("item", "says"), SET_KEY_CASES)
def test_submit_names_the_set_item(spec: Path, item: str, says: str) -> None:
    err = _stderr("submit", str(spec), "--set", item)
    assert err == f"error: --set '{item}': {says}\n"


def test_submit_names_a_set_inside_a_list(spec: Path) -> None:
    err = _stderr("submit", str(spec), "--set", "command.x=1")
    assert err == (
        "error: --set 'command.x=1': 'command' is not a mapping, cannot set a field inside it\n"
    )


@pytest.mark.parametrize(("item", "says"), SET_KEY_CASES)
def test_rerun_names_the_set_item(spec: Path, item: str, says: str) -> None:
    err = _stderr("rerun", "0123456789ab", "--set", item)
    assert err == f"error: --set '{item}': {says}\n"


def test_a_good_set_after_a_bad_one_does_not_hide_it(spec: Path) -> None:
    err = _stderr("submit", str(spec), "--set", "priority=2", "--set", "=1")
    assert err.startswith("error: --set '=1': ")
