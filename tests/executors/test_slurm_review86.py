"""The Slurm executor after review 86.

- Slurm's end state of a job lost with its node (``NODE_FAIL``, ``BOOT_FAIL``) re-queued the
  run even when every node's task had recorded its exit (all 0: a finished job ran again).
  Once every node recorded, its exits decide.
- ``OUT_OF_MEMORY`` (a kill in the job's cgroup) overrode the exits every node recorded: a
  run whose nodes all checkpointed (75) or succeeded was an OOM. Once every node recorded a
  success or a checkpoint, its exits decide; a failure, a kill or a node that recorded
  nothing leaves the OOM.
- The batch script was written into the run directory (the job's to write: it runs as the
  control plane's user, on the shared filesystem) through a link the job could put at
  ``batch.sh``, into the file it names on the control plane's host; and ``sbatch`` read the
  script from that path, a link put there after the write included (the file it names
  submitted, and kept by Slurm, where the job could read it back). Now the script is written
  under a fresh name and renamed over ``batch.sh``, and ``sbatch`` reads it on its standard
  input.

The end states with Slurm's commands printing what each test gives them; the batch script
against the real test cluster (:mod:`slurm_cluster`)."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest
from run_helpers import launch, wait
from slurm_cluster import SlurmCluster
from slurm_fakes import START, Clock, Printed, fake_executor

from danlu.executors import GpuSlot, Handle, Outcome, RunState, slurm_task, supervise
from danlu.executors.slurm import BATCH, SlurmExecutor
from danlu.executors.slurmctl import SlurmCommands

SRC = str(Path(__file__).resolve().parents[2] / "src")
NODES = "\n".join(
    f"NodeName={name} NodeAddr=127.0.0.1 Gres=gpu:4 CPUTot=2 RealMemory=1024 State=IDLE"
    for name in ("n1", "n2")
)
END = "2026-11-29T05:58:05"


def _ended(tmp_path: Path, state: str, exit_field: str, codes: dict[str, int]) -> Any:
    """The status of a two-node run (Slurm job 7) that Slurm reports ended in ``state`` with
    ``ExitCode=exit_field``, after the task on each node of ``codes`` recorded its exit."""
    commands = Printed({"scontrol show node": NODES + "\n", "sbatch": "7\n"})
    commands.squeue("RUNNING")
    clock = Clock()
    ex = fake_executor(commands, tmp_path / "state", clock)
    handle = ex.submit(launch("gang-1", "pass", gpus=(GpuSlot(0, 0), GpuSlot(1, 0))))
    assert ex.poll(handle).state is RunState.RUNNING
    for offset, (node, code) in enumerate(codes.items()):
        path = slurm_task.exit_path(tmp_path / "state" / "runs" / "gang-1", node)
        path.write_text(json.dumps({"exit_code": code, "finished_at": clock.now + offset}))
    commands.squeue(state)
    commands.printed["scontrol show job"] = (
        f"JobId=7 JobName=danlu.gang-1.0 JobState={state} Reason=None ExitCode={exit_field} "
        f"StartTime={START} EndTime={END}\n"
    )
    clock.now += 10
    status = ex.poll(handle)
    assert status.state is RunState.EXITED
    return status


# -- a node lost after every node recorded its exit ------------------------------------------


@pytest.mark.parametrize("state", ["NODE_FAIL", "BOOT_FAIL"])
@pytest.mark.parametrize(
    ("codes", "outcome", "exit_code"),
    [
        ({"n1": 0, "n2": 0}, Outcome.SUCCEEDED, 0),
        ({"n1": 75, "n2": 0}, Outcome.PREEMPTED, 75),
        ({"n1": 0, "n2": 3}, Outcome.FAILED, 3),
    ],
    ids=["all-0", "checkpoint", "failure"],
)
def test_a_node_lost_after_every_node_recorded_its_exit_leaves_the_exits_to_decide(
    tmp_path: Path, state: str, codes: dict[str, int], outcome: Outcome, exit_code: int
) -> None:
    """Before: re-queued as lost with its node (``node_lost``, a preemption), a job that had
    finished ran again."""
    status = _ended(tmp_path, state, "0:0", codes)
    assert (status.outcome, status.exit_code, status.node_lost) == (outcome, exit_code, False)
    assert status.message == f"Slurm job 7 ended {state} after every node recorded its exit"


@pytest.mark.parametrize(
    ("codes", "exit_code"),
    [({"n1": 0}, None), ({"n2": 3}, 3), ({}, None)],
    ids=["one-success", "one-failure", "none"],
)
def test_a_node_lost_before_every_node_recorded_is_a_lost_run(
    tmp_path: Path, codes: dict[str, int], exit_code: int | None
) -> None:
    """A node that recorded nothing was lost with the job on it: re-queued as before."""
    status = _ended(tmp_path, "NODE_FAIL", "0:0", codes)
    assert (status.outcome, status.exit_code, status.node_lost) == (
        Outcome.PREEMPTED,
        exit_code,
        True,
    )
    assert status.message == "a node of Slurm job 7 failed: it ended NODE_FAIL"


# -- out of memory ----------------------------------------------------------------------------


@pytest.mark.parametrize("exit_field", ["0:125", "0:0"])
@pytest.mark.parametrize(
    ("codes", "outcome", "exit_code"),
    [({"n1": 75, "n2": 75}, Outcome.PREEMPTED, 75), ({"n1": 0, "n2": 0}, Outcome.SUCCEEDED, 0)],
    ids=["checkpointed", "succeeded"],
)
def test_an_oom_kill_the_job_survived_leaves_the_exits_to_decide(
    tmp_path: Path, exit_field: str, codes: dict[str, int], outcome: Outcome, exit_code: int
) -> None:
    """Slurm's ``OUT_OF_MEMORY`` says a process of the job's cgroup was killed; every node's
    command still checkpointed or succeeded. Before: an OOM, exit 137."""
    status = _ended(tmp_path, "OUT_OF_MEMORY", exit_field, codes)
    assert (status.outcome, status.exit_code, status.signal) == (outcome, exit_code, None)
    assert not status.node_lost
    assert "OUT_OF_MEMORY after every node recorded its exit" in status.message


@pytest.mark.parametrize(
    ("codes", "exit_code", "signal"),
    [
        ({"n1": 0, "n2": 137}, 137, 9),  # the kernel's kill of the command
        ({"n1": 1, "n2": 75}, 1, None),  # a launcher whose worker the kernel killed
        ({"n1": 75}, 137, 9),  # n2 recorded nothing: the kill is Slurm's
        ({}, 137, 9),
    ],
    ids=["a-kill", "a-failure", "one-unrecorded", "none"],
)
def test_an_oom_kill_with_a_failure_or_a_missing_exit_stays_an_oom(
    tmp_path: Path, codes: dict[str, int], exit_code: int, signal: int | None
) -> None:
    status = _ended(tmp_path, "OUT_OF_MEMORY", "0:125", codes)
    assert (status.outcome, status.exit_code, status.signal) == (Outcome.OOM, exit_code, signal)


# -- the batch script ---------------------------------------------------------------------------


@pytest.fixture
def ex(slurm: SlurmCluster, tmp_path: Path) -> SlurmExecutor:
    return SlurmExecutor(
        SlurmCommands(slurm.env),
        tmp_path / "state",
        partition="gpu",
        base_env={"PATH": slurm.env["PATH"], "PYTHONPATH": SRC},
        cancel_grace=1.0,
        poll_interval=0.0,
    )


@pytest.fixture
def precious(tmp_path: Path) -> Path:
    """A file of the control plane's user on its host, which no job may write or read."""
    path = tmp_path / "precious.txt"
    path.write_text("#!/bin/sh\necho the control plane secret\n")
    path.chmod(0o600)
    return path


