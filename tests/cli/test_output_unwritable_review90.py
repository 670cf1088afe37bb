"""Any ``danlu`` command whose output cannot be written ends as ``danlu logs`` and
``danlu sim`` do: a table into a full disk (``danlu ls > /dev/full``) was a traceback (an
OSError out of Rich), now ``error: cannot write the output: ...`` and exit 2; a reader gone
(``danlu wait A B | head -1``) exited 1, which ``danlu wait`` documents as a job that did
not succeed, now 141 as a shell gives a command killed by SIGPIPE."""

from __future__ import annotations

import errno
import io

import pytest
from cli_fake_api import FakeApi, serve_commands
from typer.testing import CliRunner

from danlu.cli import jobs as jobs_cli
from danlu.cli.main import app
from danlu.cli.markup import CliConsole


class Unwritable(io.StringIO):
    """A stdout whose writes fail with ``code`` (ENOSPC: a full disk; EPIPE: no reader)."""

    def __init__(self, code: int) -> None:
        super().__init__()
        self.code = code

    def write(self, text: str) -> int:
        if self.code == errno.EPIPE:
            raise BrokenPipeError(self.code, "Broken pipe")
        raise OSError(self.code, "No space left on device")


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    return serve_commands(monkeypatch)


def _output_fails(monkeypatch: pytest.MonkeyPatch, code: int) -> None:
    monkeypatch.setattr(jobs_cli, "console", CliConsole(file=Unwritable(code), width=200))


@pytest.mark.parametrize("args", [["ls"], ["whoami"], ["show", "JOB"]], ids=str)
def test_a_table_into_a_full_disk_is_an_error_line(
    fake: FakeApi, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    job = fake.add_job("one", "RUNNING")
    _output_fails(monkeypatch, errno.ENOSPC)
    result = CliRunner().invoke(app, [job["id"] if a == "JOB" else a for a in args])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.stderr == "error: cannot write the output: No space left on device\n"


def test_wait_to_a_gone_reader_exits_141_not_1(
    fake: FakeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job succeeded: 1 would say it did not."""
    job = fake.add_job("good", "SUCCEEDED")
    _output_fails(monkeypatch, errno.EPIPE)
    result = CliRunner().invoke(app, ["wait", job["id"], "--poll", "0.1"])
    assert result.exit_code == 141, result.output
    assert result.stderr == ""


def test_ls_to_a_gone_reader_exits_141(fake: FakeApi, monkeypatch: pytest.MonkeyPatch) -> None:
    fake.add_job("one", "RUNNING")
    _output_fails(monkeypatch, errno.EPIPE)
    result = CliRunner().invoke(app, ["ls"])
    assert result.exit_code == 141, result.output


def test_written_output_is_unchanged(fake: FakeApi, monkeypatch: pytest.MonkeyPatch) -> None:
    job = fake.add_job("good", "SUCCEEDED")
    monkeypatch.setattr(jobs_cli, "console", CliConsole(width=200))
    result = CliRunner().invoke(app, ["wait", job["id"]])
    assert result.exit_code == 0, result.output
    assert result.stdout == f"job {job['id']} (good): SUCCEEDED\n"
