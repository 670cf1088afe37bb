"""Launches whose environment the job's process cannot be given.

A NUL byte in a string that becomes an environment variable (``checkpoint_dir``, a token)
passed the launch's checks and made ``Popen`` raise ``ValueError: embedded null byte`` out of
``submit``, after the launch record was written: the run that never started then looked as
if it ran, and the job's next launch was refused (``JobAlreadyRunningError``) until it
counted as lost. An environment value that is not a string raised a bare ``TypeError``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from run_helpers import wait

from danlu.core.cluster import Cluster
from danlu.executors import (
    Handle,
    InvalidLaunchError,
    JobLaunch,
    LaunchError,
    LocalExecutor,
    Outcome,
    UnknownHandleError,
)

PY = sys.executable


def _executor(root: Path) -> LocalExecutor:
    return LocalExecutor(Cluster.homogeneous(1, 1), root, base_env={}, cancel_grace=1.0)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"env": {"SEED": 1}}, "env.SEED"),
        ({"env": {3: "x"}}, "env.3"),
        ({"env": None}, "env"),
        ({"checkpoint_dir": "/ckpt/\0x"}, "checkpoint_dir"),
        ({"token": "abc\0"}, "token"),
        ({"workdir": "/tmp/\0"}, "workdir"),
        ({"log_dir": "/tmp/\0"}, "log_dir"),
        ({"run_as": "al\0ice"}, "run_as"),
    ],
)
def test_a_launch_with_an_unusable_string_names_its_field(
    kwargs: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidLaunchError) as err:
        JobLaunch("j", ("true",), **kwargs)
    assert field in str(err.value)


def test_a_launch_popen_refuses_leaves_no_run_behind(tmp_path: Path) -> None:
    # the base environment is the caller's: a NUL there reaches Popen
    ex = LocalExecutor(Cluster.homogeneous(1, 1), tmp_path / "state", base_env={"BAD": "a\0b"})
    with pytest.raises(LaunchError, match="null byte"):
        ex.submit(JobLaunch("j", (PY, "-c", "pass")))
    assert not (tmp_path / "state" / "runs" / "j").exists()
    with pytest.raises(UnknownHandleError):
        ex.poll(Handle("j", 0))
    # the job can be launched again at once, once the environment is fixed
    good = _executor(tmp_path / "state")
    handle = good.submit(JobLaunch("j", (PY, "-c", "pass")))
    assert wait(good, handle).outcome is Outcome.SUCCEEDED
