"""The local executor on a node whose disk fills up: a launch that cannot write its records is
a :class:`NodeLaunchError` (the node's fault, not the job's), and it leaves neither a run
directory nor a process behind, not even a job that had already started. The disk filling
is a ``write_json`` that fails with ENOSPC at a chosen record; the processes are real."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from danlu.core.cluster import Cluster
from danlu.executors import (
    Handle,
    JobLaunch,
    LaunchError,
    LocalExecutor,
    NodeLaunchError,
    Outcome,
    is_node_fault,
    supervise,
)
from danlu.executors.supervise import proc_start_time

PY = sys.executable


@pytest.fixture
def ex(tmp_path: Path) -> LocalExecutor:
    return LocalExecutor(
        Cluster.homogeneous(1, 2), tmp_path / "state", base_env={}, cancel_grace=1.0
    )


def _full_at(
    monkeypatch: pytest.MonkeyPatch, name: str, before: Callable[[], None] = lambda: None
) -> list[str]:
    """Make the executor's write of the record ``name`` fail with ENOSPC (after ``before``);
    the names of the records written, in order."""
    real = supervise.write_json
    written: list[str] = []

    def write_json(path: Path, data: dict[str, Any]) -> None:
        written.append(path.name)
        if path.name == name:
            before()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(path, data)

    monkeypatch.setattr(supervise, "write_json", write_json)
    return written


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has exited (a zombie counts as exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def test_no_room_for_the_launch_record_starts_nothing(
    ex: LocalExecutor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "ran"
    written = _full_at(monkeypatch, supervise.LAUNCH)
    job = JobLaunch("j", (PY, "-c", f"open({str(marker)!r}, 'w').write('x')"))
    with pytest.raises(NodeLaunchError, match="No space left on device"):
        ex.submit(job)
    assert written == [supervise.LAUNCH]
    assert not (ex._runs / "j").exists()
    time.sleep(0.3)
    assert not marker.exists()

    monkeypatch.undo()  # room again: the same job launches
    handle = ex.submit(job)
    deadline = time.monotonic() + 15
    while ex.poll(handle).running and time.monotonic() < deadline:
        time.sleep(0.02)
    assert ex.poll(handle).outcome is Outcome.SUCCEEDED
    assert marker.read_text() == "x"


def test_no_room_for_the_supervisor_record_stops_the_started_job(
    ex: LocalExecutor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The supervisor and its job already run when the last record fails: both are stopped,
    since no later executor could find them (the job would hold its GPUs unseen)."""
    pid_file = tmp_path / "pid"
    code = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"

    def job_started() -> None:
        deadline = time.monotonic() + 15
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.01)

    _full_at(monkeypatch, "supervisor.json", before=job_started)
    with pytest.raises(NodeLaunchError):
        ex.submit(JobLaunch("j", (PY, "-c", code)))
    pid = int(pid_file.read_text())
    start = proc_start_time(pid)
    deadline = time.monotonic() + 10
    while not _gone(pid) and proc_start_time(pid) == start and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _gone(pid) or proc_start_time(pid) != start
    assert not (ex._runs / "j").exists()
    assert not ex._children


def test_a_missing_program_is_still_the_jobs_fault() -> None:
    assert not is_node_fault(LaunchError("working directory is missing"))
    assert not is_node_fault(OSError(errno.ENOENT, "No such file or directory"))
    assert not is_node_fault(OSError(errno.E2BIG, "Argument list too long"))
    assert is_node_fault(OSError(errno.EMFILE, "Too many open files"))
    assert is_node_fault(NodeLaunchError("disk full"))


