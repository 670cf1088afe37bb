"""The command line's ways in: the ``danlu`` script and ``python -m danlu``."""

from __future__ import annotations

import subprocess
import sys


def test_python_dash_m_danlu_runs_the_command_line() -> None:
    """``python -m danlu.cli.main`` did nothing and exited 0; ``python -m danlu`` is the
    command line, as the ``danlu`` script is."""
    done = subprocess.run(
        [sys.executable, "-m", "danlu", "estimate", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Usage: danlu estimate" in done.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "danlu", "no-such-command"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert bad.returncode == 2 and "No such command" in bad.stderr
