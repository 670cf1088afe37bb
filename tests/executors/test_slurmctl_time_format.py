"""Slurm's commands print times as ``SLURM_TIME_FORMAT`` says, which an operator may have set
(``relative``, an ``strftime`` format) in the environment the control plane runs with: the
commands whose output danlu reads run with it ``standard``, the form danlu reads."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from danlu.executors.slurmctl import SlurmCommands, reading_env

_SQUEUE = """#!/bin/sh
if [ "${SLURM_TIME_FORMAT:-standard}" = standard ]; then
    echo '12|RUNNING|2026-11-29T04:58:05|None'
else
    echo '12|RUNNING|Tomorr 04:58|None'
fi
"""
_SCONTROL = """#!/bin/sh
if [ "${SLURM_TIME_FORMAT:-standard}" = standard ]; then
    when=2026-11-29T04:58:05
else
    when='04:58:05'
fi
echo "JobId=12 JobState=CANCELLED Reason=None ExitCode=0:0 StartTime=$when EndTime=$when"
"""


def _bin(tmp_path: Path) -> str:
    for name, text in (("squeue", _SQUEUE), ("scontrol", _SCONTROL)):
        path = tmp_path / name
        path.write_text(text)
        path.chmod(0o755)
    return str(tmp_path)


@pytest.mark.parametrize("fmt", ["relative", "%s", "standard"])
def test_an_operators_time_format_does_not_hide_start_times(tmp_path: Path, fmt: str) -> None:
    """With ``SLURM_TIME_FORMAT=relative`` squeue's ``%S`` was ``Tomorr 04:58``: the running
    job read as having no start time."""
    env = {"PATH": "/usr/bin:/bin", "SLURM_TIME_FORMAT": fmt}
    commands = SlurmCommands(env, bin_dir=_bin(tmp_path))
    expected = datetime(2026, 11, 29, 4, 58, 5).timestamp()
    assert commands.jobs([12])[12].started_at == expected
    job = commands.job(12)
    assert job is not None and job.started_at == job.finished_at == expected


def test_a_job_cancelled_while_pending_is_told_apart_whatever_the_time_format(
    tmp_path: Path,
) -> None:
    """Slurm records a job cancelled while pending with its StartTime equal to its EndTime;
    unreadable times made it one killed by SIGKILL (exit 137) instead of one that never ran."""
    from danlu.executors.slurm_exits import never_ran, slurm_exit

    env = {"PATH": "/usr/bin:/bin", "SLURM_TIME_FORMAT": "relative"}
    job = SlurmCommands(env, bin_dir=_bin(tmp_path)).job(12)
    assert job is not None and never_ran(job)
    assert slurm_exit(job) == (None, None)


def test_the_reading_environment_keeps_the_rest_and_is_a_copy() -> None:
    given = {"PATH": "/usr/bin", "SLURM_CONF": "/etc/x.conf", "SLURM_TIME_FORMAT": "relative"}
    env = reading_env(given)
    assert env == {"PATH": "/usr/bin", "SLURM_CONF": "/etc/x.conf", "SLURM_TIME_FORMAT": "standard"}
    assert given["SLURM_TIME_FORMAT"] == "relative"
    assert reading_env(None) is None  # inherited whole: this module reads no environment


def test_sbatch_keeps_the_jobs_environment_as_given(tmp_path: Path) -> None:
    """sbatch runs with the job's environment, exported whole: nothing is added to it."""
    sbatch = tmp_path / "sbatch"
    sbatch.write_text('#!/bin/sh\n[ -z "${SLURM_TIME_FORMAT+set}" ] && echo 7 || echo set\n')
    sbatch.chmod(0o755)
    commands = SlurmCommands({"PATH": "/usr/bin:/bin"}, bin_dir=str(tmp_path))
    assert commands.sbatch([], "batch.sh", {"PATH": "/usr/bin:/bin", "A": "1"}) == 7
