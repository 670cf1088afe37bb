"""A supervisor whose stderr (the job's log) cannot be written: a log on a full filesystem
(the launch's own ``log_dir``) while the run directory has room."""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path

import pytest

from danlu.executors import supervise


class _FullLog:
    """A stderr whose file has no room (its log on a full filesystem)."""

    def write(self, text: str) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def flush(self) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_job_that_cannot_start_is_recorded_though_its_log_is_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The supervisor (run in this process) says on its stderr, the log, why the job's
    program cannot start, then records the failed start (exit 127). Its log on a full
    filesystem (the launch's own ``log_dir``), the line raised, and the supervisor died
    before the record: the run read as lost, not as the program that is missing."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    supervise.write_json(run_dir / supervise.LAUNCH, {"command": [str(tmp_path / "missing")]})
    monkeypatch.setattr(sys, "stderr", _FullLog())
    assert supervise.main(["supervise", str(run_dir)]) == 0
    done = supervise.read_json(run_dir / supervise.EXIT)
    assert done is not None and done["exit_code"] == supervise.SPAWN_FAILED_EXIT_CODE
    assert "missing" in done["error"]
