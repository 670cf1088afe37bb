"""What ``sbatch`` prints on success besides the job id (no Slurm needed). A site's
``sbatch`` wrapper or submit plugin may print lines of its own on the standard output
before ``--parsable``'s id, which was then refused as "not a job id": the launch failed, its
run directory was deleted, and the Slurm job, which Slurm had taken (``sbatch`` exited 0),
ran on untracked, its GPUs taken as free, the run launched again at the next pass. The id is
now read from the last line that is one; an ``sbatch`` that succeeded without a readable id
keeps its run, tracked by its job name as after an ``sbatch`` that timed out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from run_helpers import launch
from slurm_fakes import NODE, Clock, Printed, fake_executor

from danlu.executors import RunState, supervise
from danlu.executors.slurmctl import SbatchUnreadError, SlurmError


@pytest.mark.parametrize(
    "printed",
    [
        "Your job is charged to account lab-a\n4242\n",
        "NOTICE: GPU jobs are limited to 48 h\n4242;gpu-cluster\n",
        "4242\nsbatch: job of the lab-a account\n",
    ],
)
def test_sbatch_job_id_among_other_lines(printed: str) -> None:
    assert Printed({"sbatch": printed}).sbatch([], "batch.sh", {}) == 4242


def test_sbatch_output_without_a_job_id_is_an_unread_submission() -> None:
    with pytest.raises(SbatchUnreadError, match=r"sbatch printed .* not a job id"):
        Printed({"sbatch": "Submitted.\n"}).sbatch([], "batch.sh", {})
    assert issubclass(SbatchUnreadError, SlurmError)  # caught as before by SlurmError's


class NamedJob(Printed):
    """:class:`Printed` whose ``squeue -n NAME`` lists job 7 (Slurm took the job)."""

    def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
    ) -> str:
        if argv[0] == "squeue" and "-n" in argv:
            self.asked.append("squeue -n")
            return "7\n"
        return super().run(argv, env=env, stdin=stdin)


def test_a_submission_sbatch_printed_no_id_for_is_kept_and_tracked(tmp_path: Path) -> None:
    commands = NamedJob({"scontrol show node": NODE + "\n", "sbatch": "Submitted.\n"})
    commands.squeue("RUNNING")
    ex = fake_executor(commands, tmp_path / "state", Clock())
    handle = ex.submit(launch("unread-1", "pass"))
    record = supervise.read_json(tmp_path / "state" / "runs" / "unread-1" / supervise.LAUNCH)
    assert record is not None and record.get("slurm_id") == 7
    assert ex.poll(handle).state is RunState.RUNNING
    assert commands.asked.count("sbatch") == 1 and not commands.cancels
