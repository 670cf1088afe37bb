"""``danlu submit SPEC`` takes ``--env NAME=VALUE`` (``NAME`` alone: its value here) and
``--max-restarts N``, as ``danlu run`` and ``danlu rerun`` do: they override or add to the
spec file's ``env`` and ``max_restarts`` (a ``--set`` of the same field still wins), and a
bad one is an error line naming the flag, exit 2, nothing sent. Against the in-memory API of
``cli_fake_api``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_fake_api import FakeApi, invoke, jobs_app, serve_jobs_commands

SPEC = 'name: train\ncommand: [python, train.py]\nmax_restarts: 5\nenv: {SEED: "1", MODE: fast}\n'

APP = jobs_app()


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    return serve_jobs_commands(monkeypatch)


@pytest.fixture
def spec(tmp_path: Path) -> str:
    path = tmp_path / "job.yaml"
    path.write_text(SPEC)
    return str(path)


def _posted(api: FakeApi) -> list[dict[str, Any]]:
    return [json.loads(q.content) for q in api.requests if q.method == "POST" and q.content]


def test_env_and_max_restarts_override_and_add_to_the_files(
    api: FakeApi, spec: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HOME", "/data/hf")
    flags = ["--env", "SEED=2", "--env", "HF_HOME", "--env", "A.B=1", "--max-restarts", "0"]
    code, out, err = invoke(APP, "submit", spec, *flags)
    assert code == 0, out + err
    (body,) = _posted(api)
    assert body["env"] == {"SEED": "2", "MODE": "fast", "HF_HOME": "/data/hf", "A.B": "1"}
    assert body["max_restarts"] == 0
    # --set is applied after them, as after the other overrides: it wins
    code, out, err = invoke(APP, "submit", spec, "--env", "SEED=2", "--set", "env.SEED=3")
    assert code == 0, out + err
    assert _posted(api)[-1]["env"] == {"SEED": "3", "MODE": "fast"}


def test_a_bad_env_names_the_flag_and_the_fix(
    api: FakeApi, spec: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DANLU_NOT_SET_HERE", raising=False)
    cases = [
        (["--env", "=x"], "error: --env '=x': write NAME=VALUE or NAME\n"),
        (
            ["--env", "DANLU_NOT_SET_HERE"],
            "error: --env 'DANLU_NOT_SET_HERE': not set here; write --env "
            "DANLU_NOT_SET_HERE=VALUE\n",
        ),
        (  # refused by the validation: named by the --env that gave it, not by the file
            ["--env", "DANLU_ARRAY_INDEX=3", "--array", "0-1"],
            "error: --env DANLU_ARRAY_INDEX: is set by the job array for each of its tasks: "
            "leave it out\n",
        ),
    ]
    for flags, said in cases:
        code, out, err = invoke(APP, "submit", spec, *flags)
        assert (code, err) == (2, said), out + err
    assert api.requests == []  # nothing sent


def test_a_bad_max_restarts_names_the_flag(api: FakeApi, spec: str) -> None:
    code, out, err = invoke(APP, "submit", spec, "--max-restarts", "-1")
    assert code == 2 and err.startswith("error: --max-restarts: -1 is out of range"), out + err
    code, out, err = invoke(APP, "submit", spec, "--max-restarts", "2000000")
    assert code == 2 and err.startswith("error: --max-restarts: "), out + err
    assert spec not in err
    assert api.requests == []
