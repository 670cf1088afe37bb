"""A Slurm run's job, looked up by the id in its launch record, is checked to be of the
account danlu submits as, as the look-ups by name are (``squeue --user``): ``squeue -j ID``
lists any user's job of that id, and another user's job named as the run (a job Slurm forgot
leaves its id to a later job; or the run's job rewrote its record with the other's id) was
taken for the run: polled as its state, and cancelled with ``scancel ID``."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from slurm_fakes import START, Printed, started_run

from danlu.executors import RunState, supervise
from danlu.executors.slurmctl import SlurmCommands, SlurmJob

RUN = "danlu.held-1.0"
"""The Slurm job name of the run :func:`started_run` starts."""


Job = tuple[str, str, str, str]
"""A job ``squeue -j`` lists: its id, uid, user name and job name (running since START)."""


class Squeue(Printed):
    """:class:`Printed`, whose ``squeue -j IDS`` lists those of ``jobs`` it asks for, in the
    fields its ``-o`` names, as Slurm's does, and whose ``squeue -n NAME`` (danlu's
    account's jobs only) prints ``named[NAME]``."""

    def __init__(
        self, printed: Mapping[str, str], jobs: Sequence[Job], named: Mapping[str, str]
    ) -> None:
        super().__init__(printed)
        self.listed = list(jobs)
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
        if argv[0] == "squeue" and "-j" in argv:
            form, ids = argv[argv.index("-o") + 1], argv[argv.index("-j") + 1].split(",")
            fields = {"%T": "RUNNING", "%S": START, "%r": "None"}
            out = ""
            for job_id, uid, user, name in self.listed:
                if job_id in ids:
                    line = form
                    given = {**fields, "%i": job_id, "%U": uid, "%u": user, "%j": name}
                    for key, value in given.items():
                        line = line.replace(key, value)
                    out += line + "\n"
            return out
        return super().run(argv, env=env, stdin=stdin)


def test_squeue_by_id_reads_each_jobs_user() -> None:
    commands = Printed(
        {
            "squeue": (
                f"12|RUNNING|{START}|4242|mallory|danlu.a.0|None\n"
                "13|PENDING|N/A|1000|danlu|danlu.b.2|ReqNodeNotAvail, UnavailableNodes:n1\n"
            )
        }
    )
    jobs = commands.jobs([12, 13])
    assert (jobs[12].uid, jobs[12].user, jobs[12].name) == ("4242", "mallory", "danlu.a.0")
    assert (jobs[13].uid, jobs[13].user, jobs[13].name) == ("1000", "danlu", "danlu.b.2")
    assert jobs[13].reason == "ReqNodeNotAvail, UnavailableNodes:n1"
    assert jobs[12].started_at is not None and jobs[13].started_at is None


def test_a_job_is_owned_when_its_user_s_name_or_id_is_danlu_s_account() -> None:
    by_name, by_id = SlurmCommands({}, user="danlu"), SlurmCommands({}, user="1000")
    ours = SlurmJob(12, "RUNNING", uid="1000", user="danlu")
    theirs = SlurmJob(13, "RUNNING", uid="4242", user="mallory")
    assert by_name.owns(ours) and by_id.owns(ours)
    assert not by_name.owns(theirs) and not by_id.owns(theirs)
    assert by_name.owns(SlurmJob(14, "RUNNING"))  # its user not read


def test_another_user_s_job_under_the_run_s_id_is_neither_polled_nor_cancelled(
    tmp_path: Path,
) -> None:
    commands, _clock, ex, handle = started_run(tmp_path)
    # Slurm forgot the run's job 7; job 7 is another user's now, named as the run
    ex._commands = fake = Squeue(commands.printed, [("7", "4242", "mallory", RUN)], {})
    status = ex.poll(handle)
    assert status.state is RunState.EXITED
    assert "Slurm no longer knows job 7" in status.message
    ex.cancel(handle)
    assert fake.cancels == []  # the other user's job is not touched


def test_the_run_s_own_job_is_found_by_name_past_another_user_s_id(tmp_path: Path) -> None:
    commands, _clock, ex, handle = started_run(tmp_path)
    jobs = [("5", "4242", "mallory", RUN), ("7", str(os.getuid()), "danlu", RUN)]
    ex._commands = fake = Squeue(commands.printed, jobs, {RUN: "7\n"})
    run_dir = ex._runs / handle.job_id
    record = supervise.read_json(run_dir / supervise.LAUNCH)
    assert isinstance(record, dict) and record["slurm_id"] == 7
    record["slurm_id"] = 5  # the job rewrote its record: 5 is another user's job
    supervise.write_json(run_dir / supervise.LAUNCH, record)
    assert ex.poll(handle).state is RunState.RUNNING
    ex.cancel(handle)
    assert fake.cancels == [["scancel", "--signal=TERM", "7"]]
    again = supervise.read_json(run_dir / supervise.LAUNCH)
    assert isinstance(again, dict) and again["slurm_id"] == 7
