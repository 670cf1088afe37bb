"""A local run whose supervisor is lost ends when it was last known alive, not when the
control plane noticed: a control plane down for hours (it died with the supervisor, or the
host lost power) charged those hours as the run's GPU time. A run lost with its host (its
records are of an earlier boot) is a node loss, and the pids it recorded, which name other
processes after the reboot, are neither trusted nor signalled."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from danlu.core.cluster import Cluster
from danlu.executors import ExecStatus, Handle, JobLaunch, LocalExecutor, Outcome
from danlu.executors.supervise import proc_start_time

PY = sys.executable
SRC = str(Path(__file__).resolve().parents[2] / "src")
ENV = {"PATH": "/usr/bin:/bin", "PYTHONPATH": SRC}
SLEEP = "import time; time.sleep(60)"


def _executor(tmp_path: Path, **kwargs: Any) -> LocalExecutor:
    return LocalExecutor(
        Cluster.homogeneous(1, 1), tmp_path / "state", base_env=ENV, cancel_grace=1.0, **kwargs
    )


def _wait_until(check: Any, what: str, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.02)
    raise AssertionError(f"{what} never happened")


def _read(path: Path) -> dict[str, Any] | None:
    with contextlib.suppress(OSError, ValueError):
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else None
    return None


def _job_record(ex: LocalExecutor, job_id: str) -> dict[str, Any]:
    """The supervisor's ``job.json`` of the run, once written."""
    return _wait_until(lambda: _read(ex._runs / job_id / "job.json"), "job.json") or {}


def _dead(pid: int) -> bool:
    """Whether ``pid`` is gone or a zombie (its parent killed, init may never reap it)."""

    def check() -> bool:
        try:
            raw = Path(f"/proc/{pid}/stat").read_bytes()
        except OSError:
            return True
        return raw[raw.rindex(b")") + 2 :].split()[0] in (b"Z", b"X")

    return bool(_wait_until(check, f"the end of process {pid}"))


def _crash(job: dict[str, Any]) -> float:
    """SIGKILL the run's supervisor and job together (what a crash of the host's processes
    does); the time by which both were dead."""
    for pid in (job["supervisor_pid"], job["pid"]):
        os.kill(pid, signal.SIGKILL)
    assert _dead(job["supervisor_pid"]) and _dead(job["pid"])
    return time.time()


def _exited(ex: LocalExecutor, handle: Handle) -> ExecStatus:
    def check() -> ExecStatus | None:
        status = ex.poll(handle)
        return None if status.running else status

    status: ExecStatus = _wait_until(check, "the exit")
    return status


def _boot_time() -> float:
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    raise AssertionError("no btime in /proc/stat")


def test_a_run_lost_with_its_supervisor_ends_before_the_control_plane_came_back(
    tmp_path: Path,
) -> None:
    """The reviewer's case: the supervisor and its job are killed together while no control
    plane runs; the control plane that comes back later recorded the run as ending then."""
    ex = _executor(tmp_path)
    handle = ex.submit(JobLaunch("crash", (PY, "-c", SLEEP)))
    job = _job_record(ex, "crash")
    crashed = _crash(job)
    time.sleep(0.5)  # the control plane comes back later
    status = _exited(ex, handle)
    assert status.outcome is Outcome.FAILED and status.message == "supervisor lost"
    assert status.finished_at is not None
    assert job["started_at"] <= status.finished_at <= crashed, (job, status, crashed)


def test_the_supervisor_keeps_the_runs_last_sign_of_life_fresh(tmp_path: Path) -> None:
    """Its heartbeat (every ``heartbeat`` seconds) is when the run was last known alive: a
    run lost after a while is charged that while, not only up to its start."""
    ex = _executor(tmp_path, heartbeat=0.1)
    handle = ex.submit(JobLaunch("beats", (PY, "-c", SLEEP)))
    job = _job_record(ex, "beats")
    beat = ex._runs / "beats" / "heartbeat"

    def fresh() -> float | None:
        with contextlib.suppress(OSError):
            if (mtime := beat.stat().st_mtime) > job["started_at"] + 0.5:
                return mtime
        return None

    seen = _wait_until(fresh, "a heartbeat 0.5 s after the start")
    crashed = _crash(job)
    time.sleep(0.3)
    status = _exited(ex, handle)
    assert status.finished_at is not None
    assert seen <= status.finished_at <= crashed, (seen, status, crashed)


