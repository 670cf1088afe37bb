"""A Slurm job looked up in full (``scontrol show job ID``: its exit code and times, its nodes)
is read with its user (``UserId=name(uid)``) and checked to be the run's, by name and by user,
as the ``squeue`` look-ups are: ``scontrol`` shows any user's job of that id, and the job
read was taken for the run's whatever its user (``owns`` took a job whose user was not read
as danlu's). A job Slurm forgot leaves its id to a later job of any user: the run ended with
that job's exit code, and a run without a readable launch record held that job's nodes."""

from __future__ import annotations

from pathlib import Path

from run_helpers import launch
from slurm_fakes import NODE, START, Clock, Printed, fake_executor, started_run

from danlu.executors import GpuSlot, Outcome, RunState, supervise
from danlu.executors.slurmctl import SlurmCommands, job_from_fields, parse_fields

NODE2 = NODE.replace("NodeName=n1 NodeAddr=127.0.0.1", "NodeName=n2 NodeAddr=127.0.0.2")
ENDED = f"StartTime={START} EndTime={START}"


def test_scontrol_s_job_is_read_with_its_user() -> None:
    line = "JobId=7 JobName=danlu.a.0 UserId=mallory(4242) GroupId=mallory(4242) JobState=RUNNING"
    job = job_from_fields(parse_fields(line))
    assert (job.user, job.uid, job.name) == ("mallory", "4242", "danlu.a.0")
    assert not SlurmCommands({}, user="danlu").owns(job)
    assert SlurmCommands({}, user="4242").owns(job) and SlurmCommands({}, user="mallory").owns(job)
    # a user Slurm cannot name on its host: its id alone
    job = job_from_fields(parse_fields("JobId=7 UserId=(null)(4242) JobState=RUNNING"))
    assert (job.user, job.uid) == (None, "4242")
    assert not SlurmCommands({}, user="danlu").owns(job)
    # no UserId printed: not read (taken as danlu's account's, as before)
    job = job_from_fields(parse_fields("JobId=7 JobState=RUNNING"))
    assert (job.user, job.uid) == (None, None)


def test_an_ended_run_s_result_is_not_read_from_another_user_s_job(tmp_path: Path) -> None:
    commands, _clock, ex, handle = started_run(tmp_path)
    commands.squeue("COMPLETED")
    # between squeue and scontrol, Slurm forgot job 7 and gave its id to another user's job
    commands.printed["scontrol show job"] = (
        "JobId=7 JobName=danlu.held-1.0 UserId=mallory(4242) JobState=FAILED "
        f"Reason=NonZeroExitCode ExitCode=3:0 {ENDED}\n"
    )
    status = ex.poll(handle)
    assert status.state is RunState.EXITED and status.exit_code is None
    assert "Slurm no longer knows job 7" in status.message
    assert status.outcome is Outcome.FAILED


def test_an_ended_run_s_result_is_not_read_from_a_job_of_another_name(tmp_path: Path) -> None:
    commands, _clock, ex, handle = started_run(tmp_path)
    commands.squeue("COMPLETED")
    commands.printed["scontrol show job"] = (
        f"JobId=7 JobName=someone-else UserId=danlu(0) JobState=FAILED ExitCode=3:0 {ENDED}\n"
    )
    status = ex.poll(handle)
    assert status.exit_code is None and "Slurm no longer knows job 7" in status.message


def test_the_run_s_own_full_job_gives_its_result(tmp_path: Path) -> None:
    commands, _clock, ex, handle = started_run(tmp_path)
    commands.squeue("COMPLETED")
    uid = commands.user
    commands.printed["scontrol show job"] = (
        f"JobId=7 JobName=danlu.held-1.0 UserId=danlu({uid}) JobState=FAILED "
        f"Reason=NonZeroExitCode ExitCode=3:0 {ENDED}\n"
    )
    status = ex.poll(handle)
    assert status.exit_code == 3 and status.outcome is Outcome.FAILED


def test_a_damaged_run_does_not_hold_the_nodes_of_another_user_s_job(tmp_path: Path) -> None:
    """The run's job (listed by ``squeue --user``) ended and was forgotten before
    ``scontrol show job`` read it: its id is another user's job on n1 now, whose nodes are
    none of the run's."""
    commands = Printed({"scontrol show node": f"{NODE}\n{NODE2}\n", "sbatch": "7\n"})
    commands.squeue("RUNNING")
    state = tmp_path / "state"
    ex = fake_executor(commands, state, Clock())
    handle = ex.submit(launch("held-1", "pass", gpus=(GpuSlot(0, 0),)))
    (ex._runs / handle.job_id / supervise.LAUNCH).unlink()
    commands.printed["squeue"] = "7|RUNNING|danlu.held-1.0\n"
    commands.printed["scontrol show job"] = (
        "JobId=7 JobName=danlu.held-1.0 UserId=mallory(4242) JobState=RUNNING Reason=None "
        "NodeList=n1\n"
    )
    commands.printed["scontrol show hostnames"] = "n1\n"
    held = fake_executor(commands, state, Clock())._unread_gpus(ex._runs / handle.job_id)
    assert held is not None and held.gpus == []
