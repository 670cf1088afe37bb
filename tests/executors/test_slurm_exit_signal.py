"""An exit status above 128 is read as a death by signal ``status - 128`` (the task
reports one so), but only where that is a signal: a program's own ``exit(255)`` (``exit
-1``, ssh's failure) was reported as killed by signal 127, which no process can get."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from danlu.executors.slurm_exits import run_result
from danlu.executors.slurmctl import SlurmJob


def _result(tmp_path: Path, code: int) -> dict[str, object]:
    launch = {"job_id": "j", "attempt": 0, "launched_at": 1.0, "nodes": ["n1"]}
    job = SlurmJob(7, "FAILED", exit_code=code, started_at=2.0, finished_at=3.0)
    return run_result(
        tmp_path, launch, 7, job, None, now=4.0, log_tail=lambda: "", log_dir=tmp_path
    )


@pytest.mark.parametrize("code", [255, 200, 128 + signal.NSIG])
def test_an_exit_status_of_no_signal_has_none(tmp_path: Path, code: int) -> None:
    result = _result(tmp_path, code)
    assert (result["exit_code"], result["signal"]) == (code, None)


@pytest.mark.parametrize(("code", "sig"), [(137, 9), (143, 15), (129, 1)])
def test_an_exit_status_of_a_signal_names_it(tmp_path: Path, code: int, sig: int) -> None:
    result = _result(tmp_path, code)
    assert (result["exit_code"], result["signal"]) == (code, sig)