def test_a_run_seen_running_by_a_poll_ran_until_then_without_a_heartbeat(
    tmp_path: Path,
) -> None:
    """A supervisor that keeps no heartbeat (started by an older danlu, adopted after the
    upgrade) lost while this instance polls its run: the run ran at least until the last
    poll that saw it running."""
    ex = _executor(tmp_path)
    handle = ex.submit(JobLaunch("seen", (PY, "-c", SLEEP)))
    job = _job_record(ex, "seen")
    time.sleep(0.5)
    polled = time.time()
    assert ex.poll(handle).running
    (ex._runs / "seen" / "heartbeat").unlink(missing_ok=True)  # as if it kept none
    crashed = _crash(job)
    status = _exited(ex, handle)
    assert status.finished_at is not None
    assert polled <= status.finished_at <= crashed, (polled, status, crashed)


def test_a_job_that_outlived_its_supervisor_ran_until_it_was_killed(tmp_path: Path) -> None:
    """Only the supervisor died (the OOM killer): the job ran on, on its GPUs, until the
    executor found the run lost and killed it, so that is when the run ended (not its
    supervisor's last heartbeat)."""
    ex = _executor(tmp_path)
    handle = ex.submit(JobLaunch("alone", (PY, "-c", SLEEP)))
    job = _job_record(ex, "alone")
    os.kill(job["supervisor_pid"], signal.SIGKILL)
    assert _dead(job["supervisor_pid"])
    time.sleep(0.3)
    assert proc_start_time(job["pid"]) is not None  # the job runs on
    found = time.time()
    status = _exited(ex, handle)
    assert status.message == "supervisor lost" and not status.node_lost
    assert status.finished_at is not None and status.finished_at >= found, (status, found)
    assert _dead(job["pid"])


@pytest.mark.parametrize(
    ("beat_after_boot", "ended_after_boot"),
    [(-300.0, -300.0), (300.0, 0.0)],  # the second: a clock set back after the boot
)
def test_a_run_of_an_earlier_boot_was_lost_with_its_host(
    tmp_path: Path, beat_after_boot: float, ended_after_boot: float
) -> None:
    """What a reboot (a power cut) leaves: the records of a run of the previous boot, whose
    pids may name other processes now, even with the same start ticks (a boot runs the same
    way each time). The run is lost with its node (the control plane re-queues it as a
    preemption, no restart counted), it ended at its last heartbeat (never after the boot),
    and the process its pids name now is left alone. It was taken for running (that
    process is alive) and would have been signalled."""
    ex = _executor(tmp_path)
    handle = ex.submit(JobLaunch("reboot", (PY, "-c", SLEEP)))
    run = ex._runs / "reboot"
    job = _job_record(ex, "reboot")
    _crash(job)
    boot = _boot_time()
    other = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        start = proc_start_time(other.pid)
        launch = _read(run / "launch.json") or {}
        launch.update(boot="00000000-0000-4000-8000-000000000000", launched_at=boot - 600)
        (run / "launch.json").write_text(json.dumps(launch))
        job.update(pid=other.pid, pgid=other.pid, start=start, started_at=boot - 599)
        job.update(supervisor_pid=other.pid, supervisor_start=start)
        (run / "job.json").write_text(json.dumps(job))
        (run / "supervisor.json").write_text(json.dumps({"pid": other.pid, "start": start}))
        heartbeat = run / "heartbeat"
        heartbeat.touch()
        os.utime(heartbeat, (boot + beat_after_boot, boot + beat_after_boot))
        os.utime(launch["log_path"], (boot - 500, boot - 500))
        status = ex.poll(handle)
        assert not status.running, "a run of an earlier boot taken for running"
        assert status.node_lost and status.outcome is Outcome.PREEMPTED, status
        assert status.finished_at == boot + ended_after_boot, (status, boot)
        assert proc_start_time(other.pid) == start, "a process of this boot was killed"
    finally:
        other.kill()
        other.wait()
