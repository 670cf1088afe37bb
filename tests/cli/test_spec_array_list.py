"""A job spec's ``array:`` written as a YAML list (``array: [1, 3, 8]``) is refused by
``danlu submit`` with an error that says what to write (the range as text, ``'1,3,8'``),
not one quoting the Python list the value became (``'[1, 3, 8]' is not an index range``).
A range written as text or as one whole number is submitted as before. Against the
in-memory API of ``cli_fake_api``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_fake_api import FakeApi, invoke, jobs_app, serve_jobs_commands

from danlu.cli.spec_build import build_spec
from danlu.core.job_array import parse_array

HELLO = "name: hello\ncommand: [python, x.py]\n"
APP = jobs_app()


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    return serve_jobs_commands(monkeypatch)


def _posted(api: FakeApi) -> list[dict[str, Any]]:
    return [json.loads(q.content) for q in api.requests if q.method == "POST" and q.content]


def _spec(tmp_path: Path, array: str) -> str:
    path = tmp_path / "job.yaml"
    path.write_text(f"{HELLO}array: {array}\n")
    return str(path)


@pytest.mark.parametrize(
    ("array", "got"), [("[1, 3, 8]", "a list"), ("true", "a boolean"), ("{a: 1}", "a mapping")]
)
def test_a_spec_array_not_text_says_to_write_it_as_text(
    api: FakeApi, tmp_path: Path, array: str, got: str
) -> None:
    code, _, err = invoke(APP, "submit", _spec(tmp_path, array))
    assert code == 2, err
    flat = " ".join(err.split())
    assert f"array: expected an index range as text, got {got}" in flat, err
    assert "'1,3,8'" in flat and "[1, 3, 8]" not in flat
    assert _posted(api) == []


@pytest.mark.parametrize(("array", "indices"), [("'1,3,8'", (1, 3, 8)), ("7", (7,))])
def test_a_spec_array_as_text_or_a_number_is_read_as_before(
    tmp_path: Path, array: str, indices: tuple[int, ...]
) -> None:
    body = build_spec(Path(_spec(tmp_path, array)), {}, [])
    assert parse_array(body["array"]).indices == indices
