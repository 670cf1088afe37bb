"""``danlu run``'s pieces without a server: the job name from the command, ``--env``, the
spec it submits and the exit code it gives (the whole command against a real server is in
``tests/server/test_run_command.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from danlu.cli.run import FAILED_WITHOUT_CODE, environment, exit_code, job_name, run_body
from danlu.core.errors import SpecError


def test_the_job_is_named_after_its_program() -> None:
    assert job_name(["/usr/bin/python3", "train.py"]) == "python3"
    assert job_name(["./my script!.sh"]) == "my-script-.sh"
    assert job_name(["..."]) == "run" and job_name([]) == "run"
    assert len(job_name(["x" * 200])) == 63


def test_env_takes_values_or_names_from_here() -> None:
    here = {"HF_HOME": "/data/hf", "EMPTY": ""}
    assert environment(["A=1", "B=x=y", "HF_HOME", "EMPTY"], here) == {
        "A": "1",
        "B": "x=y",
        "HF_HOME": "/data/hf",
        "EMPTY": "",
    }
    with pytest.raises(SpecError, match="not set here") as raised:
        environment(["MISSING"], here)
    assert raised.value.field == "env.MISSING"
    with pytest.raises(SpecError, match="NAME=VALUE"):
        environment(["=1"], here)


def test_the_spec_starts_in_the_directory_given(tmp_path: Path) -> None:
    body = run_body(
        ["python", "train.py", "--lr", "0.1"],
        name=None,
        workdir=tmp_path,
        env={"SEED": "1"},
        options={
            "resources.gpus": "1..4",
            "time_limit": "90m",
            "priority": None,
            "max_restarts": 0,
        },
    )
    assert body == {
        "name": "python",
        "command": ["python", "train.py", "--lr", "0.1"],
        "workdir": str(tmp_path),
        "env": {"SEED": "1"},
        "resources": {"gpus": {"min": 1, "max": 4}},
        "time_limit": 5400.0,
        "max_restarts": 0,
    }
    relative = run_body(["true"], name="t", workdir=Path("sub"), env={}, options={})
    assert relative["workdir"] == str(Path.cwd() / "sub")
    with pytest.raises(SpecError, match="after --") as raised:
        run_body([], name=None, workdir=tmp_path, env={}, options={})
    assert raised.value.field == "command"
    with pytest.raises(SpecError) as raised:
        run_body(["true"], name=None, workdir=tmp_path, env={}, options={"resources.gpus": "x"})
    assert raised.value.field == "resources.gpus"


def test_the_exit_code_is_the_jobs() -> None:
    assert exit_code({"state": "SUCCEEDED", "exit_code": 0}) == 0
    assert exit_code({"state": "FAILED", "exit_code": 3}) == 3
    for job in (
        {"state": "FAILED", "exit_code": None},  # killed by a signal
        {"state": "CANCELLED", "exit_code": -15},
        {"state": "FAILED", "exit_code": 0},  # failed launch
    ):
        assert exit_code(job) == FAILED_WITHOUT_CODE


def test_a_command_a_signal_ended_exits_128_plus_the_signal() -> None:
    """As a shell and ``srun`` give (the job's code is the supervisor's 128 + N), and as the
    README says (it said 1 before, while the code gave 143 after a time limit)."""
    assert exit_code({"state": "CANCELLED", "exit_code": 143}) == 143  # the time limit's TERM
    assert exit_code({"state": "FAILED", "exit_code": 137}) == 137  # SIGKILL
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    said = readme[readme.index("`danlu run [--gpus N]") :]
    said = said[: said.index("`checkpoint_dir`")]
    assert "128 + N when signal N ended the command" in said and "143" in said


def test_a_danlu_train_script_at_its_time_limit_exits_75() -> None:
    """A ``danlu.train`` script checkpoints on the time limit's SIGTERM and exits 75: the
    job ends CANCELLED with that code, which ``danlu run`` gives, as the README says beside
    the 143 of a command that does not catch the SIGTERM."""
    assert exit_code({"state": "CANCELLED", "exit_code": 75}) == 75
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    said = readme[readme.index("`danlu run [--gpus N]") :]
    said = said[: said.index("`checkpoint_dir`")]
    assert "143 after the time limit's SIGTERM, but 75 from a `danlu.train` script" in said


def test_the_readme_names_gpu_fraction_where_it_explains_sharing() -> None:
    """``resources.gpu_fraction`` (docs/api.md) is the other way to share a GPU: the README
    says so where it explains ``gpu_memory`` sharing."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    said = readme[readme.index("`gpu_memory` below a GPU's size lets several jobs share it") :]
    assert "`resources.gpu_fraction`" in said[: said.index("`gpu_memory: auto`")]
