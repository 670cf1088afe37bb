"""``danlu sim`` and ``danlu estimate`` whose output cannot be written end as the other
commands do: into a full disk (``> /dev/full``) an error line and exit 2, to a reader that
has gone (``| head -1``) exit 141, never a traceback. Run as real processes: the
output is the process's own stdout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
CLI = "from danlu.cli.main import app; app()"
SIM = ["sim", "run", "--jobs", "5", "--quiet"]
ESTIMATE = ["estimate", "danlu.estimate.zoo:mlp_small", "--batch-size", "2"]
full_disk = pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(SRC), COLUMNS="100")


def _into_full_disk(args: list[str]) -> subprocess.CompletedProcess[bytes]:
    with open("/dev/full", "wb") as full:
        return subprocess.run(
            [sys.executable, "-c", CLI, *args],
            stdout=full,
            stderr=subprocess.PIPE,
            env=_env(),
            timeout=300,
        )


@full_disk
@pytest.mark.parametrize(
    "args",
    [
        SIM,
        ["sim", "compare", "--jobs", "5", "--quiet", "--policies", "fifo"],
        ESTIMATE,
        [*ESTIMATE, "--json"],
    ],
    ids=str,
)
def test_output_into_a_full_disk_is_an_error_line(args: list[str]) -> None:
    done = _into_full_disk(args)
    err = done.stderr.decode()
    assert done.returncode == 2, err
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert err.strip().splitlines()[-1] == (
        "error: cannot write the output: No space left on device"
    ), err


PLAN = ["sim", "plan", "--target", "avg_jct<=100d", "--jobs", "5", "--max-nodes", "2"]
"""A plan whose target is met: exit 1 would say that it was missed."""


@pytest.mark.parametrize("args", [SIM, PLAN, ESTIMATE, [*ESTIMATE, "--json"]], ids=str)
def test_output_to_a_gone_reader_exits_141(args: list[str]) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", CLI, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader goes before the first line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 141, err
    assert "Traceback" not in err and "Exception ignored" not in err, err
