"""Nodes Slurm's power saving turned off are open capacity (the controller boots them on
demand), not closed as down; and a key given twice in ``scontrol``'s output keeps its first
value, Slurm's own, not free text (a comment) that looks like a field."""

from __future__ import annotations

from pathlib import Path

import pytest
from run_helpers import launch
from slurm_fakes import NODE, Clock, Printed, fake_executor

from danlu.executors import GpuSlot, NodeLaunchError, RunState
from danlu.executors.slurm import SlurmExecutor
from danlu.executors.slurmctl import job_from_fields, node_closed, node_from_fields, parse_fields

STAMP = "[root@2026-11-29T04:58:05]"


@pytest.mark.parametrize(
    "state",
    [
        "IDLE",
        "IDLE+POWERED_DOWN",  # turned off by power saving: booted for a job given to it
        "IDLE+CLOUD+POWERED_DOWN",
        "IDLE+POWERING_DOWN",
        "IDLE+POWER_DOWN",  # to be turned off once idle
        "IDLE+POWERING_UP",
        "ALLOCATED+POWERING_UP",
        "MIXED",
        "POWERED_DOWN",
        "",
    ],
)
def test_a_node_powered_down_by_slurm_is_open(state: str) -> None:
    assert not node_closed(state)


@pytest.mark.parametrize(
    "state",
    [
        "DOWN",
        "DOWN+POWERED_DOWN",  # failed to boot (ResumeTimeout): down, and off
        "DOWN+CLOUD+POWERED_DOWN",
        "IDLE+DRAIN",
        "IDLE+DRAIN+POWERED_DOWN",  # POWER_DOWN_ASAP drains it
        "MIXED+DRAIN",
        "ALLOCATED+FAIL",
        "IDLE+NOT_RESPONDING",
        "IDLE+INVALID_REG",
        "DOWN*",  # sinfo's marks after a state
        "DRAINED~",
        "idle+drain",
    ],
)
def test_a_node_down_drained_or_failing_is_closed_powered_down_or_not(state: str) -> None:
    assert node_closed(state)


def _executor(tmp_path: Path, state: str) -> tuple[Printed, SlurmExecutor]:
    commands = Printed(
        {
            "scontrol show node": f"{NODE}\n{NODE.replace('n1', 'n2').replace('IDLE', state)}\n",
            "sbatch": "7\n",
        }
    )
    commands.squeue("CONFIGURING")  # Slurm boots the node: the job waits configuring
    ex = fake_executor(commands, tmp_path / "state", Clock())
    assert [node.name for node in ex.refresh_inventory().nodes] == ["n1", "n2"]
    return commands, ex


def test_a_powered_down_node_is_capacity_and_takes_a_launch(tmp_path: Path) -> None:
    # POWERED_DOWN closed the node: a cluster with power saving had nearly no capacity
    _, ex = _executor(tmp_path, "IDLE+CLOUD+POWERED_DOWN")
    assert ex.closed_nodes() == {}
    handle = ex.submit(launch("boot-1", "pass", gpus=(GpuSlot(1, 0),)))
    assert ex.poll(handle).state is RunState.RUNNING


def test_a_powered_down_node_that_is_also_down_stays_closed(tmp_path: Path) -> None:
    _, ex = _executor(tmp_path, "DOWN+POWERED_DOWN")
    closed = ex.closed_nodes()
    assert list(closed) == ["n2"] and "DOWN+POWERED_DOWN" in closed["n2"]
    with pytest.raises(NodeLaunchError, match="n2"):
        ex.submit(launch("boot-2", "pass", gpus=(GpuSlot(1, 0),)))


@pytest.mark.parametrize(
    "tail",
    [
        " Comment=moved here, was State=DOWN",  # an admin's comment
        " Extra=rack=4 State=IDLE",  # the free-form Extra field
        f" Reason=fan {STAMP} Comment=see State=IDLE+DRAIN",
    ],
)
def test_a_repeated_key_keeps_slurms_own_value(tail: str) -> None:
    line = (
        "NodeName=n1 CoresPerSocket=1 CPUAlloc=0 CPUTot=2 Gres=gpu:4 NodeAddr=10.0.0.1 "
        "RealMemory=1024 State=IDLE+POWERED_DOWN ThreadsPerCore=1 CfgTRES=cpu=2,mem=1G" + tail
    )
    node = node_from_fields(parse_fields(line))
    # the last State= (the comment's) was kept: an open node read as down, or the reverse
    assert node.state == "IDLE+POWERED_DOWN"
    assert (node.gpus, node.cpus, node.address) == (4, 2, "10.0.0.1")


def test_a_jobs_fields_are_not_taken_from_its_command_or_paths() -> None:
    line = (
        "JobId=7 JobName=danlu.j1.1 JobState=FAILED Reason=NonZeroExitCode Dependency=(null) "
        "Requeue=0 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=3:0 "
        "StartTime=2026-11-29T04:58:05 EndTime=2026-11-29T05:00:00 "
        "Command=/srv/train.sh JobState=COMPLETED ExitCode=0:0 WorkDir=/srv "
        "StdOut=/srv/out EndTime=Unknown"
    )
    job = job_from_fields(parse_fields(line))
    assert (job.state, job.exit_code, job.reason) == ("FAILED", 3, "NonZeroExitCode")
    assert job.finished_at is not None
