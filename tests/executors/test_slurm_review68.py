"""The Slurm executor after review 68: an ``sbatch`` that reports a timeout although Slurm
took the job leaves one Slurm job per run, tracked (a cancel leaves nothing running); a rank
that failed is the run's exit though ``srun`` killed the other rank before it recorded one;
a run cancelled while Slurm kept it ``PENDING`` has no exit code and no start. Against the
real test cluster (:mod:`slurm_cluster`)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from run_helpers import launch, wait, wait_text
from slurm_cluster import SlurmCluster

from danlu.executors import (
    ExecutorUnavailableError,
    GpuSlot,
    Handle,
    JobLaunch,
    Outcome,
    RunState,
)
from danlu.executors.slurm import SlurmExecutor
from danlu.executors.slurmctl import RUNNING_STATES, SlurmCommands

SRC = str(Path(__file__).resolve().parents[2] / "src")
TIMED_OUT = "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation"

# One Slurm cluster at a time: under pytest-xdist these modules share one worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]

FAKE_SBATCH = """#!/bin/sh
# The first call: Slurm takes the job ({mode}) but sbatch reports a timeout, as it does when
# the controller was too busy to answer in time. Every later call: the real sbatch. The batch
# script comes on the standard input: read once, given to each real call.
script=$(cat)
if [ ! -e "{mark}" ]; then
  touch "{mark}"
  case "{mode}" in
    now) printf '%s\\n' "$script" | "{real}" "$@" >/dev/null ;;
    twice) for _ in 1 2; do printf '%s\\n' "$script" | "{real}" "$@" >/dev/null; done ;;
    later) (sleep 2; printf '%s\\n' "$script" | "{real}" "$@") >/dev/null 2>&1 & ;;
  esac
  echo "{said}" >&2
  exit 1
fi
printf '%s\\n' "$script" | "{real}" "$@"
"""
"""An ``sbatch`` whose first call submits the job (at once, twice, or 2 s later, as a busy
controller would once it got to the request) and then fails as a controller that did not
answer in time."""


def executor(slurm: SlurmCluster, state: Path, commands: SlurmCommands) -> SlurmExecutor:
    return SlurmExecutor(
        commands,
        state,
        partition="gpu",
        base_env={"PATH": slurm.env["PATH"], "PYTHONPATH": SRC},
        cancel_grace=1.0,
        poll_interval=0.0,
    )


def live_jobs(slurm: SlurmCluster, name: str) -> list[int]:
    """The ids of the jobs named ``name`` that Slurm may still run."""
    out = slurm.run("squeue", "-h", "-t", "all", "-o", "%i|%T", "-n", name)
    rows = [line.split("|") for line in out.split()]
    return sorted(int(i) for i, state in rows if state in RUNNING_STATES)


def wait_live(slurm: SlurmCluster, name: str, count: int, timeout: float = 30.0) -> list[int]:
    """The live jobs named ``name`` once there are ``count`` of them; fails when there are
    not within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while len(found := live_jobs(slurm, name)) != count:
        assert time.monotonic() < deadline, f"{len(found)} live Slurm jobs {name}: {found}"
        time.sleep(0.2)
    return found


def submit_as_the_control_plane(ex: SlurmExecutor, job: JobLaunch) -> Handle:
    """Submit ``job`` as the control plane does: a launch refused as the controller
    unreachable is made again at a later pass."""
    for _ in range(5):
        try:
            return ex.submit(job)
        except ExecutorUnavailableError:
            time.sleep(0.5)  # the next pass
    raise AssertionError(f"{job.job_id} was never submitted")


@pytest.mark.parametrize("mode", ["now", "later", "twice"])
def test_an_sbatch_that_timed_out_leaves_one_slurm_job_for_the_run(
    slurm: SlurmCluster, tmp_path: Path, mode: str
) -> None:
    """Before: the run directory was deleted and the error raised; the control plane
    submitted the run again, and Slurm ran it twice (launch.json named the second job only),
    and a cancel left the first running on GPUs danlu counted free."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    real = shutil.which("sbatch", path=slurm.env["PATH"])
    assert real is not None
    fake = bin_dir / "sbatch"
    fake.write_text(
        FAKE_SBATCH.format(mode=mode, mark=tmp_path / "once", real=real, said=TIMED_OUT)
    )
    fake.chmod(0o755)
    env = {**slurm.env, "PATH": f"{bin_dir}:{slurm.env['PATH']}"}
    ex = executor(slurm, tmp_path / "state", SlurmCommands(env))
    code = (
        "import os, time; print('started', os.environ['SLURM_JOB_ID'], flush=True); time.sleep(60)"
    )
    job = launch(f"dup-{mode}", code, gpus=(GpuSlot(1, 0),), attempt=1)
    name = f"danlu.{job.job_id}.1"
    handle = submit_as_the_control_plane(ex, job)
    wait_text(ex, handle, "started", timeout=30)
    (kept,) = wait_live(slurm, name, 1)
    assert ex.poll(handle).state is RunState.RUNNING
    assert f"Slurm job {kept} " in ex.poll(handle).message  # the run tracks that one
    time.sleep(1)  # a job Slurm took late would be there by now
    assert live_jobs(slurm, name) == [kept]
    ex.cancel(handle)
    status = wait(ex, handle, timeout=30)
    assert status.state is RunState.EXITED and status.outcome is Outcome.FAILED, status
    wait_live(slurm, name, 0)


def test_a_rank_that_failed_is_the_exit_though_srun_killed_the_other(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    """Rank 1 exits 3; rank 0 ignores SIGTERM, so ``srun --kill-on-bad-exit`` SIGKILLs it and
    its task records no exit. Before: Slurm's exit of the batch job (137, signal 9) was the
    run's, as not every node had recorded one."""
    ex = executor(slurm, tmp_path / "state", SlurmCommands(slurm.env))
    code = (
        "import os, signal, sys, time\n"
        "if os.environ['PET_NODE_RANK'] == '1':\n"
        "    time.sleep(1); print('rank 1 fails', flush=True); sys.exit(3)\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "time.sleep(60)\n"
    )
    handle = ex.submit(launch("partial-1", code, gpus=(GpuSlot(0, 0), GpuSlot(1, 0))))
    status = wait(ex, handle, timeout=60)
    assert (status.outcome, status.exit_code, status.signal) == (Outcome.FAILED, 3, None), status


def test_a_run_cancelled_while_pending_has_no_exit_and_no_start(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    """Before: Slurm's ``CANCELLED 0:0`` was taken for a SIGKILL (exit 137, signal 9), with
    Slurm's cancel time as its start."""
    ex = executor(slurm, tmp_path / "state", SlurmCommands(slurm.env))
    with slurm.partition_down():
        handle = ex.submit(launch("pend-1", "print('ran')", gpus=(GpuSlot(0, 1),)))
        assert ex.poll(handle).started_at is None
        ex.cancel(handle)
        status = wait(ex, handle, timeout=30)
    assert status.outcome is Outcome.FAILED, status
    assert (status.exit_code, status.signal, status.started_at) == (None, None, None), status
    assert "before it started" in status.message, status
    assert "ran" not in ex.logs(handle)[0].decode()
