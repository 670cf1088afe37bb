"""A ``--set`` item whose key names no field one can set is named by that ``--set``, not by
the spec file: ``danlu submit job.yaml --set resources.gpus`` (no ``=``) said ``error:
job.yaml: resources.gpus: --set 'resources.gpus': write key=value ...``, ``--set =1`` and
``--set command.x=1`` (inside a list) said ``error: job.yaml: ...`` without the flag, sending
the user to a file with nothing wrong in it; ``danlu rerun JOB --set =1`` named nothing at
all. Each is now ``error: --set 'ITEM': ...``, exit 2, before anything is sent."""

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

CASES = [
    ("resources.gpus", "write key=value, e.g. --set resources.gpus=2"),
    ("=1", "an override key must be a dotted field name, e.g. resources.gpus"),
    ("a..b=1", "an override key must be a dotted field name, e.g. resources.gpus"),
]


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
    assert result.stdout == ""
    return result.stderr


@pytest.mark.parametrize(("item", "says"), CASES)
def test_submit_names_the_set_item(spec: Path, item: str, says: str) -> None:
    err = _stderr("submit", str(spec), "--set", item)
    assert err == f"error: --set '{item}': {says}\n"


def test_submit_names_a_set_inside_a_list(spec: Path) -> None:
    err = _stderr("submit", str(spec), "--set", "command.x=1")
    assert err == (
        "error: --set 'command.x=1': 'command' is not a mapping, cannot set a field inside it\n"
    )


@pytest.mark.parametrize(("item", "says"), CASES)
def test_rerun_names_the_set_item(spec: Path, item: str, says: str) -> None:
    err = _stderr("rerun", "0123456789ab", "--set", item)
    assert err == f"error: --set '{item}': {says}\n"


def test_a_good_set_after_a_bad_one_does_not_hide_it(spec: Path) -> None:
    err = _stderr("submit", str(spec), "--set", "priority=2", "--set", "=1")
    assert err.startswith("error: --set '=1': ")
