"""A refused spec field is named by what gave it its final value, in ``danlu submit`` and
``danlu rerun`` alike, whether the validation here or the server refuses it: the flag
(``--max-restarts: ...``, ``--env SEED: ...``), the last ``--set`` of it (``--set
'env.SEED=3': env.SEED: ...``, written after the flags, it wins), else the spec file (or,
for a rerun, the server's path of a field the finished job's spec gave).

``danlu submit`` printed the server's path of a field a flag gave (``error: env.SEED: ...``
for ``--env SEED=2``; ``trial.resources.gpus`` for ``--gpus 2 --array 0-1``), ``danlu
rerun`` named ``--env SEED`` for a variable a later ``--set env.SEED=...`` gave, and an
array's own refusal of a ``--set env.DANLU_ARRAY_INDEX`` named the spec file."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from cli_real_api import real_api
from typer.testing import CliRunner

from danlu.cli import jobs as jobs_cli
from danlu.cli.main import app
from danlu.client import Client
from danlu.client.errors import InvalidRequestError
from danlu.core.errors import SpecError
from danlu.core.spec_limits import MAX_EXEC_STRING

SPEC = "name: train\ncommand: [python, train.py]\nenv: {SEED: '1', MODE: fast}\n"


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(SPEC)
    return path


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def _refusing_server(monkeypatch: pytest.MonkeyPatch, field: str) -> list[dict[str, object]]:
    """The job commands talk to a server (of a stricter version than this client) that
    refuses every submission, a job's or an array's, with a 422 on ``field``; returns the
    bodies it was sent."""
    sent: list[dict[str, object]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        body = {"error": {"type": "SpecError", "field": field, "message": "not here"}}
        return httpx.Response(422, json=body)

    def factory(home: Path | None, url: str | None, token: str | None) -> Client:
        return Client("http://fake", "t", transport=httpx.MockTransport(handler))

    monkeypatch.setattr(jobs_cli, "client_factory", factory)
    return sent


@pytest.mark.parametrize(
    ("field", "flags", "named"),
    [
        ("max_restarts", ["--max-restarts", "5"], "--max-restarts: "),
        ("env.SEED", ["--env", "SEED=2"], "--env SEED: "),
        ("trial.env.SEED", ["--env", "SEED=2", "--array", "0-1"], "--env SEED: "),
        ("trial.max_restarts", ["--max-restarts", "5", "--array", "0-1"], "--max-restarts: "),
        ("env.SEED", ["--env", "SEED=2", "--set", "env.SEED=3"], "--set 'env.SEED=3': env.SEED: "),
        ("env.MODE", ["--env", "SEED=2", "--max-restarts", "5"], "env.MODE: "),  # the file's
    ],
    ids=["max-restarts", "env", "array-env", "array-max-restarts", "set-over-env", "files-own"],
)
def test_submit_names_the_flag_a_servers_refusal_is_about(
    spec: Path, monkeypatch: pytest.MonkeyPatch, field: str, flags: list[str], named: str
) -> None:
    sent = _refusing_server(monkeypatch, field)
    code, out, err = _run("submit", str(spec), *flags)
    assert (code, err) == (2, f"error: {named}not here\n"), out + err
    assert len(sent) == 1


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (  # the array's own rule, of a value a --set gave
            ["--set", "env.DANLU_ARRAY_INDEX=3", "--array", "0-1"],
            "--set 'env.DANLU_ARRAY_INDEX=3': env.DANLU_ARRAY_INDEX: is set by the job array",
        ),
        (
            ["--env", "DANLU_ARRAY_INDEX=3", "--set", "env.DANLU_ARRAY_INDEX=4", "--array", "0-1"],
            "--set 'env.DANLU_ARRAY_INDEX=4': env.DANLU_ARRAY_INDEX: is set by the job array",
        ),
        (  # the --set, applied last, replaced env and the --env variable with it
            ["--env", "A=2", "--set", "env={A: 1}"],
            "--set 'env={A: 1}': env.A: 1 was read as a number, not text",
        ),
        (["--gpus", "2000000000"], "--gpus: must lie within 1..1,048,576"),  # resources.gpus.min
        (["--array", "x"], "--array: 'x' is not an index range"),
    ],
    ids=["array-index", "array-index-set-over-env", "set-env-over-env", "gpus-min", "array"],
)
def test_submit_names_the_last_flag_of_what_is_refused_here(
    spec: Path, flags: list[str], said: str
) -> None:
    """Refused before anything is sent (the URL reaches nothing)."""
    code, out, err = _run(
        "submit", str(spec), *flags, "--url", "http://127.0.0.1:9", "--token", "t"
    )
    assert code == 2 and err.startswith(f"error: {said}"), out + err
    assert str(spec) not in err


def _named(
    field: str,
    overrides: dict[str, object] | None = None,
    sets: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> str:
    """The refusal ``field: no`` as named by the flags (and an ``--after`` past the file's
    one dependency)."""
    from danlu.cli.spec_flags import after_writes, flag_writes, named_by_flag

    writes = flag_writes(overrides or {}, sets, env) + after_writes(["ab12"], 1)
    return str(named_by_flag(SpecError(field, "no"), writes))


def test_the_writer_of_a_fields_final_value_is_named() -> None:
    replaced = ("resources={cpus: 4}",)  # the --set replaced resources, --gpus's value too
    assert _named("resources.gpus", {"resources.gpus": "2"}, replaced) == "resources.gpus: no"
    assert _named("resources.cpus", {}, replaced) == (
        "--set 'resources={cpus: 4}': resources.cpus: no"
    )
    assert _named("env.A.B", env={"A": "1", "A.B": "2"}) == "--env A.B: no"
    assert _named("env.A.B", env={"A": "1"}) == "env.A.B: no"  # a variable of its own
    assert _named("env.SEED", {}, ("env={A: x}",), {"SEED": "1"}) == "env.SEED: no"
    assert _named("depends_on.1.job") == "--after 'ab12': no"
    assert _named("depends_on.0.job") == "depends_on.0.job: no"  # the file's own
    from danlu.cli.spec_flags import flag_writes, named_by_flag

    refused = InvalidRequestError(422, "SpecError", "trial.max_restarts", "no\nmore")
    named = named_by_flag(refused, flag_writes({"max_restarts": 5}))
    assert str(named) == "--max-restarts: no\\nmore"  # the server's words on one line


def test_real_refusals_of_rerun_and_submit_name_the_last_flag(
    spec: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Against the real API app (one 80 GiB GPU)."""
    with real_api(tmp_path, monkeypatch):
        code, out, err = _run("submit", str(spec), "--json")
        assert code == 0, out + err
        job = json.loads(out)["id"]
        assert _run("cancel", job)[0] == 0
        big = "x" * MAX_EXEC_STRING  # too long for a process's environment
        code, out, err = _run("rerun", job, "--env", "SEED=2", "--set", f"env.SEED={big}")
        assert code == 2 and err.startswith("error: --set 'env.SEED=xxx"), out + err
        assert ": env.SEED: is 131,077 bytes" in err and big not in err
        code, out, err = _run("rerun", job, "--set", "resources={gpus: 2}")
        assert (code, err) == (
            2,
            "error: --set 'resources={gpus: 2}': resources.gpus: asks for 2 GPUs; the cluster "
            "has 1\n",
        )
        for array in ([], ["--array", "0-1"]):  # the server named trial.resources.gpus
            code, out, err = _run("submit", str(spec), "--gpus", "2", *array)
            assert (code, err) == (2, "error: --gpus: asks for 2 GPUs; the cluster has 1\n")
