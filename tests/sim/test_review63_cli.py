"""``danlu sim``'s and ``danlu estimate``'s inputs that used to crash, hang or pass unchecked:
names printed as Rich markup, bad failure seeds, plot formats, flag names in errors, caps,
failures too frequent for any progress, repeated seeds and columns, impossible targets,
and a model factory that needs arguments."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from danlu.cli.main import app
from danlu.core.errors import ConfigError
from danlu.sim.plan import parse_target

SRC = Path(__file__).resolve().parents[2] / "src"
RIGID = "name,submit_time,gpus,duration"


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def squash(text: str) -> str:
    """Output without whitespace: Rich wraps long lines at the terminal width."""
    return "".join(text.split())


def csv_file(path: Path, *rows: str, header: str = RIGID) -> Path:
    path.write_text("\n".join((header, *rows)) + "\n")
    return path


# -- 1. names from the workload are text, not Rich markup ------------------------------------


def test_a_project_named_like_a_closing_tag_is_printed(runner: CliRunner, tmp_path: Path) -> None:
    rows = ("j1,0,1,100,[/x]", "j2,0,1,100,team[b]")
    workload = csv_file(tmp_path / "proj.csv", *rows, header=RIGID + ",project")
    result = runner.invoke(app, ["sim", "run", "--quiet", "--workload", str(workload)])
    assert result.exit_code == 0, result.output
    assert "[/x]" in result.output and "team[b]" in result.output


def test_a_rejected_job_named_like_a_closing_tag_is_printed(
    runner: CliRunner, tmp_path: Path
) -> None:
    workload = csv_file(tmp_path / "rej.csv", "[/oops],0,999,100")
    result = runner.invoke(app, ["sim", "run", "--quiet", "--workload", str(workload)])
    assert result.exit_code == 0, result.output
    assert "[/oops]: asks for 999 GPUs" in result.output


def test_titles_keep_brackets_of_file_names(runner: CliRunner, tmp_path: Path) -> None:
    workload = csv_file(tmp_path / "w[b]x.csv", "j1,0,1,100", "j2,0,1,100")
    out = tmp_path / "o[i].json"
    commands = (
        ["run", "--json", str(out)],
        ["compare", "--policies", "fifo"],
        ["plan", "--target", "avg_jct<=1h", "--max-nodes", "1"],
    )
    for command in commands:
        result = runner.invoke(app, ["sim", *command, "--workload", str(workload)])
        assert result.exit_code == 0, result.output
        assert "w[b]x: 2 jobs" in result.output
        if command[0] == "run":
            assert f"wrote{squash(str(out))}" in squash(result.output)


def test_pack_title_keeps_brackets_of_file_names(runner: CliRunner, tmp_path: Path) -> None:
    pods = csv_file(
        tmp_path / "p[b].csv",
        "p1,1000,1024,1,1000,0,100,",
        header="name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time,gpu_spec",
    )
    nodes = csv_file(
        tmp_path / "n[i].csv",
        "n1,64000,262144,8,V100M16",
        header="sn,cpu_milli,memory_mib,gpu,model",
    )
    args = ["sim", "pack", "--pods", str(pods), "--nodes", str(nodes), "--seeds", "1"]
    result = runner.invoke(app, [*args, "--load", "0.5"])
    assert result.exit_code == 0, result.output
    assert "p[b].csvonn[i].csv" in squash(result.output)


# -- 2., 3., 6., 7., 8. flags refused up front, naming the flag -------------------------------


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--node-mtbf", "1d", "--failure-seed", "-1"], "--failure-seed"),
        (["--gpu-mtbf", "1d", "--failure-seed", "-1"], "--failure-seed"),
        (["--interval", "0"], "--interval"),
        (["--restart-cost", "-1"], "--restart-cost"),
        (["--gpus-per-node", "100000000"], "--gpus-per-node"),
        (["--nodes", "100000000"], "--nodes"),
    ],
)
def test_sim_run_refuses_bad_flags_naming_them(
    runner: CliRunner, tmp_path: Path, extra: list[str], needle: str
) -> None:
    result = runner.invoke(app, ["sim", "run", "--quiet", "--jobs", "3", *extra])
    assert result.exit_code == 2, result.output
    assert needle in result.output


def test_sim_run_checks_the_plot_format_before_simulating(
    runner: CliRunner, tmp_path: Path
) -> None:
    for name in ("t.txt", "t"):
        args = ["sim", "run", "--quiet", "--jobs", "3", "--plot", str(tmp_path / name)]
        result = runner.invoke(app, args)
        assert result.exit_code == 2, result.output
        assert "--plot" in result.output and "simulated in" not in result.output
    plot = tmp_path / "t.svg"
    result = runner.invoke(app, ["sim", "run", "--quiet", "--jobs", "3", "--plot", str(plot)])
    assert result.exit_code == 0, result.output
    assert plot.read_text().lstrip().startswith("<?xml")


def test_gpu_mtbf_help_gives_an_accepted_example(runner: CliRunner) -> None:
    result = runner.invoke(app, ["sim", "run", "--help"], terminal_width=200)
    assert "1y)" not in result.output and "365d" in result.output
    accepted = runner.invoke(app, ["sim", "run", "--quiet", "--jobs", "3", "--gpu-mtbf", "365d"])
    assert accepted.exit_code == 0, accepted.output


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--load", "1e9"], "--load"),
        (["--seeds", "1,1"], "--seeds"),
        (["--seeds", "1-3,2"], "--seeds"),
    ],
)
def test_sim_pack_refuses_huge_loads_and_repeated_seeds(
    runner: CliRunner, tmp_path: Path, extra: list[str], needle: str
) -> None:
    args = ["sim", "pack", "--pods", str(tmp_path / "p.csv"), "--nodes", str(tmp_path / "n.csv")]
    result = runner.invoke(app, [*args, *extra])
    assert result.exit_code == 2, result.output
    assert needle in result.output and "does not exist" not in result.output


def test_a_workload_with_a_repeated_column_is_refused(runner: CliRunner, tmp_path: Path) -> None:
    workload = csv_file(tmp_path / "dup.csv", "a,b,0,1,100", header="name," + RIGID)
    result = runner.invoke(app, ["sim", "run", "--quiet", "--workload", str(workload)])
    assert result.exit_code == 2, result.output
    assert "'name'" in result.output and "more than once" in result.output


@pytest.mark.parametrize("text", ["gpu_utilization>=2", "makespan<=-1", "fragmentation>=1.5"])
def test_impossible_plan_targets_are_refused(text: str) -> None:
    with pytest.raises(ConfigError, match="no cluster meets it"):
        parse_target(text)
    assert parse_target("gpu_utilization>=1").bound == 1  # the edges are possible
    assert parse_target("makespan<=0").bound == 0


# -- 5. failures too frequent for any progress end the run ------------------------------------


@pytest.mark.parametrize(
    "flags",
    [["--node-mtbf", "1s"], ["--node-mtbf", "1m", "--node-repair", "1s"], ["--gpu-mtbf", "1s"]],
)
def test_failures_too_frequent_for_progress_end_with_an_error(
    tmp_path: Path, flags: list[str]
) -> None:
    workload = csv_file(tmp_path / "one.csv", "j1,0,1,7200", "j2,0,2,7200")
    command = [sys.executable, "-m", "danlu", "sim", "run", "--quiet", "--nodes", "1"]
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run(
        [*command, "--workload", str(workload), *flags],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    message = squash(done.stderr)
    assert "fail too often" in " ".join(done.stderr.split()) and "--node-mtbf" in message


# -- 8. a model factory that needs arguments ------------------------------------------------


def test_a_factory_needing_arguments_is_a_one_line_spec_error() -> None:
    pytest.importorskip("torch")
    from danlu.core.errors import SpecError
    from danlu.estimate.memory.steps import build

    def withargs(x: int) -> int:
        return x

    with pytest.raises(SpecError, match="mods:withargs must be callable without arguments"):
        build(withargs, "mods:withargs")
