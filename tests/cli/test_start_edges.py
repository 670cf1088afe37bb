"""What ``danlu`` does before any command runs: a help that cannot be written (``danlu --help
> /dev/full``) is one error line and exit 2, as a command's output is, not a traceback from
rich's help printer; Ctrl-C while the command line is imported (about a second) or built
ends it quietly with exit 130, as the commands do once running, through either way in (the
``danlu`` console script, ``python -m danlu``). Run as real processes: the output is the
process's own, and the interrupt a real SIGINT."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import IO

import pytest

import danlu

SRC = Path(danlu.__file__).resolve().parents[1]  # the danlu this test runs against
ENV = dict(os.environ, PYTHONPATH=str(SRC), COLUMNS="100")

CONSOLE_SCRIPT = (
    "import re\n"
    "import sys\n"
    "from danlu.cli.main import app\n"
    "sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n"
    "sys.exit(app())\n"
)
"""What pip writes as the ``danlu`` console script (``danlu = "danlu.cli.main:app"``)."""

RUN_MODULE = "import runpy\nrunpy.run_module('danlu', run_name='__main__', alter_sys=True)\n"
"""``python -m danlu``."""

TERMINAL = "import signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
"""Ctrl-C as a terminal's foreground process takes it: a process started in the background
(``cmd &`` in a script, as a CI runner may start the tests) inherits SIGINT ignored, and
Python then leaves it so."""

INTERRUPT_WHILE_IMPORTING = TERMINAL + (
    "import importlib.abc, os, signal, sys\n"
    "class CtrlC(importlib.abc.MetaPathFinder):\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name == 'danlu.cli.jobs':  # in the middle of the command line's imports\n"
    "            os.kill(os.getpid(), signal.SIGINT)\n"
    "        return None\n"
    "sys.meta_path.insert(0, CtrlC())\n"
)
"""A real Ctrl-C (SIGINT to the process) while ``danlu.cli.main`` is being imported."""

INTERRUPT_WHILE_BUILDING = TERMINAL + (
    "import os, signal, typer.main\n"
    "built = typer.main.get_command\n"
    "def interrupted(app):\n"
    "    os.kill(os.getpid(), signal.SIGINT)\n"
    "    return built(app)\n"
    "typer.main.get_command = interrupted\n"
)
"""A real Ctrl-C while typer builds the command tree from ``app`` (before parsing)."""


def _run(
    code: str, args: list[str], stdout: int | IO[str] = subprocess.PIPE
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize(
    "args",
    [["--help"], [], ["ls", "--help"], ["sim", "run", "--help"], ["user", "add", "--help"]],
    ids=lambda args: " ".join(args) or "no-args",
)
def test_help_to_a_full_disk_is_one_error_line(args: list[str]) -> None:
    with open("/dev/full", "w") as full:
        done = _run(CONSOLE_SCRIPT, args, stdout=full)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr == "error: cannot write the output: No space left on device\n"
    assert done.returncode == 2


def test_help_to_a_reader_is_still_written_whole() -> None:
    done = _run(CONSOLE_SCRIPT, ["--help"])
    assert done.returncode == 0, done.stderr
    assert "submit" in done.stdout and done.stderr == ""


@pytest.mark.parametrize(
    "way_in", [CONSOLE_SCRIPT, RUN_MODULE], ids=["console-script", "python-m-danlu"]
)
@pytest.mark.parametrize(
    "interrupt", [INTERRUPT_WHILE_IMPORTING, INTERRUPT_WHILE_BUILDING], ids=["import", "build"]
)
def test_ctrl_c_before_the_command_runs_exits_130_quietly(way_in: str, interrupt: str) -> None:
    done = _run(interrupt + way_in, ["ls"])
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr, done.stderr
    assert done.returncode == 130, done.stderr
    assert not done.stdout
