"""A local launch whose files cannot be made for the launch's own reasons (its ``log_dir`` is
a file, or under one) raised the bare ``OSError`` (``FileExistsError``,
``NotADirectoryError``), no error of danlu's: it is a :class:`LaunchError` naming the job and
the path, and leaves no run recorded."""

from __future__ import annotations

from pathlib import Path

import pytest
from run_helpers import launch, wait

from danlu.executors import LaunchError, LocalExecutor, NodeLaunchError, Outcome


@pytest.mark.parametrize("where", ["a-file", "a-file/logs"])
def test_a_log_dir_that_cannot_be_made_is_a_launch_error(
    ex: LocalExecutor, tmp_path: Path, where: str
) -> None:
    (tmp_path / "a-file").write_text("not a directory\n")
    log_dir = tmp_path / where
    with pytest.raises(LaunchError, match=r"cannot launch job j1: .*a-file") as raised:
        ex.submit(launch("j1", "pass", log_dir=str(log_dir)))
    assert not isinstance(raised.value, NodeLaunchError)  # the launch's doing, not the host's
    assert not (tmp_path / "state" / "runs" / "j1").exists()
    assert ex.adopt() == []
    handle = ex.submit(launch("j1", "print('ran')"))  # the same job launched as it should be
    assert wait(ex, handle).outcome is Outcome.SUCCEEDED
