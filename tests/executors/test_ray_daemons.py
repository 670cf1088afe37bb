"""A process that a Ray run's command starts in a session of its own (a daemon: ``setsid``) ends
with the run: when the command exits, when the run is stopped (the command ending on the
SIGTERM, or ignoring it until the SIGKILL), when the actor is closed, and when the actor dies
under its guard. It held the run's GPUs, which danlu counted free, for good. The actor
(:class:`~danlu.executors.ray_actor.NodeRun`) and its guard without Ray, the executor against
a fake Ray (:mod:`fake_ray`) and once against a real cluster (:mod:`ray_cluster`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_ray import FakeRay, node
from run_helpers import wait

from danlu.executors import GpuSlot, JobLaunch, Outcome, StopReason
from danlu.executors.ray_actor import GUARD, NodeRun

# Its runs make ``danlu-run-*`` folders, which test_ray.py counts: same xdist worker.
pytestmark = pytest.mark.xdist_group("ray")

PY = sys.executable
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
DAEMON = (
    'setsid sh -c \'echo $$ > "$1.tmp" && mv "$1.tmp" "$1"; exec sleep 300\' daemon "$1" &'
    ' while [ ! -s "$1" ]; do sleep 0.05; done; echo started; '
)
"""The start of a shell script, run as ``sh -c SCRIPT NAME PID_FILE``, that starts a daemon (a
``sleep`` in a session of its own), waits until the daemon has written its pid to PID_FILE, and
prints ``started``; the rest of the script follows."""


def daemon_command(pid_file: Path, then: str, before: str = "") -> list[str]:
    """The argv of a command that runs ``before``, starts a daemon writing its pid to
    ``pid_file`` (:data:`DAEMON`), then runs ``then``."""
    return ["/bin/sh", "-c", before + DAEMON + then, "daemon-test", str(pid_file)]


def _daemon(pid_file: Path, run_pid: int | None, timeout: float = 15.0) -> int:
    """The pid of the daemon once it has written it, checked to be out of the command's
    session (so that what a test asserts is about a process a group signal misses)."""
    deadline = time.monotonic() + timeout
    while not pid_file.exists():
        assert time.monotonic() < deadline, "the daemon never started"
        time.sleep(0.05)
    pid = int(pid_file.read_text())
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    assert int(stat[3]) == pid != run_pid, "the daemon is no session leader of its own"
    return pid


def _assert_gone(pid: int, timeout: float = 10.0) -> None:
    """Wait until process ``pid`` has ended (a zombie counts as ended); fail when it has not."""
    deadline = time.monotonic() + timeout
    while _alive(pid):
        assert time.monotonic() < deadline, f"the daemon {pid} outlived its run"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


@pytest.fixture
def daemons() -> Iterator[list[int]]:
    """The daemons a test started, SIGKILLed after it (so that a failing test leaves none)."""
    started: list[int] = []
    yield started
    for pid in started:
        if _alive(pid):
            os.kill(pid, 9)


def _until_exit(run: NodeRun, timeout: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while (status := run.status(0))["exit_code"] is None:
        assert time.monotonic() < deadline, "the command still runs"
        time.sleep(0.05)
    return status


# -- the actor's process, without Ray ------------------------------------------------------------


def test_a_daemon_ends_when_the_command_exits(tmp_path: Path, daemons: list[int]) -> None:
    pid_file = tmp_path / "daemon.pid"
    run = NodeRun(daemon_command(pid_file, "exit 0"), ENV, log_dir=str(tmp_path / "log"))
    daemons.append(_daemon(pid_file, run.pid()))
    assert _until_exit(run)["exit_code"] == 0
    _assert_gone(daemons[0])


@pytest.mark.parametrize(
    ("before", "code"),
    [("", 128 + 15), ("trap '' TERM; ", 128 + 9)],
    ids=["ends-on-sigterm", "ignores-sigterm"],
)
def test_a_daemon_ends_when_the_run_is_stopped(
    tmp_path: Path, daemons: list[int], before: str, code: int
) -> None:
    """A command that dies of the stop's SIGTERM (its guard then exits), and one that ignores
    it, as its daemon does, until the SIGKILL at the end of the grace (which kills the guard
    too, so that the daemon is no descendant of the guard's any longer)."""
    pid_file = tmp_path / "daemon.pid"
    command = daemon_command(pid_file, "sleep 300", before=before)
    run = NodeRun(command, ENV, log_dir=str(tmp_path / "log"))
    daemons.append(_daemon(pid_file, run.pid()))
    run.stop("cancel", 0.5)
    assert _until_exit(run)["exit_code"] == code
    _assert_gone(daemons[0])


def test_close_ends_a_daemon(tmp_path: Path, daemons: list[int]) -> None:
    pid_file = tmp_path / "daemon.pid"
    run = NodeRun(daemon_command(pid_file, "sleep 300"), ENV, log_dir=str(tmp_path / "log"))
    daemons.append(_daemon(pid_file, run.pid()))
    run.close()
    _assert_gone(daemons[0])
    assert _until_exit(run)["exit_code"] == 128 + 9


def test_a_daemon_ends_when_its_guard_is_killed_under_the_actor(
    tmp_path: Path, daemons: list[int]
) -> None:
    """The guard SIGKILLed (the OOM killer, a ``kill -9``) while the actor lives: the command
    follows it, and the daemon, no descendant of the guard's any longer, is found by the run's
    mark in its environment."""
    pid_file = tmp_path / "daemon.pid"
    run = NodeRun(daemon_command(pid_file, "sleep 300"), ENV, log_dir=str(tmp_path / "log"))
    daemons.append(_daemon(pid_file, run.pid()))
    guard = run.pid()
    assert guard is not None
    os.kill(guard, signal.SIGKILL)
    assert _until_exit(run)["exit_code"] == 128 + 9
    _assert_gone(daemons[0])


def test_the_guard_ends_a_daemon_when_its_parent_dies(tmp_path: Path, daemons: list[int]) -> None:
    """The actor is gone (its worker died) and the guard is left: it ends the command's
    process group and the daemon, which is in no group of the command's."""
    pid_file = tmp_path / "daemon.pid"
    command = daemon_command(pid_file, "sleep 300")
    parent = (  # starts the guard in a session of its own, then dies
        "import os, subprocess, sys, time; "
        f"subprocess.Popen([sys.executable, '-I', {str(GUARD)!r}, str(os.getpid()), *{command!r}],"
        " start_new_session=True); time.sleep(1)"
    )
    subprocess.run([PY, "-c", parent], check=True, timeout=30)
    daemons.append(_daemon(pid_file, None))
    _assert_gone(daemons[0])


# -- the executor, against a fake Ray and a real cluster ----------------------------------------


def _exit_and_cancel(ex: Any, tmp_path: Path, daemons: list[int], job: str) -> None:
    """A run whose command exits and one that is cancelled, each leaving a daemon: gone once
    the executor reports the run ended (its actors killed)."""
    exits = tmp_path / "exits.pid"
    # (it exits once the daemon was checked: exited at once, the daemon could be gone
    # before the check read it)
    go = 'while [ ! -e "$1.go" ]; do sleep 0.05; done; exit 0'
    handle = ex.submit(
        JobLaunch(f"{job}-exit", tuple(daemon_command(exits, go)), gpus=(GpuSlot(0, 0),))
    )
    daemons.append(_daemon(exits, None, timeout=60))
    Path(f"{exits}.go").touch()
    assert wait(ex, handle).outcome is Outcome.SUCCEEDED
    _assert_gone(daemons[-1])
    cancelled = tmp_path / "cancelled.pid"
    command = tuple(daemon_command(cancelled, "sleep 300"))
    handle = ex.submit(JobLaunch(f"{job}-cancel", command, gpus=(GpuSlot(0, 1),)))
    daemons.append(_daemon(cancelled, None, timeout=60))
    ex.cancel(handle)
    status = wait(ex, handle)
    assert status.outcome is Outcome.FAILED and status.stop_reason is StopReason.CANCEL
    _assert_gone(daemons[-1])


def test_the_executor_ends_the_daemons_of_its_runs(
    tmp_path: Path, daemons: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    from danlu.executors.ray_executor import RayExecutor

    fake = FakeRay([node("n1")]).install(monkeypatch)
    try:
        ex = RayExecutor(tmp_path / "state", address=None, base_env=ENV, cancel_grace=1.0)
        _exit_and_cancel(ex, tmp_path, daemons, "fake")
    finally:
        fake.close_all()


@pytest.mark.slow
def test_the_executor_ends_the_daemons_of_its_runs_on_a_ray_cluster(
    tmp_path: Path, daemons: list[int]
) -> None:
    """The actors in Ray's workers (one cluster for this test alone: keep it to one)."""
    from ray_cluster import ray_cluster

    from danlu.executors.ray_executor import RayExecutor

    with ray_cluster():
        ex = RayExecutor(
            tmp_path / "state",
            address=None,
            namespace="danlu-test",
            base_env=ENV,
            cancel_grace=1.0,
        )
        _exit_and_cancel(ex, tmp_path, daemons, "real")
