"""A size flag that is no whole number of bytes, or is less than one byte, is refused before
anything is sent, naming the flag: ``--gpu-memory 0.5B`` was read as 0 bytes, which for a
job is whole GPUs (and for ``danlu estimate`` a limit of nothing), ``--quota-memory 0.5B`` a
quota of 0 bytes."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from danlu.cli.main import app

HELLO = """\
name: hello
command: [python, -c, "print('hello')"]
resources: {gpus: 1}
"""


@pytest.fixture(autouse=True)
def _nowhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DANLU_URL", "http://127.0.0.1:9")  # never reached: refused first
    monkeypatch.setenv("DANLU_TOKEN", "t")


def _stderr(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 2, result.output
    return " ".join(result.stderr.split())


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("0.5B", "'0.5B' is a fraction of a byte"),
        ("0.0000001KB", "'0.0000001KB' is less than one byte"),
    ],
)
def test_submit_and_run_refuse_less_than_whole_bytes_naming_the_flag(
    tmp_path: Path, value: str, says: str
) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(HELLO)
    err = _stderr("submit", str(spec), "--gpu-memory", value)
    assert err.startswith(f"error: --gpu-memory: {says}"), err
    err = _stderr("run", "--gpu-memory", value, "--", "true")
    assert err.startswith(f"error: --gpu-memory: {says}"), err


def test_a_spec_file_s_half_a_byte_is_named_by_the_file(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(HELLO.replace("{gpus: 1}", "{gpus: 1, gpu_memory: 0.5B}"))
    err = _stderr("submit", str(spec))
    assert err.startswith(f"error: {spec}: resources.gpu_memory: '0.5B' is a fraction"), err


@pytest.mark.parametrize("command", [["project", "add", "x"], ["project", "set", "x"]])
def test_a_memory_quota_of_half_a_byte_is_refused(command: list[str]) -> None:
    err = _stderr(*command, "--quota-memory", "0.5B")
    assert err.startswith("error: --quota-memory: '0.5B' is a fraction of a byte"), err


@pytest.mark.parametrize("flag", ["--gpu-memory", "--margin"])
def test_estimate_refuses_half_a_byte(flag: str) -> None:
    args = ["estimate", "no_such_module_here:factory", "--max-batch", "--gpu", "h100"]
    err = _stderr(*args, flag, "0.5B")
    assert err.startswith(f"error: {flag}: '0.5B' is a fraction of a byte"), err
