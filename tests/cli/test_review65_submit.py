"""``danlu submit`` refuses, locally and naming the file, a spec the control plane
would refuse: ``gpus: 0`` (the server said "ask for 1 GPU or more" without the file), a
``gpu_memory`` without a unit (24 bytes ran), a number in ``command``; and ``--array`` with
an env that sets ``DANLU_ARRAY_INDEX`` names ``env.DANLU_ARRAY_INDEX`` and the job array (it
said ``trial.env...: is set by the sweep``). Against the in-memory API of ``cli_fake_api``."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_fake_api import FakeApi, invoke, jobs_app, serve_jobs_commands

APP = jobs_app()


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    return serve_jobs_commands(monkeypatch)


def _run(*args: str) -> tuple[int, str, str]:
    return invoke(APP, *args)


def _spec(tmp_path: Path, text: str) -> str:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "name: a\ncommand: [echo]\nresources: {gpus: 0}\n",
            "job.yaml: resources.gpus: danlu schedules GPU jobs: ask for 1 GPU or more (got 0)",
        ),
        (
            "name: a\ncommand: [echo]\nresources: {gpus: -1}\n",
            "job.yaml: resources.gpus: danlu schedules GPU jobs: ask for 1 GPU or more (got -1)",
        ),
        (
            "name: a\ncommand: [echo]\nresources: {gpus: 1, gpu_memory: 24}\n",
            "job.yaml: resources.gpu_memory: 24B per GPU is below 1 MiB",
        ),
        (
            "name: a\ncommand: [python, train.py, --lr, 0.1]\n",
            "job.yaml: command.3: 0.1 was read as a number, not text: quote it, '0.1'",
        ),
        (
            "name: a\ncommand: [echo]\nenv: {SEED: 1}\n",
            "job.yaml: env.SEED: 1 was read as a number, not text: quote it, '1'",
        ),
    ],
    ids=["gpus-0", "gpus-negative", "gpu-memory-24", "command-number", "env-number"],
)
def test_submit_refuses_locally_naming_the_file(
    api: FakeApi, tmp_path: Path, text: str, expected: str
) -> None:
    code, _, err = _run("submit", _spec(tmp_path, text))
    assert code == 2
    assert expected in " ".join(err.split())
    assert api.requests == []  # never sent


def test_an_array_setting_its_index_names_the_env_variable_and_the_array(
    api: FakeApi, tmp_path: Path
) -> None:
    path = _spec(tmp_path, 'name: e\ncommand: [echo]\nenv: {DANLU_ARRAY_INDEX: "3"}\n')
    code, _, err = _run("submit", path, "--array", "0-1")
    assert code == 2
    flat = " ".join(err.split())
    assert "job.yaml: env.DANLU_ARRAY_INDEX: is set by the job array" in flat
    assert "trial." not in flat and "sweep" not in flat
    assert api.requests == []  # refused before it is sent