def _run_dir(tmp_path: Path, code: str) -> Path:
    """A run directory with the launch record of ``python -c code``."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    supervise.write_json(run_dir / supervise.LAUNCH, {"command": [PY, "-c", code]})
    return run_dir


@pytest.mark.parametrize(("code", "status"), [("pass", 0), ("raise SystemExit(3)", 1)])
def test_the_supervisor_outlasts_a_disk_with_no_room_for_its_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: str, status: int
) -> None:
    """The supervisor (run in this process, its job a real child) cannot record the job's
    pid, supervises it all the same, and keeps trying to record the exit; never able to,
    its own exit status says whether the job succeeded. It used to crash at the first
    record, leaving the job running unrecorded and its outcome lost."""
    monkeypatch.setattr(supervise, "EXIT_RECORD_SECONDS", 1.5)
    run_dir = _run_dir(tmp_path, code)
    tries: list[str] = []

    def full(path: Path, data: dict[str, Any]) -> None:
        tries.append(path.name)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(supervise, "write_json", full)
    assert supervise.main(["supervise", str(run_dir)]) == status
    assert tries[0] == supervise.JOB
    assert tries.count(supervise.EXIT) >= 2  # tried again, about once a second
    assert not (run_dir / supervise.EXIT).exists()


def test_the_exit_is_recorded_once_there_is_room_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = _run_dir(tmp_path, "raise SystemExit(4)")
    real = supervise.write_json
    failures = [2]

    def write_json(path: Path, data: dict[str, Any]) -> None:
        if path.name == supervise.EXIT and failures[0] > 0:
            failures[0] -= 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(path, data)

    monkeypatch.setattr(supervise, "write_json", write_json)
    assert supervise.main(["supervise", str(run_dir)]) == 0
    done = supervise.read_json(run_dir / supervise.EXIT)
    assert done is not None and done["exit_code"] == 4


def test_a_run_whose_exit_was_never_recorded_is_read_from_its_supervisor(
    ex: LocalExecutor, tmp_path: Path
) -> None:
    """This executor's own supervisor exited 0 without an exit record (the disk stayed full):
    the run succeeded; one that exited otherwise is lost, as before."""
    for name, status, outcome in (("ok", 0, Outcome.SUCCEEDED), ("bad", 1, Outcome.FAILED)):
        run_dir = ex._runs / name
        run_dir.mkdir(parents=True)
        launch = {"job_id": name, "attempt": 0, "command": [PY], "launched_at": time.time()}
        launch["log_path"] = str(tmp_path / f"{name}.log")
        supervise.write_json(run_dir / supervise.LAUNCH, launch)
        sup = subprocess.Popen([PY, "-c", f"raise SystemExit({status})"])
        sup.wait()
        supervise.write_json(run_dir / "supervisor.json", {"pid": sup.pid, "start": 1})
        ex._children[name] = sup
        status_now = ex.poll(Handle(name, 0))
        assert status_now.outcome is outcome, (name, status_now)


def test_a_stop_the_disk_has_no_room_to_record_still_stops_the_job(
    ex: LocalExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    handle = ex.submit(JobLaunch("long", (PY, "-c", "import time; time.sleep(60)")))
    deadline = time.monotonic() + 10
    while not (ex._runs / "long" / supervise.JOB).exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    _full_at(monkeypatch, supervise.STOP)
    ex.cancel(handle)  # raised OSError before, and the job ran on
    deadline = time.monotonic() + 15
    while ex.poll(handle).running and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not ex.poll(handle).running


def test_a_preemption_the_disk_has_no_room_to_record_still_gets_the_jobs_grace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no stop record to read, the supervisor gave a preemption the cancel grace, not
    the job's own ``preempt_grace``: a job that needs longer to checkpoint was SIGKILLed."""
    ex = LocalExecutor(Cluster.homogeneous(1, 2), tmp_path / "state", base_env={}, cancel_grace=0.2)
    ready = tmp_path / "ready"
    saving = "lambda *a: (time.sleep(1), print('saved', flush=True), sys.exit(75))"
    code = (  # a checkpoint that takes 1 s, longer than the cancel grace
        "import pathlib, signal, sys, time\n"
        f"signal.signal(signal.SIGTERM, {saving})\n"
        f"pathlib.Path({str(ready)!r}).write_text('1')\n"
        "time.sleep(60)\n"
    )
    handle = ex.submit(JobLaunch("ckpt", (PY, "-c", code), preempt_grace=10.0))
    deadline = time.monotonic() + 10
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    _full_at(monkeypatch, supervise.STOP)
    ex.preempt(handle, 30.0)
    deadline = time.monotonic() + 15
    while ex.poll(handle).running and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ex.poll(handle).exit_code == 75
    assert b"saved" in ex.logs(handle)[0]


def test_a_supervisor_run_in_process_leaves_the_callers_signals_and_children_alone(
    tmp_path: Path,
) -> None:
    """Its SIGCHLD handler (it reaps the job's orphans) stayed installed in a caller that
    ran it in-process, such as this test session: it reaped the caller's later children,
    whose Popen.wait() then said 0 whatever their exit (two tests of danlu.train failed)."""
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGCHLD, signal.SIGTERM)}
    assert not supervise.is_subreaper()
    assert supervise.main(["supervise", str(_run_dir(tmp_path, "pass"))]) == 0
    assert {sig: signal.getsignal(sig) for sig in handlers} == handlers
    assert not supervise.is_subreaper()
    supervise.set_subreaper()  # a caller that is a subreaper itself stays one
    try:
        (tmp_path / "2").mkdir()
        assert supervise.main(["supervise", str(_run_dir(tmp_path / "2", "pass"))]) == 0
        assert supervise.is_subreaper()
    finally:
        supervise.set_subreaper(False)
    failing = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    time.sleep(0.5)  # exited meanwhile: a reaper left behind would have collected it
    assert failing.wait(timeout=30) == 3
