"""A launch made with its own ``log_dir`` was unreadable by a new executor instance (after a
control-plane restart): only the instance that launched it knew where its log was, and a new
one read ``LOG_DIR/JOB_ID.log`` (empty), classified the exit on that (an OOM became FAILED)
and timed a lost run by it. The local executor now records the directory in its launch
record (``log_dir``), which a later instance reads; the Slurm and Ray executors, whose
records a job on another host can rewrite, keep no such field and ignore one written in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from run_helpers import launch, wait

from danlu.core.cluster import Cluster
from danlu.executors import Handle, LocalExecutor, Outcome, UnknownHandleError, supervise
from danlu.executors.slurm import SlurmExecutor
from danlu.executors.slurmctl import SlurmCommands

OOM = "import sys; print('CUDA out of memory. Tried to allocate 2 GiB', flush=True); sys.exit(1)"


def _local(tmp_path: Path) -> LocalExecutor:
    return LocalExecutor(
        Cluster.homogeneous(1, 2), tmp_path / "state", base_env={}, cancel_grace=1.0
    )


def test_a_new_executor_reads_the_log_of_a_launch_with_its_own_log_dir(tmp_path: Path) -> None:
    logs = tmp_path / "elsewhere"
    ex = _local(tmp_path)
    handle = ex.submit(launch("j", "print('there')", log_dir=str(logs)))
    wait(ex, handle)
    again = _local(tmp_path)  # the control plane restarted
    assert again.logs(handle) == (b"there\n", 6)
    assert again.log_size(handle) == 6
    again.discard("j")
    assert (logs / "j.log").read_bytes() == b"there\n"  # the caller's, kept
    with pytest.raises(UnknownHandleError):  # its record is gone, and with it the log's place
        again.logs(handle)


def test_a_new_executor_classifies_the_exit_on_the_launch_s_own_log(tmp_path: Path) -> None:
    ex = _local(tmp_path)
    handle = ex.submit(launch("oom", OOM, log_dir=str(tmp_path / "elsewhere")))
    run_dir = tmp_path / "state" / "runs" / "oom"
    assert wait(ex, handle).outcome is Outcome.OOM
    assert supervise.read_json(run_dir / supervise.EXIT) is not None
    assert _local(tmp_path).poll(handle).outcome is Outcome.OOM  # was FAILED: an empty log


def test_a_launch_into_the_executor_s_log_dir_records_none(tmp_path: Path) -> None:
    ex = _local(tmp_path)
    handle = ex.submit(launch("j", "print('here')", log_dir=str(tmp_path / "state" / "logs")))
    wait(ex, handle)
    assert "log_dir" not in json.loads(
        (tmp_path / "state" / "runs" / "j" / "launch.json").read_text()
    )
    assert _local(tmp_path).logs(handle) == (b"here\n", 5)


def test_the_slurm_executor_ignores_a_log_dir_written_into_its_record(tmp_path: Path) -> None:
    """A Slurm job (on a node sharing the state directory) could name a directory of the
    control plane's host: the field is not one of the Slurm executor's records."""
    secret = tmp_path / "host-only"
    secret.mkdir()
    (secret / "j.log").write_bytes(b"the control plane's\n")
    ex = SlurmExecutor(SlurmCommands({}), tmp_path / "state")
    run_dir = tmp_path / "state" / "runs" / "j"
    run_dir.mkdir()
    record = {"job_id": "j", "attempt": 0, "log_path": "x", "launched_at": 1.0}
    (run_dir / "launch.json").write_text(json.dumps({**record, "log_dir": str(secret)}))
    assert ex.logs(Handle("j", 0)) == (b"", 0)
