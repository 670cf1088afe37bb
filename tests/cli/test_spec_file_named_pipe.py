"""``danlu submit`` and ``danlu sweep submit`` given a named pipe (``mkfifo``) as the spec
file waited for a writer for ever (the file was opened with no check); now it is an error
line naming SPEC, exit 2, nothing sent. A pipe handed over open (``/dev/stdin``, a shell's
``<(...)``, ``/dev/fd/N``) is still read. Against the in-memory API of ``cli_fake_api``."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from cli_fake_api import FakeApi, invoke, serve_commands

from danlu.cli.main import app


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    return serve_commands(monkeypatch)


@pytest.fixture
def no_hang() -> Iterator[None]:
    """A read that would wait for ever is cut off (an exception, failing the test) instead
    of hanging the suite."""

    def stop(signum: int, frame: FrameType | None) -> None:
        raise RuntimeError("the spec file's reading blocked")  # no OSError: none is caught

    before = signal.signal(signal.SIGALRM, stop)
    signal.alarm(10)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)


@pytest.mark.parametrize(("command", "kind"), [(["submit"], "job"), (["sweep", "submit"], "sweep")])
def test_a_named_pipe_is_refused_naming_the_argument(
    api: FakeApi, no_hang: None, tmp_path: Path, command: list[str], kind: str
) -> None:
    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)
    code, out, err = invoke(app, *command, str(fifo))
    assert code == 2, out + err
    assert " ".join(err.split()) == (
        f"error: SPEC: {str(fifo)!r} is a named pipe, not a file: reading it waits for a "
        f"writer, maybe for ever; give the {kind} spec file (YAML or JSON), or pipe the text "
        "in and give /dev/stdin"
    )
    assert api.requests == []


def test_a_pipe_handed_over_open_is_still_read(api: FakeApi, no_hang: None) -> None:
    """``danlu submit <(envsubst < job.yaml)``: the shell hands the pipe over as /dev/fd/N."""
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, b"name: piped\ncommand: [echo, hi]\n")
        os.close(write_end)
        code, out, err = invoke(app, "submit", f"/dev/fd/{read_end}")
    finally:
        os.close(read_end)
    assert code == 0, out + err
    assert [job["name"] for job in api.jobs.values()] == ["piped"]


@pytest.mark.parametrize("command", [["submit"], ["sweep", "submit"]])
def test_the_spec_file_is_looked_at_once(
    api: FakeApi, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, command: list[str]
) -> None:
    """The argument's parser and the spec loader both looked whether SPEC was a named pipe
    (two ``lstat`` calls); the loader's check is the one every caller gets, and is kept."""
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: once\ncommand: [echo, hi]\n")
    looked: list[str] = []
    lstat = os.lstat

    def counted(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        looked.append(os.fspath(path))
        return lstat(path, *args, **kwargs)

    monkeypatch.setattr(os, "lstat", counted)
    invoke(app, *command, str(spec))
    assert looked.count(str(spec)) == 1


def test_a_key_path_written_twice_is_no_named_pipe(api: FakeApi, tmp_path: Path) -> None:
    """The loader names ``path`` for a named pipe and for a key ``path`` the file holds
    twice: the latter is said as the loader says it, of the file."""
    spec = tmp_path / "spec.yaml"
    spec.write_text("path: a\npath: b\nname: twice\ncommand: [echo]\n")
    code, out, err = invoke(app, "submit", str(spec))
    assert code == 2, out + err
    assert " ".join(err.split()).startswith(f"error: {spec}: path: written twice")
    assert api.requests == []
