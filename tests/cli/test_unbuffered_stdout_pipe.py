"""With ``PYTHONUNBUFFERED`` set (as many container images set it) stdout has no buffer, and
a write that its pipe's reader left part-done (``danlu ls --json | head -1`` on a long list:
the reader gone while the write waited for room) returned how much went; the rest was
dropped without an error, and the command exited 0 having lost its output, where the README
promises 141 once the reader has gone. The ``danlu`` group gives stdout a buffer back, which
writes on until all is written or the pipe is found closed."""

from __future__ import annotations

import os
import subprocess
import sys

BIG = 300_000
"""Lines of ``x``: 600 kB, far more than a pipe holds, so the one write waits for room."""

COMMAND = f"""
import typer
from danlu.cli.jobs import print_json, print_plain
from danlu.cli.main import app

@app.command(name="big-output")
def big_output(json: bool = False) -> None:
    '''A command whose output is longer than a pipe holds.'''
    if json:
        print_json(["x"] * {BIG // 4})
    else:
        print_plain("x\\n" * {BIG})

app(prog_name="danlu")
"""


def _read_a_little_then_leave(*args: str) -> tuple[int, bytes, bytes]:
    """Run the danlu app with ``args`` and ``PYTHONUNBUFFERED=1``, read the first bytes of
    its output (so its write has begun), close the pipe, and give its exit code, those bytes
    and its stderr."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")  # PYTHONPATH as the tests run with
    proc = subprocess.Popen(
        [sys.executable, "-c", COMMAND, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.read(10)
    proc.stdout.close()
    code = proc.wait(timeout=120)
    return code, first, proc.stderr.read()


def test_plain_output_to_a_reader_gone_midway_exits_141() -> None:
    code, first, err = _read_a_little_then_leave("big-output")
    assert first == b"x\nx\nx\nx\nx\n"
    assert code == 141, err
    assert b"Traceback" not in err


def test_json_output_to_a_reader_gone_midway_exits_141() -> None:
    code, first, err = _read_a_little_then_leave("big-output", "--json")
    assert first.startswith(b"[")
    assert code == 141, err
    assert b"Traceback" not in err


def test_all_of_a_long_output_reaches_a_reader_that_stays() -> None:
    env = dict(os.environ, PYTHONUNBUFFERED="1")  # PYTHONPATH as the tests run with
    done = subprocess.run(
        [sys.executable, "-c", COMMAND, "big-output"], capture_output=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"x\n" * BIG + b"\n"  # and print_plain's line break
