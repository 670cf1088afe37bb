"""The executors write a run's records (``stop.json``, ``launch.json``, ``result.json``) through
a temporary file made anew, never through a link a job put in its run directory.

The temporary file was ``.NAME.PID.tmp`` (the writer's pid), opened with ``O_CREAT | O_TRUNC``,
which follows a symbolic link. A Slurm job runs as the control plane's user with its run
directory on the shared filesystem: it could put such links there for every pid, and the
control plane's next stop, poll or result truncated and rewrote the file a link named on the
control plane's own host (its ``~/.ssh/authorized_keys``, a database), a file out of the job's
reach. Now the temporary file has a name no one can foresee and is made exclusively
(``O_EXCL``: an existing name, a link included, is never opened). No Slurm needed: the
executor's commands print what the test gives them (:mod:`slurm_fakes`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from slurm_fakes import START, started_run

from danlu.executors import Outcome, supervise

SECRET = b"the control plane's own file\n"


def _plant(run_dir: Path, secret: Path, names: tuple[str, ...]) -> None:
    """What a job can do: a link, at the name of each record's temporary file as this
    process (the control plane) made it, to ``secret``."""
    for name in names:
        (run_dir / f".{name}.{os.getpid()}.tmp").symlink_to(secret)


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "elsewhere" / "authorized_keys"
    path.parent.mkdir()
    path.write_bytes(SECRET)
    return path


def test_a_record_is_never_written_through_a_link_at_its_temporary_name(
    tmp_path: Path, secret: Path
) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    _plant(run_dir, secret, ("stop.json",))
    supervise.write_json(run_dir / "stop.json", {"reason": "cancel"})
    assert secret.read_bytes() == SECRET
    assert json.loads((run_dir / "stop.json").read_bytes()) == {"reason": "cancel"}
    assert not (run_dir / "stop.json").is_symlink()
    leftovers = [p.name for p in run_dir.iterdir() if not p.is_symlink()]
    assert leftovers == ["stop.json"], "a temporary file was left behind"


def test_a_slurm_jobs_links_in_its_run_directory_reach_no_file_of_the_control_plane(
    tmp_path: Path, secret: Path
) -> None:
    commands, _, ex, handle = started_run(tmp_path)
    run_dir = tmp_path / "state" / "runs" / handle.job_id
    _plant(run_dir, secret, ("stop.json", "launch.json", "result.json"))
    ex.cancel(handle)  # records the stop, and the SIGTERM due in the launch record
    assert secret.read_bytes() == SECRET
    assert json.loads((run_dir / "stop.json").read_bytes())["reason"] == "cancel"
    commands.squeue("CANCELLED")
    commands.printed["scontrol show job"] = (
        f"JobId=7 JobState=CANCELLED Reason=None ExitCode=0:15 StartTime={START} "
        "EndTime=2026-11-29T05:00:00\n"
    )
    status = ex.poll(handle)
    assert status.outcome is Outcome.FAILED and status.exit_code == 143
    assert secret.read_bytes() == SECRET
    assert json.loads((run_dir / "result.json").read_bytes())["exit_code"] == 143
