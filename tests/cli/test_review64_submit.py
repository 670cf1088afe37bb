"""``danlu submit`` refuses a spec file with a key written twice (the later value
replaced the earlier one: ``resources`` given twice lost its GPUs); ``--set env.NAME=~``
(or ``null``) is that string, as every environment value is; ``--set name=2024`` is the
name '2024' (text fields take the text); ``--array`` or a spec's ``array`` with thousands
of digits is a one-line error; ``danlu show`` prints the command as a shell would read it.
Against the in-memory API of ``cli_fake_api``."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from cli_fake_api import FakeApi, invoke, jobs_app, serve_jobs_commands

HELLO = "name: hello\ncommand: [python, x.py]\n"


APP = jobs_app()


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    return serve_jobs_commands(monkeypatch)


def _run(*args: str) -> tuple[int, str, str]:
    return invoke(APP, *args)


def _posted(api: FakeApi) -> list[dict[str, Any]]:
    return [json.loads(q.content) for q in api.requests if q.method == "POST" and q.content]


def _spec(tmp_path: Path, text: str = HELLO, name: str = "job.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# -- a key written twice -----------------------------------------------------------------------


def test_submit_refuses_a_yaml_spec_with_a_key_twice(api: FakeApi, tmp_path: Path) -> None:
    text = (
        "name: big\ncommand: [python, train.py]\nresources: {gpus: 4}\npriority: 5\n"
        "# ... later in the file\nresources: {gpu_memory: 40GiB}\n"
    )
    code, _, err = _run("submit", _spec(tmp_path, text))
    assert code == 2
    assert "resources: written twice" in err and "lines 3 and 6" in err
    assert _posted(api) == []


def test_submit_refuses_a_json_spec_with_a_key_twice(api: FakeApi, tmp_path: Path) -> None:
    text = '{"name": "big", "command": ["a"], "priority": 5, "priority": -5}'
    code, _, err = _run("submit", _spec(tmp_path, text, "job.json"))
    assert code == 2 and "priority: written twice" in err
    assert _posted(api) == []


# -- --set env.NAME=VALUE ----------------------------------------------------------------------


@pytest.mark.parametrize("value", ["~", "null", "Null", "NULL", "007", "yes", "1.0", "[a]", ""])
def test_set_env_takes_the_value_as_it_is_written(api: FakeApi, tmp_path: Path, value: str) -> None:
    code, out, err = _run("submit", _spec(tmp_path), "--set", f"env.MODE={value}")
    assert code == 0, out + err
    assert _posted(api)[-1]["env"] == {"MODE": value}


# -- --set on text fields ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("item", "field", "expected"),
    [
        ("name=2024", "name", "2024"),
        ("name=007", "name", "007"),
        ("name=1.5", "name", "1.5"),
        ("name=2024-01-01", "name", "2024-01-01"),
        ("name=yes", "name", "yes"),
        ("name=null", "name", "null"),
        ("name='quoted'", "name", "quoted"),
        ("project=2024", "project", "2024"),
        ("user=1234", "user", "1234"),
        ("workdir=/data/007", "workdir", "/data/007"),
    ],
)
def test_set_a_text_field_takes_the_text(
    api: FakeApi, tmp_path: Path, item: str, field: str, expected: str
) -> None:
    code, out, err = _run("submit", _spec(tmp_path), "--set", item)
    assert code == 0, out + err
    assert _posted(api)[-1][field] == expected


def test_set_a_nested_text_field_takes_the_text(api: FakeApi, tmp_path: Path) -> None:
    code, out, err = _run("submit", _spec(tmp_path), "--set", "training.application=2024")
    assert code == 0, out + err
    assert _posted(api)[-1]["training"] == {"application": "2024"}


def test_set_null_still_unsets_an_optional_text_field(api: FakeApi, tmp_path: Path) -> None:
    text = HELLO + "workdir: /data/x\ntraining: {family: gan}\n"
    code, out, err = _run(
        "submit", _spec(tmp_path, text), "--set", "workdir=null", "--set", "training.family=~"
    )
    assert code == 0, out + err
    sent = _posted(api)[-1]
    assert "workdir" not in sent and "training" not in sent


def test_set_still_reads_numbers_for_number_fields(api: FakeApi, tmp_path: Path) -> None:
    code, out, err = _run("submit", _spec(tmp_path), "--set", "priority=7")
    assert code == 0, out + err
    assert _posted(api)[-1]["priority"] == 7


def test_set_a_number_of_thousands_of_digits_is_a_one_line_error(
    api: FakeApi, tmp_path: Path
) -> None:
    code, _, err = _run("submit", _spec(tmp_path), "--set", "priority=" + "9" * 5000)
    assert code == 2 and err.startswith("error:") and "priority" in err
    assert _posted(api) == []


# -- arrays of thousands of digits -------------------------------------------------------------


def test_submit_array_of_thousands_of_digits_is_a_one_line_error(
    api: FakeApi, tmp_path: Path
) -> None:
    code, _, err = _run("submit", _spec(tmp_path), "--array", "0-" + "9" * 5000)
    assert code == 2
    assert "--array: an index is at most 10,000,000" in err
    assert _posted(api) == []


@pytest.mark.parametrize("array", ["'0-{big}'", "{big}"], ids=["text", "number"])
def test_a_spec_array_of_thousands_of_digits_is_a_one_line_error(
    api: FakeApi, tmp_path: Path, array: str
) -> None:
    text = HELLO + "array: " + array.format(big="9" * 5000) + "\n"
    code, _, err = _run("submit", _spec(tmp_path, text))
    assert code == 2 and err.startswith("error:")
    assert _posted(api) == []


# -- danlu show: the command -------------------------------------------------------------------


def test_show_prints_the_command_as_a_shell_reads_it(api: FakeApi) -> None:
    command = ["python", "train.py", "--tag", "", "--title", "日本 語", "--note", "it's", "[b]x"]
    job = api.add_job("x", state="SUCCEEDED")
    job["spec"] = {"name": "x", "command": command}
    code, out, err = _run("show", job["id"])
    assert code == 0, out + err
    line = next(line for line in out.splitlines() if line.lstrip().startswith("command"))
    shown = line.strip().removeprefix("command").strip()
    assert shown == shlex.join(command)
    assert shlex.split(shown) == command
