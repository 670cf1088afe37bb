"""Damaged run records (a job writing into the state directory, a failing disk): every field
the local executor reads is checked, so one bad run directory reads as a run with less known
about it, not an exception in every reconcile pass. A stop reason of -1 raised ValueError in
``poll``, and so in every launch (which reads every run's status for the GPUs it holds)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from danlu.core.cluster import Cluster
from danlu.executors import (
    ExecStatus,
    GpuSlot,
    Handle,
    JobLaunch,
    LocalExecutor,
    Outcome,
    UnknownHandleError,
    supervise,
)
from danlu.executors.records import checked, read_exit, read_launch

PY = sys.executable


def _executor(root: Path) -> LocalExecutor:
    return LocalExecutor(Cluster.homogeneous(1, 2), root, base_env={}, cancel_grace=1.0)


def _finish(ex: LocalExecutor, handle: Handle) -> ExecStatus:
    deadline = time.monotonic() + 15
    while (status := ex.poll(handle)).running and time.monotonic() < deadline:
        time.sleep(0.02)
    return status


@pytest.fixture
def finished(tmp_path: Path) -> tuple[Path, Handle]:
    """The state directory of a run that exited 0 on GPU 0, and its handle."""
    ex = _executor(tmp_path / "state")
    handle = ex.submit(JobLaunch("j", (PY, "-c", "print('done')"), gpus=(GpuSlot(0, 0),)))
    assert _finish(ex, handle).outcome is Outcome.SUCCEEDED
    ex._children["j"].wait(15)  # its supervisor has exited too, not only recorded the exit
    return tmp_path / "state", handle


@pytest.mark.parametrize(
    ("record", "damage"),
    [
        (supervise.STOP, {"reason": -1, "grace": "soon"}),
        (supervise.STOP, {"reason": "nap"}),
        (supervise.JOB, {"pid": "x", "pgid": [], "start": 1e308, "started_at": "now"}),
        ("supervisor.json", {"pid": True, "start": None}),
        (supervise.LAUNCH, {"gpus": [[0]], "shared": "yes", "log_offset": -5}),
        (supervise.EXIT, {"exit_code": "0"}),
    ],
)
def test_a_damaged_record_is_read_as_missing_what_is_damaged(
    finished: tuple[Path, Handle], record: str, damage: dict[str, object]
) -> None:
    root, handle = finished
    run_dir = root / "runs" / "j"
    data = supervise.read_json(run_dir / record) or {}
    (run_dir / record).write_text(json.dumps({**data, **damage}))
    ex = _executor(root)  # as after a restart of the control plane
    assert ex.adopt() == [handle]
    status = ex.poll(handle)
    assert not status.running
    # a damaged exit is worked out again: the supervisor is gone, so the run is lost
    expected = Outcome.FAILED if record == supervise.EXIT else Outcome.SUCCEEDED
    assert status.outcome is expected
    assert ex.logs(handle)[0].startswith(b"done")
    # a launch reads every run's GPUs: it used to fail on the damaged one
    other = ex.submit(JobLaunch("k", (PY, "-c", "pass"), gpus=(GpuSlot(0, 0),)))
    assert _finish(ex, other).outcome is Outcome.SUCCEEDED


@pytest.mark.parametrize("text", ["[1, 2]", "{", "null", '{"job_id": "j", "attempt": "0"}'])
def test_a_launch_record_that_does_not_identify_the_run_hides_it(
    finished: tuple[Path, Handle], text: str
) -> None:
    root, handle = finished
    (root / "runs" / "j" / supervise.LAUNCH).write_text(text)
    ex = _executor(root)
    assert ex.adopt() == []
    with pytest.raises(UnknownHandleError):
        ex.poll(handle)


def test_checked_keeps_fields_of_the_right_type_only(tmp_path: Path) -> None:
    fields = {"a": lambda v: isinstance(v, int), "b": lambda v: v == "ok"}
    assert checked({"a": 1, "b": "no", "c": 3}, fields) == {"a": 1}
    assert checked({"a": "1"}, fields, required=("a",)) is None
    assert checked(None, fields) is None
    (tmp_path / supervise.LAUNCH).write_text(json.dumps({"job_id": "j", "attempt": 0}))
    assert read_launch(tmp_path) is None  # no log_path, no launched_at
    (tmp_path / supervise.EXIT).write_text(json.dumps({"exit_code": 3, "signal": None}))
    assert read_exit(tmp_path) == {"exit_code": 3, "signal": None}
    (tmp_path / supervise.EXIT).write_text(json.dumps({"exit_code": 2.5}))
    assert read_exit(tmp_path) is None
