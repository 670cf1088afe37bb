"""Slurm jobs looked up by name (a run's ``danlu.JOB_ID.ATTEMPT``) are the account danlu
submits as, never another user's: ``squeue`` listed every user's jobs, so another user's job
named ``danlu.JOB_ID.0`` kept a run whose launch record was damaged from being relaunched or
discarded (``named``), or was adopted as a run whose ``sbatch`` timed out, and its duplicates
cancelled (``find``). A fake ``squeue`` that lists two users' jobs, and honours
``--user``, as Slurm's does, stands in for Slurm."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from danlu.executors.slurm import SlurmExecutor
from danlu.executors.slurmctl import SlurmCommands

FAKE_SQUEUE = """#!{python}
import sys

JOBS = [  # id, state, name, user, uid
    ("7", "RUNNING", "danlu.held-1.0", "danlu", "{uid}"),
    ("8", "RUNNING", "danlu.held-1.0", "mallory", "4242"),
    ("9", "RUNNING", "danlu.other-1.0", "mallory", "4242"),
]
args = sys.argv[1:]
form, name, users = "%i", None, None
for i, arg in enumerate(args):
    if arg == "-o":
        form = args[i + 1]
    elif arg == "-n":
        name = args[i + 1]
    elif arg in ("-u", "--user"):
        users = args[i + 1].split(",")
    elif arg.startswith("--user="):
        users = arg.split("=", 1)[1].split(",")
    elif arg == "--me":
        users = ["{uid}"]
for job_id, state, job_name, user, uid in JOBS:
    if name is not None and job_name != name:
        continue
    if users is not None and user not in users and uid not in users:
        continue
    print(form.replace("%i", job_id).replace("%T", state).replace("%j", job_name))
"""


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    path = tmp_path / "bin"
    path.mkdir()
    fake = path / "squeue"
    fake.write_text(FAKE_SQUEUE.format(python=sys.executable, uid=os.getuid()))
    fake.chmod(0o755)
    return path


@pytest.mark.parametrize("user", [None, "danlu"])
def test_jobs_found_by_name_are_danlu_s_own(bin_dir: Path, user: str | None) -> None:
    """By default the account is this process's user (id), the one ``sbatch`` submits as."""
    named = {} if user is None else {"user": user}
    commands = SlurmCommands({"PATH": "/usr/bin:/bin"}, bin_dir=str(bin_dir), **named)
    assert commands.named("danlu.held-1.") == {7: ("danlu.held-1.0", "RUNNING")}
    assert commands.named("danlu.other-1.") == {}
    assert commands.find("danlu.held-1.0") == [7]
    assert commands.find("danlu.other-1.0") == []


def test_another_user_s_job_does_not_keep_a_damaged_run(bin_dir: Path, tmp_path: Path) -> None:
    commands = SlurmCommands({"PATH": "/usr/bin:/bin"}, bin_dir=str(bin_dir))
    ex = SlurmExecutor(commands, tmp_path / "state", poll_interval=0.0)
    ours = ex._still_runs(ex._runs / "held-1")
    assert ours is not None and "scancel 7)" in ours  # danlu's own job, not mallory's 8
    assert ex._still_runs(ex._runs / "other-1") is None  # only mallory's job is named so
