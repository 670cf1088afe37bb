"""A Ray node's run keeps its output file open and reads it through that, never again by its
path: the command (the node's user, as the actor is) can remove ``output.log`` or put a link
to another file there while it runs. The actor read the path: the output after such a change
was lost, and the other file's content was shipped into the job's log instead."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest
from run_helpers import until_exit

from danlu.executors.ray_actor import NodeRun

# Its runs make ``danlu-run-*`` folders, which test_ray.py counts: same xdist worker.
pytestmark = pytest.mark.xdist_group("ray")

PY = sys.executable
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


def _replacing(output: Path, secret: Path | None) -> str:
    """A command that prints, replaces its output file (a link to ``secret``, or nothing
    when None), and prints again."""
    swap = f"os.symlink({str(secret)!r}, {str(output)!r})" if secret is not None else "None"
    return (
        f"import os; print('before', flush=True); os.remove({str(output)!r}); {swap}; "
        "print('after', flush=True)"
    )


@pytest.mark.parametrize("link", [True, False], ids=["linked", "removed"])
def test_the_output_survives_the_command_replacing_its_file(tmp_path: Path, link: bool) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"the node's token: s3cr3t\n")
    logs = tmp_path / "logs"
    code = _replacing(logs / "output.log", secret if link else None)
    run = NodeRun([PY, "-c", code], ENV, log_dir=str(logs))
    done = until_exit(run)
    assert done["exit_code"] == 0
    assert done["output"] == b"before\nafter\n"
    run.close()
    assert secret.read_bytes() == b"the node's token: s3cr3t\n"


def test_a_temporary_folders_output_is_read_until_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a ``log_dir`` (as the Ray executor runs it): the same, and close removes the
    folder and releases the file."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    code = (
        "import glob, os, sys; print('before', flush=True); "
        f"found = glob.glob({str(tmp_path)!r} + '/danlu-run-*/output.log'); "
        "[os.remove(p) for p in found]; print('after', len(found), flush=True)"
    )
    run = NodeRun([PY, "-c", code], ENV)
    assert len(list(tmp_path.glob("danlu-run-*"))) == 1
    done = until_exit(run)
    assert done["output"] == b"before\nafter 1\n"
    run.close()
    assert list(tmp_path.glob("danlu-run-*")) == []
    assert run.status(0)["output"] == b""  # closed: nothing to read, no error


def test_a_link_left_at_a_named_output_file_is_not_written_through(tmp_path: Path) -> None:
    """A ``log_dir`` given whose ``output.log`` is a link (another run's doing): the command
    is not started and nothing is written into the linked file."""
    secret = tmp_path / "secret"
    secret.write_bytes(b"s3cr3t\n")
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "output.log").symlink_to(secret)
    run = NodeRun([PY, "-c", "print('ran')"], ENV, log_dir=str(logs))
    status = run.status(0)
    assert status["exit_code"] == 127 and status["output"] == b""
    assert "is a symbolic link" in status["error"]
    assert secret.read_bytes() == b"s3cr3t\n"
    run.close()
