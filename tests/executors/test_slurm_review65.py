"""The Slurm executor when Slurm does not do what was asked at once: a SIGTERM that could not
be sent (the controller unreachable for a moment) is sent again at the next polls; a run Slurm
keeps PENDING says why, and is given up after the executor's pending limit; a home whose path
holds ``%`` (a filename pattern to Slurm) works; a launch Slurm could not make is a failure
that says so, not a death from a signal. Mostly against the real test cluster."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterable
from pathlib import Path

import pytest
from run_helpers import launch, wait, wait_text
from slurm_cluster import SlurmCluster

from danlu.executors import ExecutorError, GpuSlot, Handle, Outcome, StopReason
from danlu.executors.slurm import SlurmExecutor, slurm_pattern
from danlu.executors.slurmctl import (
    SlurmCommands,
    SlurmJob,
    SlurmUnavailableError,
    job_from_fields,
    parse_fields,
)

SRC = str(Path(__file__).resolve().parents[2] / "src")

CHECKPOINT = (
    "import signal, sys, time\n"
    "terms = []\n"
    "signal.signal(signal.SIGTERM, lambda *_: terms.append(1))\n"
    "print('ready', flush=True)\n"
    "while not terms:\n"
    "    time.sleep(0.05)\n"
    "print('checkpointed after', len(terms), 'SIGTERM', flush=True)\n"
    "sys.exit(75)\n"
)
"""Checkpoints at once on SIGTERM and exits 75."""


class Clock:
    """Wall-clock time plus an offset the test moves forward (the executor's pending limit
    passes without waiting for it)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


def executor(slurm: SlurmCluster, home: Path, **kwargs: object) -> SlurmExecutor:
    return SlurmExecutor(
        SlurmCommands(slurm.env),
        home / "executor",
        partition="gpu",
        log_dir=home / "logs",
        base_env={"PATH": slurm.env["PATH"], "PYTHONPATH": SRC},
        cancel_grace=1.0,
        poll_interval=0.0,
        **kwargs,  # type: ignore[arg-type]
    )


# -- no Slurm needed ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/home/a/logs/x.log", "/home/a/logs/x.log"),
        ("/home/a%j_b/logs/x.log", "/home/a%%j_b/logs/x.log"),
        ("/h/100%%/x.log", "/h/100%%%%/x.log"),
    ],
    ids=["plain", "percent-j", "double-percent"],
)
def test_a_path_is_escaped_for_slurms_filename_patterns(path: str, expected: str) -> None:
    assert slurm_pattern(path) == expected


def test_a_path_with_a_backslash_is_refused_naming_it(tmp_path: Path) -> None:
    """Slurm drops every backslash of an ``--output`` path that has one (and expands nothing
    then): such a log directory can never be named to it."""
    with pytest.raises(ExecutorError, match=r"backslash"):
        slurm_pattern("/home/a\\b/logs/x.log")
    with pytest.raises(ExecutorError, match=r"log directory .*backslash"):
        SlurmExecutor(SlurmCommands({}), tmp_path / "state", log_dir=tmp_path / "a\\b")


def test_a_launch_failure_is_no_signal() -> None:
    """Slurm records a batch job it could not launch (its ``--output`` could not be opened)
    as ``ExitCode=0:53``, ``Reason=JobLaunchFailure``: no signal 53 killed anything."""
    line = (
        "JobId=7 JobName=danlu.a.0 JobState=FAILED Reason=JobLaunchFailure ExitCode=0:53 "
        "StartTime=2026-11-29T04:58:05 EndTime=2026-11-29T04:58:05"
    )
    job = job_from_fields(parse_fields(line))
    assert (job.state, job.reason, job.exit_code, job.signal) == (
        "FAILED",
        "JobLaunchFailure",
        None,
        None,
    )
    killed = job_from_fields(parse_fields("JobId=8 JobState=CANCELLED Reason=None ExitCode=0:9"))
    assert (killed.exit_code, killed.signal) == (137, 9)


def test_squeue_gives_a_running_jobs_start_time(tmp_path: Path) -> None:
    squeue = tmp_path / "squeue"
    squeue.write_text(
        "#!/bin/sh\n"
        "echo '12|RUNNING|2026-11-29T04:58:05|None'\n"
        "echo '13|PENDING|N/A|PartitionDown'\n"
    )
    squeue.chmod(0o755)
    jobs = SlurmCommands({"PATH": "/usr/bin:/bin"}, bin_dir=str(tmp_path)).jobs([12, 13])
    assert jobs[12].state == "RUNNING" and jobs[12].started_at is not None
    assert (jobs[13].state, jobs[13].reason, jobs[13].started_at) == (
        "PENDING",
        "PartitionDown",
        None,
    )


class Recorded(SlurmCommands):
    """Slurm's commands for one running job (``squeue`` says RUNNING), recording each
    ``scancel``: the first ``fail`` of them cannot reach the controller."""

    def __init__(self, fail: int = 0) -> None:
        super().__init__({})
        self.cancels: list[tuple[int, str | None]] = []
        self.fail = fail

    def jobs(self, job_ids: Iterable[int]) -> dict[int, SlurmJob]:
        return {i: SlurmJob(i, "RUNNING", "None") for i in job_ids}

    def job(self, job_id: int) -> SlurmJob | None:
        return SlurmJob(job_id, "RUNNING", "None")  # never suspended

    def cancel(self, job_id: int, signal: str | None = None, *, full: bool = False) -> None:
        self.cancels.append((job_id, signal))
        if len(self.cancels) <= self.fail:
            raise SlurmUnavailableError("scancel: Unable to contact slurm controller")


