"""A command's help to a reader that has gone (``danlu sim run --help | head -3``) exits
141 as every other output does, not 1 (rich's answer to the broken pipe, which ``danlu
wait`` documents as a job that did not succeed). Run as real processes: the output is the
process's own stdout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
CLI = "from danlu.cli.main import app; app()"


@pytest.mark.parametrize(
    "args", [["--help"], ["ls", "--help"], ["sim", "run", "--help"]], ids=" ".join
)
def test_help_to_a_gone_reader_exits_141(args: list[str]) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", CLI, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(os.environ, PYTHONPATH=str(SRC), COLUMNS="100"),
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader goes before the first line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 141, err
    assert "Traceback" not in err and "Exception ignored" not in err, err


def test_help_to_a_reader_is_written_whole() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CLI, "ls", "--help"],
        capture_output=True,
        env=dict(os.environ, PYTHONPATH=str(SRC), COLUMNS="100"),
        timeout=300,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert "--state" in done.stdout.decode()
