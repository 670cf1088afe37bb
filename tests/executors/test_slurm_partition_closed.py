"""A partition Slurm reports other than ``UP`` (an admin's ``scontrol update PartitionName=gpu
State=DOWN``, ``DRAIN`` or ``INACTIVE`` before a maintenance) closes every node of it, and an
``sbatch`` Slurm refuses for the partition is no fault of the job's (a job re-queued, no
restart counted): each job placed there waited out the pending limit or was refused at once,
and failed after its restarts; it names the partition and the state Slurm reports of it
then. An ``sbatch`` refused for the admin's own options names them
(``DANLU_SLURM_SBATCH_OPTIONS``); a Slurm command's error of several lines reads as one; the
error of a run given up at the pending limit names ``DANLU_SLURM_PENDING_LIMIT``. No Slurm
needed: Slurm's commands print what each test gives them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from run_helpers import launch
from slurm_fakes import LIMIT, NODE, Clock, Printed, fake_executor

from danlu.executors import GpuSlot, LaunchError, NodeLaunchError, Outcome, PartitionClosedError
from danlu.executors.slurm import SlurmExecutor
from danlu.executors.slurmctl import SlurmCommands, SlurmError

REFUSED = (
    "sbatch --parsable failed: sbatch: error: Batch job submission failed: Required "
    "partition not available (inactive or drain)"
)


class Partitioned(Printed):
    """:class:`Printed` commands for partition ``gpu`` of nodes ``n1`` and ``n2``:
    ``sinfo -N`` lists them, the other ``sinfo`` prints partition ``listed`` as ``state``
    (``sinfo``'s ``%P|%a``; ``*`` marks Slurm's default partition)."""

    def __init__(
        self, printed: Mapping[str, str | SlurmError], state: str = "up", listed: str = "gpu*"
    ) -> None:
        super().__init__(printed)
        self.state = state
        self.listed = listed

    def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
    ) -> str:
        if argv[0] == "sinfo":
            return "n1\nn2\n" if "-N" in argv else f"{self.listed}|{self.state}\n"
        return super().run(argv, env=env, stdin=stdin)


def _executor(
    tmp_path: Path, commands: Printed, sbatch_options: Sequence[str] = ()
) -> SlurmExecutor:
    return SlurmExecutor(
        commands,
        tmp_path / "state",
        partition="gpu",
        poll_interval=0.0,
        clock=Clock(),
        sbatch_options=sbatch_options,
    )


def _nodes(drained: bool = False) -> str:
    second = NODE.replace("n1", "n2")
    if drained:
        second = second.replace("State=IDLE", "State=IDLE+DRAIN Reason=bad fan")
    return f"{NODE}\n{second}\n"


@pytest.mark.parametrize("state", ["down", "drain", "inactive"])
def test_a_partition_not_up_closes_every_node_until_it_is_up_again(
    tmp_path: Path, state: str
) -> None:
    commands = Partitioned({"scontrol show node": _nodes(drained=True)}, state)
    ex = _executor(tmp_path, commands)
    ex.refresh_inventory()
    held = (
        f"Slurm reports partition gpu {state.upper()}: no run starts there until scontrol "
        "update PartitionName=gpu State=UP"
    )
    assert ex.closed_nodes() == {
        "n1": held,
        "n2": f"Slurm reports it IDLE+DRAIN: bad fan; {held}",  # its own state kept
    }
    commands.state = "up"
    ex.refresh_inventory()
    assert ex.closed_nodes() == {"n2": "Slurm reports it IDLE+DRAIN: bad fan"}


def test_a_partition_sinfo_does_not_list_leaves_the_nodes_open(tmp_path: Path) -> None:
    commands = Partitioned({"scontrol show node": _nodes()}, "down", listed="other")
    ex = _executor(tmp_path, commands)
    ex.refresh_inventory()
    assert ex.closed_nodes() == {}


@pytest.mark.parametrize(
    ("state", "said"),
    [
        (
            "drain",
            "Slurm reports partition gpu DRAIN: it takes no job until scontrol update "
            "PartitionName=gpu State=UP",
        ),
        ("inact", "Slurm reports partition gpu INACT: it takes no job until scontrol update"),
        ("up", "partition gpu took no job then (Slurm reports it UP again now)"),
        (None, "sinfo lists no partition gpu: it is gone (DANLU_SLURM_PARTITION names one"),
    ],
)
def test_an_sbatch_refused_for_a_closed_partition_is_no_fault_of_the_job(
    tmp_path: Path, state: str | None, said: str
) -> None:
    """A :class:`PartitionClosedError` (the control plane re-queues the job without a
    restart counted, and counts no node's failure), naming the partition, the state Slurm
    reports of it once it refused (read as the inventory was, it was up) and the fix;
    nothing is left of the run. Before: "partition gpu takes no job now: it is drained or
    inactive in Slurm ... or gone", its state named nowhere, and a node's fault."""
    commands = Partitioned({"scontrol show node": _nodes(), "sbatch": SlurmError(REFUSED)})
    ex = _executor(tmp_path, commands)
    ex.refresh_inventory()
    assert ex.closed_nodes() == {}
    commands.state = state or ""
    commands.listed = "gpu" if state else "other"
    with pytest.raises(PartitionClosedError) as refused:
        ex.submit(launch("drained-1", "pass", gpus=(GpuSlot(0, 0),)))
    assert refused.value.nodes == ()
    assert (refused.value.partition, refused.value.state) == ("gpu", (state or "").upper())
    assert str(refused.value).startswith(said), refused.value
    assert str(refused.value).endswith(f"; Slurm refused job drained-1: {REFUSED}")
    assert not (tmp_path / "state" / "runs" / "drained-1").exists()


def test_an_sbatch_refusing_the_admins_options_names_them(tmp_path: Path) -> None:
    """Still the launch's failure (not the partition's), but its error says where the
    option the user never gave comes from."""
    said = "sbatch --parsable failed: sbatch: error: Invalid --time specification"
    commands = Partitioned({"scontrol show node": _nodes(), "sbatch": SlurmError(said)})
    ex = _executor(tmp_path, commands, sbatch_options=("--time=abc", "--qos=a b"))
    with pytest.raises(LaunchError) as refused:
        ex.submit(launch("opts-1", "pass", gpus=(GpuSlot(0, 0),)))
    assert not isinstance(refused.value, NodeLaunchError)
    assert str(refused.value) == (
        f"Slurm refused job opts-1: {said} (the submission carried "
        "DANLU_SLURM_SBATCH_OPTIONS=\"--time=abc '--qos=a b'\"; check them)"
    )


def test_an_sbatch_refused_without_admin_options_says_what_slurm_said(tmp_path: Path) -> None:
    said = "sbatch --parsable failed: sbatch: error: Node count specification invalid"
    commands = Partitioned({"scontrol show node": _nodes(), "sbatch": SlurmError(said)})
    with pytest.raises(LaunchError) as refused:
        _executor(tmp_path, commands).submit(launch("big-1", "pass", gpus=(GpuSlot(0, 0),)))
    assert not isinstance(refused.value, NodeLaunchError)
    assert str(refused.value) == f"Slurm refused job big-1: {said}"


def test_a_slurm_error_of_several_lines_reads_as_one(tmp_path: Path) -> None:
    """A missing ``slurm.conf`` has Slurm's commands print four lines; the error printed
    them as escaped ``\\n``s in the CLI's message, and split a log record."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sinfo = bin_dir / "sinfo"
    sinfo.write_text(
        "#!/bin/sh\n"
        "echo 'sinfo: error: fetch_config: DNS SRV lookup failed' >&2\n"
        "echo '' >&2\n"
        "echo '  sinfo: fatal: Could not establish a configuration source  ' >&2\n"
        "exit 1\n"
    )
    sinfo.chmod(0o755)
    commands = SlurmCommands({"PATH": str(bin_dir)})
    with pytest.raises(SlurmError) as failed:
        commands.nodes("gpu")
    assert str(failed.value) == (
        "sinfo -h failed: sinfo: error: fetch_config: DNS SRV lookup failed; "
        "sinfo: fatal: Could not establish a configuration source"
    )


def test_a_run_given_up_at_the_pending_limit_names_the_setting(tmp_path: Path) -> None:
    commands = Printed({"scontrol show node": NODE + "\n", "sbatch": "7\n"})
    commands.squeue("PENDING", "PartitionDown")
    clock = Clock()
    ex = fake_executor(commands, tmp_path / "state", clock)
    handle = ex.submit(launch("pend-1", "pass", gpus=(GpuSlot(0, 0),)))
    clock.now += LIMIT
    ex.poll(handle)
    commands.squeue("CANCELLED")
    commands.printed["scontrol show job"] = "JobId=7 JobState=CANCELLED ExitCode=0:0"
    status = ex.poll(handle)
    assert status.outcome is Outcome.FAILED
    assert status.message.endswith(
        "a longer pending_limit (DANLU_SLURM_PENDING_LIMIT) waits longer"
    ), status.message