def test_a_gang_stops_sigterm_that_could_not_be_sent_is_sent_again(tmp_path: Path) -> None:
    """The executor's own stop of a run's nodes (one checkpointed alone) whose SIGTERM
    failed: sent at the next polls until Slurm takes it; the SIGKILL after the grace
    counted from the stop, not from the late SIGTERM."""
    clock = Clock()
    commands = Recorded(fail=1)
    ex = SlurmExecutor(commands, tmp_path / "state", poll_interval=0.0, clock=clock)
    run_dir = tmp_path / "state" / "runs" / "gang-1"
    run_dir.mkdir()
    now = clock()
    launched = {
        "job_id": "gang-1",
        "attempt": 0,
        "log_path": str(tmp_path / "gang-1.log"),
        "launched_at": now - 60,
        "slurm_id": 41,
        "nodes": ["n1", "n2"],
        "gang_stopped_at": now,
        "gang_grace": 30.0,
        "term_due": now,  # recorded before the scancel that failed
    }
    (run_dir / "launch.json").write_text(json.dumps(launched))
    handle = Handle("gang-1", 0)
    assert ex.poll(handle).running  # its try fails (the controller is away): logged
    assert "term_due" in json.loads((run_dir / "launch.json").read_text())
    assert ex.poll(handle).running
    assert commands.cancels == [(41, "TERM"), (41, "TERM")]
    assert "term_due" not in json.loads((run_dir / "launch.json").read_text())
    ex.poll(handle)
    assert commands.cancels == [(41, "TERM"), (41, "TERM")]  # sent: not again
    clock.offset = 30.0
    ex.poll(handle)
    assert commands.cancels[-1] == (41, "KILL")


# -- on the test cluster ------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.xdist_group("slurm")
def test_a_sigterm_that_could_not_be_sent_is_sent_at_the_next_poll(
    slurm: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The controller could not be reached for the preemption's ``scancel --signal=TERM``:
    the job got no SIGTERM in its grace, and was killed at its end without a checkpoint."""
    ex = executor(slurm, tmp_path)
    handle = ex.submit(launch("term-1", CHECKPOINT, gpus=(GpuSlot(0, 0),)))
    wait_text(ex, handle, "ready")
    real = ex._commands.cancel
    sent: list[str | None] = []

    def once_unreachable(job_id: int, signal: str | None = None, *, full: bool = False) -> None:
        sent.append(signal)
        if len(sent) == 1:
            raise SlurmUnavailableError("scancel --signal=TERM: Unable to contact slurm controller")
        real(job_id, signal, full=full)

    monkeypatch.setattr(ex._commands, "cancel", once_unreachable)
    try:
        with pytest.raises(SlurmUnavailableError):
            ex.preempt(handle, grace_seconds=300)
        assert ex.poll(handle).stop_reason is StopReason.PREEMPT  # the server sends no other
        status = wait(ex, handle, timeout=60)
    finally:
        slurm.run("scancel", "--name=danlu.term-1.0")  # (gone already when it passed)
    assert status.outcome is Outcome.PREEMPTED and status.checkpointed, status
    assert sent[:2] == ["TERM", "TERM"]
    assert "checkpointed after 1 SIGTERM" in ex.logs(handle)[0].decode()


@pytest.mark.slow
@pytest.mark.xdist_group("slurm")
def test_a_run_slurm_keeps_pending_says_why_and_is_given_up_after_the_limit(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    clock = Clock()
    ex = executor(slurm, tmp_path, pending_limit=120.0, clock=clock)
    with slurm.partition_down():
        handle = ex.submit(launch("pending-1", "print('ran')", gpus=(GpuSlot(0, 0),)))
        deadline = time.monotonic() + 30
        status = ex.poll(handle)
        while "PartitionDown" not in status.message:  # "None" until Slurm looked at it
            assert time.monotonic() < deadline, status
            time.sleep(0.2)
            status = ex.poll(handle)
        assert status.running and status.started_at is None  # it has not started
        assert status.message.startswith("Slurm job ") and "PENDING (PartitionDown)" in (
            status.message
        )
        clock.offset = 121.0
        status = wait(ex, handle, timeout=30)
    assert status.outcome is Outcome.FAILED and status.stop_reason is None, status
    assert (status.exit_code, status.signal, status.started_at) == (None, None, None)
    assert "did not start" in status.message and "PartitionDown" in status.message
    assert "ran" not in ex.logs(handle)[0].decode()


@pytest.mark.slow
@pytest.mark.xdist_group("slurm")
def test_a_home_with_a_percent_in_its_path_runs_jobs(slurm: SlurmCluster, tmp_path: Path) -> None:
    """``--output`` is a filename pattern: ``%j`` in the home's path was the Slurm job id,
    the log directory was not there, and every job failed as "signal 53"."""
    ex = executor(slurm, tmp_path / "home%j_%x_%%")
    handle = ex.submit(launch("pct-1", "print('HELLO')", gpus=(GpuSlot(0, 1),)))
    status = wait(ex, handle)
    assert status.outcome is Outcome.SUCCEEDED, status
    assert "HELLO" in ex.logs(handle)[0].decode()


@pytest.mark.slow
@pytest.mark.xdist_group("slurm")
def test_a_launch_slurm_could_not_make_fails_saying_so(slurm: SlurmCluster, tmp_path: Path) -> None:
    """The log directory is gone when Slurm starts the job (held back by the partition)."""
    ex = executor(slurm, tmp_path)
    with slurm.partition_down():
        handle = ex.submit(launch("nolog-1", "print('ran')", gpus=(GpuSlot(1, 0),)))
        shutil.rmtree(tmp_path / "logs")
    status = wait(ex, handle)
    assert status.outcome is Outcome.FAILED and status.signal is None, status
    assert status.exit_code is None
    assert "JobLaunchFailure" in status.message and str(tmp_path / "logs") in status.message
