"""A Slurm job that ended ``OUT_OF_MEMORY`` (its cgroup's memory limit, which Slurm sets from
``--mem``) ran out of the host's memory: its run's status says so (``host_memory``, Slurm's
state and the limit in its message), and the reason the control plane gives it names host
memory and what to change. Before: ``out of memory (signal 9); it had a 20.0GiB share of 1
GPU, which a restart gets again``, about GPU memory, which was not what ran out, with nothing
of Slurm's. A CUDA out-of-memory error in a Slurm job's log keeps its GPU note.

Slurm's commands print recorded text (:mod:`slurm_fakes`), as the other tests of its end
states do."""

from __future__ import annotations

import json
from pathlib import Path

from oom_reasons import GPU_NOTE, WORKER_SIGKILLED, reason
from run_helpers import launch
from slurm_fakes import START, Clock, Printed, fake_executor

from danlu.executors import ExecStatus, GpuSlot, Outcome, RunState, slurm_task
from danlu.executors.slurm_exits import OUT_OF_MEMORY_SAID
from danlu.server.run_exits import HOST_MEMORY_FIX

NODES = "\n".join(
    f"NodeName={name} NodeAddr=127.0.0.1 Gres=gpu:4 CPUTot=2 RealMemory=1024 State=IDLE"
    for name in ("n1", "n2")
)
END = "2026-11-29T05:58:05"


def _ended(
    tmp_path: Path, state: str, exit_field: str, codes: dict[str, int], log: str
) -> ExecStatus:
    """The status of a two-node run (Slurm job 7) that Slurm reports ended in ``state`` with
    ``ExitCode=exit_field``, after the task on each node of ``codes`` recorded its exit and
    the job wrote ``log``."""
    commands = Printed({"scontrol show node": NODES + "\n", "sbatch": "7\n"})
    commands.squeue("RUNNING")
    clock = Clock()
    ex = fake_executor(commands, tmp_path / "state", clock)
    handle = ex.submit(launch("mem-1", "pass", gpus=(GpuSlot(0, 0), GpuSlot(1, 0))))
    assert ex.poll(handle).state is RunState.RUNNING
    run_dir = tmp_path / "state" / "runs" / "mem-1"
    with open(json.loads((run_dir / "launch.json").read_text())["log_path"], "a") as out:
        out.write(log)
    for offset, (node, code) in enumerate(codes.items()):
        path = slurm_task.exit_path(run_dir, node)
        path.write_text(json.dumps({"exit_code": code, "finished_at": clock.now + offset}))
    commands.squeue(state)
    commands.printed["scontrol show job"] = (
        f"JobId=7 JobName=danlu.mem-1.0 JobState={state} Reason=None ExitCode={exit_field} "
        f"StartTime={START} EndTime={END}\n"
    )
    clock.now += 10
    status = ex.poll(handle)
    assert status.state is RunState.EXITED
    return status


def test_a_job_slurm_ended_out_of_memory_ran_out_of_host_memory(tmp_path: Path) -> None:
    """The kernel killed n2's command in the job's cgroup; n1 recorded nothing (its task
    killed with the job), and the log has slurmstepd's line."""
    stepd = "slurmstepd: error: Detected 1 oom_kill event in StepId=7.0. Some of the step tasks"
    status = _ended(tmp_path, "OUT_OF_MEMORY", "0:125", {"n2": 137}, f"{stepd}\n")
    assert (status.outcome, status.exit_code, status.signal) == (Outcome.OOM, 137, 9)
    assert status.host_memory and not status.node_lost
    said = f"Slurm job 7 ended OUT_OF_MEMORY: {OUT_OF_MEMORY_SAID}"
    assert status.message == said
    assert reason(status) == (
        f"out of host memory (signal 9; {said}); not GPU memory: {HOST_MEMORY_FIX}"
    )
    asked = reason(status, memory="64GiB")
    assert asked.endswith(
        "; not GPU memory: it asked for 64.0GiB of host memory (resources.memory), which is "
        f"not reserved for it: {HOST_MEMORY_FIX}"
    ), asked
    # restarted after a restart of the control plane: the recorded result says the same
    again = fake_executor(
        Printed({"scontrol show node": NODES + "\n"}), tmp_path / "state", Clock()
    )
    (adopted,) = again.adopt()
    assert again.poll(adopted).host_memory


def test_a_torchrun_worker_slurmstepd_saw_killed_ran_out_of_host_memory(tmp_path: Path) -> None:
    """torchrun's agent on n1 exited 1 after reporting its worker's SIGKILL, and the log
    has slurmstepd's line of the OOM kill: the host's memory, though Slurm's state is
    ``FAILED``; without slurmstepd's line (an admin's ``kill -9``), a failure."""
    stepd = "slurmstepd: error: Detected 1 oom_kill event in StepId=7.0. Some of the step tasks"
    log = f"{stepd}\n{WORKER_SIGKILLED}"
    status = _ended(tmp_path / "oom", "FAILED", "1:0", {"n1": 1, "n2": 0}, log)
    assert (status.outcome, status.exit_code, status.host_memory) == (Outcome.OOM, 1, True)
    assert reason(status) == f"out of host memory (exit code 1); not GPU memory: {HOST_MEMORY_FIX}"
    bare = _ended(tmp_path / "kill9", "FAILED", "1:0", {"n1": 1, "n2": 0}, WORKER_SIGKILLED)
    assert (bare.outcome, bare.exit_code, bare.host_memory) == (Outcome.FAILED, 1, False)


def test_a_cuda_oom_in_a_slurm_job_keeps_its_gpu_note(tmp_path: Path) -> None:
    cuda = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    status = _ended(tmp_path, "FAILED", "1:0", {"n1": 1, "n2": 0}, f"{cuda}\n")
    assert (status.outcome, status.exit_code, status.host_memory) == (Outcome.OOM, 1, False)
    assert reason(status) == f"out of memory (exit code 1); {GPU_NOTE}"
