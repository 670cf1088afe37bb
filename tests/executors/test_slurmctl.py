"""Reading what Slurm's commands print (no Slurm needed): ``scontrol`` one-liners, ``Gres``
strings, exit codes and states; and a command that fails names itself."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from danlu.executors import ExecutorUnavailableError
from danlu.executors.slurmctl import (
    SlurmCommands,
    SlurmError,
    job_from_fields,
    node_from_fields,
    parse_fields,
    parse_gres,
)

NODE = (
    "NodeName=gpu07 Arch=x86_64 CoresPerSocket=16 CPUAlloc=0 CPUTot=64 CPULoad=0.10 "
    "AvailableFeatures=(null) Gres=gpu:a100:8(S:0-1) NodeAddr=10.0.0.7 NodeHostName=gpu07 "
    "RealMemory=515000 AllocMem=0 State=IDLE+DRAIN Reason=bad DIMM [root@2026-11-29T04:00:00]"
)


def test_fields_keep_values_with_spaces_whole() -> None:
    fields = parse_fields(NODE)
    assert fields["Reason"] == "bad DIMM [root@2026-11-29T04:00:00]"
    assert fields["Gres"] == "gpu:a100:8(S:0-1)" and fields["CPUTot"] == "64"


@pytest.mark.parametrize(
    ("gres", "expected"),
    [
        ("gpu:4", (4, None)),
        ("gpu:a100:8(S:0-1)", (8, "a100")),
        ("gpu:h100:2,gpu:h100:2", (4, "h100")),
        ("gpu:a100:4,shard:16", (4, "a100")),
        ("gpu:a100:no_consume:4", (4, "a100")),
        ("gpu:no_consume:2(S:0)", (2, None)),
        ("(null)", (0, None)),
        ("", (0, None)),
    ],
)
def test_gres(gres: str, expected: tuple[int, str | None]) -> None:
    assert parse_gres(gres) == expected


def test_node() -> None:
    node = node_from_fields(parse_fields(NODE))
    assert (node.name, node.address, node.gpus, node.gpu_type) == ("gpu07", "10.0.0.7", 8, "a100")
    assert node.cpus == 64 and node.memory == 515000 * 2**20 and "DRAIN" in node.state
    assert node.reason == "bad DIMM"  # without Slurm's [user@time]
    assert node_from_fields(parse_fields("NodeName=n1 State=IDLE Reason=(null)")).reason == ""


@pytest.mark.parametrize(
    ("exit_field", "state", "code", "sig"),
    [
        ("0:0", "COMPLETED", 0, None),
        ("75:0", "FAILED", 75, None),
        ("0:9", "CANCELLED", 137, 9),
        ("", "PENDING", None, None),
    ],
)
def test_job_exit(exit_field: str, state: str, code: int | None, sig: int | None) -> None:
    line = (
        f"JobId=12 JobName=danlu.a.0 JobState={state} Reason=None ExitCode={exit_field} "
        "StartTime=2026-11-29T04:58:05 EndTime=Unknown"
    )
    job = job_from_fields(parse_fields(line))
    assert (job.job_id, job.state, job.exit_code, job.signal) == (12, state, code, sig)
    assert job.started_at is not None and job.finished_at is None
    assert job.running is (state == "PENDING")


def test_a_failing_command_names_itself() -> None:
    commands = SlurmCommands({"PATH": "/nonexistent"}, bin_dir="/nonexistent")
    with pytest.raises(SlurmError, match="squeue"):
        commands.jobs([1])
    assert commands.jobs([]) == {}


def _fake_bin(tmp_path: Path, name: str, stderr: str, code: int = 1) -> str:
    """A stand-in for one Slurm command that prints ``stderr`` and exits ``code``."""
    script = tmp_path / name
    script.write_text(f"#!/bin/sh\necho {shlex.quote(stderr)} >&2\nexit {code}\n")
    script.chmod(0o755)
    return str(tmp_path)


def test_an_unreachable_controller_is_unavailable_not_a_refusal(tmp_path: Path) -> None:
    down = "sbatch: error: Batch job submission failed: Unable to contact slurm controller"
    commands = SlurmCommands({"PATH": "/usr/bin:/bin"}, bin_dir=_fake_bin(tmp_path, "sbatch", down))
    with pytest.raises(ExecutorUnavailableError, match="Unable to contact"):
        commands.sbatch(["--nodes=1"], "#!/bin/sh\n", {})
    refused = tmp_path / "refused"
    refused.mkdir()
    said = "sbatch: error: Batch job submission failed: Invalid account or account/partition"
    commands = SlurmCommands({"PATH": "/usr/bin:/bin"}, bin_dir=_fake_bin(refused, "sbatch", said))
    with pytest.raises(SlurmError, match="Invalid account") as info:
        commands.sbatch(["--nodes=1"], "#!/bin/sh\n", {})
    assert not isinstance(info.value, ExecutorUnavailableError)


def test_jobs_slurm_no_longer_knows_are_absent_not_an_error(tmp_path: Path) -> None:
    """``squeue -j`` of ids Slurm has all forgotten exits 1 ("Invalid job id"): a new
    instance asking of one run whose job Slurm forgot failed at every poll."""
    said = "slurm_load_jobs error: Invalid job id specified"
    commands = SlurmCommands({"PATH": "/usr/bin:/bin"}, bin_dir=_fake_bin(tmp_path, "squeue", said))
    assert commands.jobs([999_999]) == {}
