"""A ``danlu`` command whose stderr cannot be written (``2>/dev/full``) still ends with its
error's exit code, 2: the error line it could not write was a traceback (itself unwritable)
and exit 1, whether the error was the command's own (``error: ...``, ``danlu ls`` with no
server) or typer's usage error (``danlu ls --limit 0``, ``danlu nosuch``). Run as a real
process, its stderr the full device."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import danlu

FULL = Path("/dev/full")
SOURCE = str(Path(danlu.__file__).resolve().parents[1])
"""The danlu the tests import, for the process run (not an installed copy)."""


def _run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[bytes]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([SOURCE, os.environ.get("PYTHONPATH", "")]),
        "DANLU_URL": "http://127.0.0.1:9",  # nothing listens: the connection is refused
        "DANLU_TOKEN": "t",
        "DANLU_HOME": str(tmp_path),
    }
    with FULL.open("wb") as full:
        return subprocess.run(
            [sys.executable, "-c", "from danlu.cli.main import app; app()", *args],
            stdout=subprocess.PIPE,
            stderr=full,
            env=env,
            cwd=tmp_path,
            timeout=120,
            check=False,
        )


@pytest.mark.skipif(not FULL.exists(), reason="needs the full device /dev/full")
@pytest.mark.parametrize(
    "args",
    [
        ["ls"],  # no server: error line, exit 2
        ["ls", "--limit", "1_0"],  # the number parser's error line
        ["ls", "--limit", "0"],  # typer's usage error
        ["nosuch"],  # typer's usage error: no such command
    ],
    ids=["no-server", "number-flag", "usage-bound", "usage-command"],
)
def test_an_error_with_stderr_full_still_exits_2(args: list[str], tmp_path: Path) -> None:
    done = _run(args, tmp_path)
    assert done.returncode == 2, done.stdout
    assert done.stdout == b""


@pytest.mark.skipif(not FULL.exists(), reason="needs the full device /dev/full")
def test_a_simulation_with_stderr_full_still_exits_0(tmp_path: Path) -> None:
    """Its progress bar is drawn at a terminal only: elsewhere it wrote a line break, whose
    failure made a simulation that ran end without its results, an error."""
    done = _run(["sim", "run", "--jobs", "2", "--nodes", "1"], tmp_path)
    assert done.returncode == 0
    assert b"jobs" in done.stdout.lower()