def _link_when_written(monkeypatch: pytest.MonkeyPatch, record: str, target: Path) -> None:
    """From now on, whenever the executor writes a run's ``record`` (its
    ``supervise.write_json``), a job replaces the run's batch script (:data:`BATCH`, there or
    not yet) by a link to ``target``."""
    real = supervise.write_json

    def write_json(path: Path, data: dict[str, Any]) -> None:
        real(path, data)
        if path.name == record:
            at = path.parent / BATCH
            at.unlink(missing_ok=True)
            at.symlink_to(target)

    monkeypatch.setattr(supervise, "write_json", write_json)


def _no_secret(ex: SlurmExecutor, handle: Handle, precious: Path, before: str) -> None:
    """The run ran its own command, and ``precious`` is as it was."""
    status = wait(ex, handle)
    log = ex.logs(handle)[0].decode()
    assert status.outcome is Outcome.SUCCEEDED, (status, log)
    assert "job ran" in log and "secret" not in log
    assert precious.read_text() == before
    assert stat.S_IMODE(precious.stat().st_mode) == 0o600


@pytest.mark.slow
@pytest.mark.xdist_group("slurm")
def test_a_link_planted_at_the_batch_script_is_not_written_through(
    ex: SlurmExecutor, tmp_path: Path, precious: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A link a job put at ``runs/JOB/batch.sh`` after the run directory was made (here,
    once the task file is written, just before the script). Before: the script overwrote the
    file it names (and made it executable)."""
    before = precious.read_text()
    _link_when_written(monkeypatch, slurm_task.TASK, precious)
    handle = ex.submit(launch("linked-1", "print('job ran')", gpus=(GpuSlot(0, 0),)))
    batch = tmp_path / "state" / "runs" / "linked-1" / BATCH
    assert not batch.is_symlink()
    script = batch.read_text()
    assert script.startswith("#!/bin/sh\n") and "\nexec " in script  # the script danlu wrote
    assert stat.S_IMODE(batch.stat().st_mode) == 0o700
    _no_secret(ex, handle, precious, before)


@pytest.mark.slow
@pytest.mark.xdist_group("slurm")
def test_sbatch_never_reads_a_link_put_in_place_of_the_batch_script(
    ex: SlurmExecutor, tmp_path: Path, precious: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A link a job put at ``batch.sh`` once it is written (here, with the launch record,
    just before ``sbatch``). Before: ``sbatch`` read the file it names, on the control
    plane's host, and Slurm ran it (and kept it: the job could read it back)."""
    before = precious.read_text()
    _link_when_written(monkeypatch, supervise.LAUNCH, precious)
    handle = ex.submit(launch("linked-2", "print('job ran')", gpus=(GpuSlot(0, 0),)))
    assert (tmp_path / "state" / "runs" / "linked-2" / BATCH).is_symlink()  # the job's doing
    _no_secret(ex, handle, precious, before)


def test_a_file_written_over_a_link_replaces_the_link(tmp_path: Path) -> None:
    """``supervise.write_file`` (the batch script's write): the link goes, the file it named
    stays as it was; the new file has exactly the mode asked, whatever the umask."""
    target = tmp_path / "target"
    target.write_text("kept")
    link = tmp_path / "batch.sh"
    link.symlink_to(target)
    supervise.write_file(link, "#!/bin/sh\n", 0o700)
    assert not link.is_symlink() and link.read_text() == "#!/bin/sh\n"
    assert stat.S_IMODE(link.stat().st_mode) == 0o700
    assert target.read_text() == "kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["batch.sh", "target"]
