"""A Slurm run's job, looked up by the id in its launch record, is checked to be the job of
the run's name (``danlu.JOB_ID.ATTEMPT``), as the look-ups by name are: ``squeue -j ID``
lists any job of that id, and a job Slurm forgot leaves its id to a later job (or the run's
job rewrote its record with another's id). That other job was taken for the run: polled as
its state, preempted and cancelled with ``scancel ID``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from slurm_fakes import START, Printed, started_run

from danlu.executors import RunState, supervise


def test_an_id_slurm_lists_under_another_name_is_not_the_runs_job(tmp_path: Path) -> None:
    commands, _clock, ex, handle = started_run(tmp_path)
    # Slurm forgot the run's job 7 (none named danlu.held-1.0), and job 7 is another's now
    commands.printed["squeue"] = f"7|RUNNING|{START}|someone-else|None\n"
    status = ex.poll(handle)
    assert status.state is RunState.EXITED
    assert "Slurm no longer knows job 7" in status.message
    ex.cancel(handle)
    assert commands.cancels == []  # the other job is not touched


class ByName(Printed):
    """:class:`Printed`, whose ``squeue -n NAME`` prints ``named[NAME]``."""

    def __init__(self, printed: Mapping[str, str], named: Mapping[str, str]) -> None:
        super().__init__(printed)
        self.named = dict(named)

    def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
    ) -> str:
        if argv[0] == "squeue" and "-n" in argv:
            return self.named.get(argv[argv.index("-n") + 1], "")
        return super().run(argv, env=env, stdin=stdin)


def test_a_foreign_id_in_the_launch_record_is_neither_polled_nor_cancelled(
    tmp_path: Path,
) -> None:
    commands, _clock, ex, handle = started_run(tmp_path)
    by_name = ByName(commands.printed, {"danlu.held-1.0": "7\n"})
    ex._commands = by_name
    run_dir = ex._runs / handle.job_id
    record = supervise.read_json(run_dir / supervise.LAUNCH)
    assert isinstance(record, dict) and record["slurm_id"] == 7
    record["slurm_id"] = 5  # the job rewrote its record: 5 is another user's job
    supervise.write_json(run_dir / supervise.LAUNCH, record)
    by_name.printed["squeue"] = (
        f"5|RUNNING|{START}|their-job|None\n7|RUNNING|{START}|danlu.held-1.0|None\n"
    )
    assert ex.poll(handle).state is RunState.RUNNING
    ex.cancel(handle)
    assert by_name.cancels == [["scancel", "--signal=TERM", "7"]]
    # the run's own id is recorded again
    again = supervise.read_json(run_dir / supervise.LAUNCH)
    assert isinstance(again, dict) and again["slurm_id"] == 7


def test_squeue_by_id_reads_each_jobs_name() -> None:
    commands = Printed(
        {
            "squeue": (
                f"12|RUNNING|{START}|danlu.a.0|None\n"
                "13|PENDING|N/A|danlu.b.2|ReqNodeNotAvail, UnavailableNodes:n1\n"
            )
        }
    )
    jobs = commands.jobs([12, 13])
    assert (jobs[12].name, jobs[12].reason) == ("danlu.a.0", "None")
    assert (jobs[13].name, jobs[13].state) == ("danlu.b.2", "PENDING")
    assert jobs[13].reason == "ReqNodeNotAvail, UnavailableNodes:n1"
