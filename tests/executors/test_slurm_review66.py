"""The Slurm executor after review 66: a daemon a job starts (a process in a session of its
own) ends with the job's run, whether the command exits, fails or is cancelled, and whether
the daemon keeps the job's output open or not; a task whose exit is recorded is no longer
killed by a late SIGTERM; a job without ``workdir`` runs in a working directory of its own,
kept across its runs and apart from the executor's records; a run lost with its node
(``NODE_FAIL``, ``ExitCode=0:0``) has no exit code. Against the real test cluster
(:mod:`slurm_cluster`), the task alone, and a stand-in for Slurm's commands."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest
from run_helpers import launch, wait, wait_text
from slurm_cluster import SlurmCluster

from danlu.executors import GpuSlot, JobLaunch, Outcome, RunState
from danlu.executors.slurm import SlurmExecutor
from danlu.executors.slurmctl import SlurmCommands, SlurmJob, SlurmNode

SRC = str(Path(__file__).resolve().parents[2] / "src")
PY = sys.executable

# One Slurm cluster at a time: under pytest-xdist these modules share one worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]

QUIET_DAEMON = (
    'setsid sh -c \'echo $$ $(cut -d" " -f6 /proc/$$/stat) > "$1.tmp"'
    ' && mv "$1.tmp" "$1"; exec sleep 300\' daemon "$1"'
    " </dev/null >/dev/null 2>&1 &"
    ' while [ ! -s "$1" ]; do sleep 0.05; done; echo started; '
)
"""The start of a shell script, run as ``sh -c SCRIPT NAME PID_FILE``, that starts a daemon (a
``sleep`` in a session of its own, its standard streams on ``/dev/null``), waits until the
daemon has written its pid and its session id to PID_FILE, and prints ``started``; the rest
of the script follows."""
LOUD_DAEMON = QUIET_DAEMON.replace(" </dev/null >/dev/null 2>&1 &", " &")
"""As :data:`QUIET_DAEMON`, but the daemon keeps the job's standard streams (``srun`` waits for
its output to close)."""
STUBBORN_DAEMON = QUIET_DAEMON.replace("sh -c '", 'sh -c \'trap "" TERM; ', 1)
"""As :data:`QUIET_DAEMON`, but the daemon ignores SIGTERM (a stop's SIGTERM leaves it)."""


def daemon_command(pid_file: Path, then: str, start: str = QUIET_DAEMON) -> tuple[str, ...]:
    """The argv of a command that starts a daemon writing its pid to ``pid_file``, then runs
    ``then``."""
    return ("/bin/sh", "-c", start + then, "daemon-test", str(pid_file))


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _daemon(pid_file: Path, timeout: float = 30.0) -> int:
    """The pid of the daemon once it has written it, checked to lead a session of its own (a
    signal to the command's process group misses it): by the session id it wrote, as it may
    be gone already (it ends with a command that exits at once)."""
    deadline = time.monotonic() + timeout
    while not pid_file.exists():
        assert time.monotonic() < deadline, "the daemon never started"
        time.sleep(0.05)
    pid, session = (int(field) for field in pid_file.read_text().split())
    assert session == pid, "the daemon is no session leader of its own"
    return pid


def _assert_gone(pid: int, timeout: float = 10.0) -> None:
    """Wait until process ``pid`` has ended; fail when it has not."""
    deadline = time.monotonic() + timeout
    while _alive(pid):
        assert time.monotonic() < deadline, f"the daemon {pid} outlived its run"
        time.sleep(0.05)


@pytest.fixture
def daemons() -> Iterator[list[int]]:
    """The daemons a test started, SIGKILLed after it (a failing test leaves none behind)."""
    started: list[int] = []
    yield started
    for pid in started:
        if _alive(pid):
            os.kill(pid, 9)


def executor(slurm: SlurmCluster, state: Path) -> SlurmExecutor:
    base = {"PATH": slurm.env["PATH"], "PYTHONPATH": SRC}
    return SlurmExecutor(
        SlurmCommands(slurm.env),
        state,
        partition="gpu",
        base_env=base,
        api_url="http://127.0.0.1:8080",
        cancel_grace=1.0,
        poll_interval=0.0,
    )


@pytest.fixture
def ex(slurm: SlurmCluster, tmp_path: Path) -> SlurmExecutor:
    return executor(slurm, tmp_path / "state")


# -- daemons -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("then", "code"), [("exit 0", 0), ("exit 3", 3)], ids=["exit-0", "exit-3"])
def test_the_task_ends_a_daemon_when_the_command_exits(
    tmp_path: Path, daemons: list[int], then: str, code: int
) -> None:
    """The task alone, started as ``srun`` starts it (a process group of its own): it waited
    for the command and its process group only, and a daemon in a session of its own kept
    running on the run's GPUs."""
    pid_file = tmp_path / "daemon.pid"
    task = {"command": list(daemon_command(pid_file, then)), "env": {"PATH": os.environ["PATH"]}}
    (tmp_path / "task.json").write_text(json.dumps(task))
    env = {"PATH": os.environ["PATH"], "SLURMD_NODENAME": "n1"}
    script = str(Path(SRC) / "danlu" / "executors" / "slurm_task.py")
    proc = subprocess.Popen([PY, "-I", script, str(tmp_path)], env=env, start_new_session=True)
    try:
        daemons.append(_daemon(pid_file))
        assert proc.wait(timeout=60) == code
        _assert_gone(daemons[0])
        assert json.loads((tmp_path / "exit-n1.json").read_text())["exit_code"] == code
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()


def test_a_sigterm_after_the_exit_is_recorded_is_no_failure(tmp_path: Path) -> None:
    """A node's command checkpointed (exit 75) with no stop asked for; its record makes the
    executor stop the whole step (SIGTERM to every process, this task's included) while the
    task may still be exiting. Its Python handler was reset as the interpreter finalized: the
    task died of the SIGTERM, which ``srun --kill-on-bad-exit`` took for a failure, killing the
    other node in the middle of its checkpoint (seen once in a few runs of test_slurm.py's
    gang test)."""
    task = {
        "command": [PY, "-c", "import sys; sys.exit(75)"],
        "env": {},
        "nodes": ["n1", "n2"],
    }
    (tmp_path / "task.json").write_text(json.dumps(task))
    env = {"PATH": os.environ["PATH"], "SLURMD_NODENAME": "n1"}
    script = str(Path(SRC) / "danlu" / "executors" / "slurm_task.py")
    proc = subprocess.Popen([PY, "-I", script, str(tmp_path)], env=env, start_new_session=True)
    record = tmp_path / "exit-n1.json"
    try:
        deadline = time.monotonic() + 30
        while not record.exists():
            assert time.monotonic() < deadline, "the task recorded no exit"
            time.sleep(0.0005)
        while proc.poll() is None:  # the gang stop's SIGTERM, as late as it may come
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait() == 0  # a checkpoint of a node among several: no failure to srun
        assert json.loads(record.read_text())["exit_code"] == 75
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()


@pytest.mark.parametrize(
    ("start", "then", "outcome"),
    [
        (QUIET_DAEMON, "exit 0", Outcome.SUCCEEDED),
        (QUIET_DAEMON, "exit 3", Outcome.FAILED),
        (LOUD_DAEMON, "exit 0", Outcome.SUCCEEDED),
    ],
    ids=["exit-0", "exit-3", "daemon-keeps-the-output"],
)
def test_a_daemon_ends_when_the_command_exits(
    ex: SlurmExecutor,
    tmp_path: Path,
    daemons: list[int],
    start: str,
    then: str,
    outcome: Outcome,
) -> None:
    """Before: the run ended SUCCEEDED (or FAILED) while the daemon ran on; one that kept the
    job's output held the run RUNNING until ``srun`` gave up on the output (about 60 s), and
    survived it."""
    pid_file = tmp_path / "daemon.pid"
    job = JobLaunch("daemon-1", daemon_command(pid_file, then, start), gpus=(GpuSlot(0, 0),))
    handle = ex.submit(job)
    daemons.append(_daemon(pid_file))
    status = wait(ex, handle, timeout=30)
    assert status.outcome is outcome, (status, ex.logs(handle)[0])
    _assert_gone(daemons[0])


def test_a_daemon_ends_when_the_run_is_cancelled(
    ex: SlurmExecutor, tmp_path: Path, daemons: list[int]
) -> None:
    """The command dies of the cancel's SIGTERM, the daemon ignores it. Before: the daemon,
    whose parent had exited, was out of the step's process tree by the SIGKILL at the end of
    the grace, and ran on."""
    pid_file = tmp_path / "daemon.pid"
    command = daemon_command(pid_file, "sleep 300", STUBBORN_DAEMON)
    job = JobLaunch("daemon-2", command, gpus=(GpuSlot(1, 0),))
    handle = ex.submit(job)
    daemons.append(_daemon(pid_file))
    wait_text(ex, handle, "started", timeout=30)
    ex.cancel(handle)
    status = wait(ex, handle, timeout=30)
    assert status.state is RunState.EXITED and status.outcome is Outcome.FAILED, status
    _assert_gone(daemons[0])


# -- the working directory -----------------------------------------------------------------------

RECORDS = {"launch.json", "task.json", "batch.sh", "result.json", "stop.json", "exit-n1.json"}
"""The names of the executor's records in a run directory."""


def test_a_job_without_workdir_keeps_its_files_across_runs(
    ex: SlurmExecutor, tmp_path: Path
) -> None:
    """Before: the job ran in its run directory, among the executor's records, which the next
    run's launch deleted: a checkpoint written to ``./ckpt.pt`` was gone on the requeue."""
    write = (
        "import os; print('cwd', os.getcwd(), flush=True); "
        "open('results.txt', 'a').write('epoch 1\\n')"
    )
    first = ex.submit(launch("wd-1", write, gpus=(GpuSlot(0, 1),), attempt=1))
    assert wait(ex, first).outcome is Outcome.SUCCEEDED
    log = ex.logs(first)[0].decode()
    cwd = Path(next(line.split(" ", 1)[1] for line in log.splitlines() if line.startswith("cwd")))
    run_dir = tmp_path / "state" / "runs" / "wd-1"
    assert cwd.resolve() != run_dir.resolve() and run_dir.resolve() not in cwd.resolve().parents
    read = (
        "import os, json; print('SAW', open('results.txt').read().strip(), flush=True); "
        "print('LS', json.dumps(sorted(os.listdir('.'))), flush=True)"
    )
    second = ex.submit(launch("wd-1", read, gpus=(GpuSlot(0, 1),), attempt=2))
    assert wait(ex, second).outcome is Outcome.SUCCEEDED, ex.logs(second)[0]
    log = ex.logs(second)[0].decode()
    assert "SAW epoch 1" in log, log
    listed = json.loads(next(line[3:] for line in log.splitlines() if line.startswith("LS ")))
    assert listed == ["results.txt"], listed  # none of the executor's records
    assert not RECORDS & {p.name for p in cwd.iterdir()}
    ex.discard("wd-1")  # the job's records discarded for good: its files with them
    assert not cwd.exists()


def test_a_job_with_a_workdir_runs_there(ex: SlurmExecutor, tmp_path: Path) -> None:
    work = tmp_path / "mine"
    work.mkdir()
    code = "import os; print('cwd', os.getcwd(), flush=True)"
    handle = ex.submit(launch("wd-2", code, gpus=(GpuSlot(0, 2),), workdir=str(work)))
    assert wait(ex, handle).outcome is Outcome.SUCCEEDED
    assert f"cwd {work}" in ex.logs(handle)[0].decode()
    assert not (tmp_path / "state" / "work" / "wd-2").exists()


# -- a run lost with its node --------------------------------------------------------------------


class FakeSlurm(SlurmCommands):
    """Slurm's commands answered without Slurm: one idle node with 4 GPUs; every job
    submitted ends as ``ended`` says."""

    def __init__(self, ended: SlurmJob) -> None:
        super().__init__({})
        self.ended = ended

    def nodes(self, partition: str | None = None) -> list[SlurmNode]:
        return [SlurmNode("n1", "127.0.0.1", 4, None, 2, 2**30, "IDLE")]

    def sbatch(self, options: Sequence[str], script: str, env: Mapping[str, str]) -> int:
        return self.ended.job_id

    def jobs(self, job_ids: Iterable[int]) -> dict[int, SlurmJob]:
        return {i: self.ended for i in job_ids if i == self.ended.job_id}

    def job(self, job_id: int) -> SlurmJob | None:
        return self.ended if job_id == self.ended.job_id else None

    def cancel(self, job_id: int, signal: str | None = None, *, full: bool = False) -> None:
        return None


@pytest.mark.parametrize(
    ("ended", "exit_code", "outcome", "lost"),
    [
        (SlurmJob(7, "NODE_FAIL", exit_code=0), None, Outcome.PREEMPTED, True),
        (SlurmJob(7, "NODE_FAIL", exit_code=137, signal=9), 137, Outcome.PREEMPTED, True),
        (SlurmJob(7, "CANCELLED", exit_code=0), 137, Outcome.FAILED, False),
        (SlurmJob(7, "COMPLETED", exit_code=0), 0, Outcome.SUCCEEDED, False),
        (SlurmJob(7, "BOOT_FAIL", exit_code=0), None, Outcome.PREEMPTED, True),
    ],
    ids=["node-fail-0-0", "node-fail-killed", "cancelled-0-0", "completed", "boot-fail-0-0"],
)
def test_a_run_lost_with_its_node_has_no_exit_code(
    tmp_path: Path, ended: SlurmJob, exit_code: int | None, outcome: Outcome, lost: bool
) -> None:
    """Slurm records a job lost with its node as ``JobState=NODE_FAIL ExitCode=0:0``: no exit
    0, the job was killed with its node. Before: exit code 0, which the control plane stored
    ("lost with its node (exit code 0; ...)"). A node that failed to boot for the job
    (``BOOT_FAIL 0:0``) read as exit 0, a success of a job that never ran."""
    ex = SlurmExecutor(FakeSlurm(ended), tmp_path / "state", poll_interval=0.0)
    handle = ex.submit(launch("lost-1", "pass", gpus=(GpuSlot(0, 0),)))
    status = ex.poll(handle)
    assert status.state is RunState.EXITED
    assert (status.exit_code, status.outcome, status.node_lost) == (exit_code, outcome, lost)


def test_discarding_a_job_removes_a_link_in_place_of_its_working_directory(
    tmp_path: Path,
) -> None:
    """A job may replace its working directory by a link: discarding the job removes the
    link, never what it points to."""
    ex = SlurmExecutor(FakeSlurm(SlurmJob(7, "COMPLETED", exit_code=0)), tmp_path / "state")
    handle = ex.submit(launch("linked-1", "pass", gpus=(GpuSlot(0, 0),)))
    assert ex.poll(handle).outcome is Outcome.SUCCEEDED
    work = tmp_path / "state" / "work" / "linked-1"
    assert work.is_dir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("kept")
    work.rmdir()
    work.symlink_to(elsewhere)
    ex.discard("linked-1")
    assert not work.is_symlink() and not work.exists()
    assert (elsewhere / "keep.txt").read_text() == "kept"
