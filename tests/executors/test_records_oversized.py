"""Run records a job can write (its run directory is its own to write to, as its user's)
that the parser cannot take: nested too deeply (``json`` raises ``RecursionError``, not a
``ValueError``) or too large to read whole. Each reads as missing, as any damaged record
does, never an exception out of a poll (the control plane's pass over every run)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from run_helpers import launch, wait

from danlu.executors import LocalExecutor, RunState, records, supervise
from danlu.executors.slurm_exits import node_exits

DEEP = b"[" * 200_000


def test_a_deeply_nested_record_reads_as_missing(tmp_path: Path) -> None:
    path = tmp_path / supervise.EXIT
    path.write_bytes(DEEP)
    assert supervise.read_json(path) is None
    assert records.read_exit(tmp_path) is None
    (tmp_path / supervise.STOP).write_bytes(b'{"reason": ' + DEEP)
    assert records.read_stop(tmp_path) == {}


def test_a_local_run_whose_exit_record_is_nested_too_deeply_still_polls(
    ex: LocalExecutor, tmp_path: Path
) -> None:
    """The exit record a job rewrote as ``[[[[...`` raised RecursionError out of poll."""
    handle = ex.submit(launch("deep", "pass"))
    assert wait(ex, handle).exit_code == 0
    # the supervisor records the exit and then exits: still there, it is a run still going
    # once its records are damaged (a race the test lost on a loaded machine)
    ex._children["deep"].wait(timeout=60)
    run_dir = tmp_path / "state" / "runs" / "deep"
    (run_dir / supervise.EXIT).write_bytes(DEEP)
    (run_dir / supervise.JOB).write_bytes(DEEP)
    status = ex.poll(handle)  # worked out again, as for any damaged exit record
    assert status.state is RunState.EXITED


def test_a_slurm_nodes_exit_record_nested_too_deeply_is_no_exit(tmp_path: Path) -> None:
    (tmp_path / "exit-n1.json").write_bytes(DEEP)
    (tmp_path / "exit-n2.json").write_text(json.dumps({"exit_code": 0, "finished_at": 5.0}))
    assert node_exits(tmp_path, {"nodes": ["n1", "n2"]}) == {"n2": (5.0, 0)}


def test_a_record_over_the_size_limit_reads_as_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A record is read whole: one the job filled with gigabytes took the reader's memory."""
    monkeypatch.setattr(supervise, "MAX_RECORD_BYTES", 64)
    path = tmp_path / supervise.EXIT
    path.write_text(json.dumps({"exit_code": 0, "error": "x" * 64}))
    assert supervise.read_json(path) is None
    assert "over 64 bytes" in caplog.text
    path.write_text(json.dumps({"exit_code": 0, "error": "x" * 30}))
    assert supervise.read_json(path) == {"exit_code": 0, "error": "x" * 30}


def test_the_size_limit_holds_any_environment_a_job_can_be_started_with() -> None:
    """A Slurm task record holds the job's environment, which ``exec`` caps (a quarter of
    the stack limit, 2 MiB by default); even escaped, it is well under the limit."""
    assert supervise.MAX_RECORD_BYTES >= 32 * 1024**2
