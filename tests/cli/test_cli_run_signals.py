"""``danlu run`` told to stop (SIGTERM), its terminal closed (SIGHUP) or its output's reader
gone (``danlu run ... | head``): the job is cancelled, as after Ctrl-C, and the command exits
with 128 + the signal. A process of its own (``run_attached.py``) against the fake API."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"


def start(tmp_path: Path) -> tuple[subprocess.Popen[bytes], Path]:
    """``danlu run`` attached to a RUNNING job, once it has said the job is submitted."""
    state = tmp_path / "state"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), str(HERE)]))
    child = subprocess.Popen(
        [sys.executable, str(HERE / "run_attached.py"), str(state)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert child.stderr is not None
    first = child.stderr.readline().decode()
    assert "submitted" in first, first
    return child, state


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_cancels_the_job(tmp_path: Path, sig: signal.Signals) -> None:
    child, state = start(tmp_path)
    assert child.stdout is not None
    child.stdout.readline()  # attached: the output streams
    child.send_signal(sig)
    _, err = child.communicate(timeout=60)
    assert child.returncode == 128 + sig, err
    assert "cancelled" in err.decode(), err
    assert state.read_text() == "CANCELLED"


def test_a_closed_pipe_cancels_the_job(tmp_path: Path) -> None:
    child, state = start(tmp_path)
    assert child.stdout is not None and child.stderr is not None
    child.stdout.readline()
    child.stdout.close()  # `danlu run ... | head -1`: the reader has gone
    assert child.wait(timeout=60) == 128 + signal.SIGPIPE
    err = child.stderr.read().decode()
    assert "cancelled" in err, err
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert state.read_text() == "CANCELLED"
