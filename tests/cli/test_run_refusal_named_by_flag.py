"""``danlu run``'s refusal of a field its flags gave names the flag, as ``danlu submit``'s
does (one shared mapping), local or the server's: ``--env X=<too large>`` said ``env.X:
...`` and ``--gpus 2`` on a one-GPU cluster ``resources.gpus: ...``, paths of a spec the
user never wrote. A variable name holding a control character said ``env: ...`` (``danlu
submit``: its spec file's ``env``, which does not hold it): now its ``--env``."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_fake_api import invoke
from cli_real_api import real_api

from danlu.cli.main import app
from danlu.core.spec_limits import MAX_EXEC_STRING

TOO_LARGE = "X=" + "a" * MAX_EXEC_STRING
"""An ``--env`` whose ``X=value`` no process can take (the spec's ``env.X`` refused)."""


@pytest.fixture
def no_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DANLU_URL", "http://127.0.0.1:9")  # never reached: refused first
    monkeypatch.setenv("DANLU_TOKEN", "t")


@pytest.mark.usefixtures("no_server")
def test_a_variable_the_spec_refuses_is_named_by_its_env_flag() -> None:
    code, out, err = invoke(app, "run", "--env", TOO_LARGE, "--", "true")
    assert code == 2, out + err
    assert err.startswith("error: --env X: is 131,074 bytes; a process takes at most"), err


@pytest.mark.usefixtures("no_server")
def test_a_variable_name_with_a_control_character_is_named_by_its_env_flag(
    tmp_path: Path,
) -> None:
    said = (
        "error: --env 'A\\tB=1': a variable name must not contain control characters "
        "(line breaks, tabs, ESC sequences, bidirectional overrides), got '\\t': write it "
        "without them\n"
    )
    assert invoke(app, "run", "--env", "A\tB=1", "--", "true")[2] == said
    spec = tmp_path / "job.yaml"
    spec.write_text("name: train\ncommand: [python, train.py]\n")
    assert invoke(app, "submit", str(spec), "--env", "A\tB=1")[2] == said  # not the file's


def test_the_servers_refusal_is_named_by_the_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with real_api(tmp_path, monkeypatch):  # one GPU
        code, out, err = invoke(app, "run", "--gpus", "2", "--", "true")
    assert code == 2, out + err
    assert err.startswith("error: --gpus: asks for 2 GPUs; the cluster has 1"), err
