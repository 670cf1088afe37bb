"""Discarding a job deletes its own log, never the file a link the job put at its log names:
the job (run as the control plane's user) can replace ``LOG_DIR/JOB_ID.log`` with a link to
another job's log in the same directory, which the path check passed (followed, the link
stays in the directory), and the discard deleted the other job's log."""

from __future__ import annotations

import sys
from pathlib import Path

from run_helpers import wait

from danlu.executors import JobLaunch, LocalExecutor, Outcome


def _ran(ex: LocalExecutor, job_id: str, text: str) -> None:
    handle = ex.submit(JobLaunch(job_id, (sys.executable, "-c", f"print({text!r})")))
    assert wait(ex, handle).outcome is Outcome.SUCCEEDED


def test_discard_removes_a_link_at_the_log_not_the_other_jobs_log(
    ex: LocalExecutor, tmp_path: Path
) -> None:
    _ran(ex, "other", "the other job's output")
    _ran(ex, "mine", "mine")
    logs = tmp_path / "state" / "logs"
    (logs / "mine.log").unlink()
    (logs / "mine.log").symlink_to(logs / "other.log")
    ex.discard("mine")
    assert not (logs / "mine.log").is_symlink() and not (logs / "mine.log").exists()
    assert (logs / "other.log").read_text() == "the other job's output\n"


def test_discard_removes_a_link_out_of_the_log_directory(ex: LocalExecutor, tmp_path: Path) -> None:
    """A link out of the directory made the discard raise InvalidLaunchError after the
    run's records were gone, and the link stayed."""
    _ran(ex, "mine", "mine")
    outside = tmp_path / "keep.txt"
    outside.write_text("kept\n")
    log = tmp_path / "state" / "logs" / "mine.log"
    log.unlink()
    log.symlink_to(outside)
    ex.discard("mine")
    assert not log.is_symlink() and outside.read_text() == "kept\n"


def test_discard_removes_the_jobs_own_log(ex: LocalExecutor, tmp_path: Path) -> None:
    _ran(ex, "mine", "mine")
    ex.discard("mine")
    assert not (tmp_path / "state" / "logs" / "mine.log").exists()
