"""``danlu sim``'s outputs and flag checks: strict JSON when no job finished, a policy
named twice, quotas and shares naming no project or user of the workload, and counts in
``sim plan``'s table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from danlu.cli import sim as sim_cli
from danlu.cli.main import app


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def squash(text: str) -> str:
    """Output without whitespace: Rich wraps long lines at the terminal width."""
    return "".join(text.split())


def strict_json(path: Path) -> Any:
    """The file's JSON, refusing NaN and infinities (which other tools cannot read)."""

    def refuse(constant: str) -> None:
        raise AssertionError(f"{path.name} holds {constant}, which is not JSON")

    return json.loads(path.read_text(), parse_constant=refuse)


@pytest.fixture
def too_wide(tmp_path: Path) -> Path:
    """A workload whose every job asks for more GPUs than a 1-node cluster has."""
    path = tmp_path / "wide.csv"
    path.write_text("name,submit_time,gpus,duration\na,0,8,600\nb,0,8,600\n")
    return path


def test_json_has_null_where_no_job_finished(
    runner: CliRunner, tmp_path: Path, too_wide: Path
) -> None:
    out = tmp_path / "run.json"
    base = ["--workload", str(too_wide), "--nodes", "1", "--quiet"]
    result = runner.invoke(app, ["sim", "run", *base, "--json", str(out)])
    assert result.exit_code == 0, result.output
    data = strict_json(out)
    assert data["jobs"] == 0 and len(data["rejected"]) == 2
    assert data["avg_jct"] is None and data["p99_queueing_delay"] is None
    assert data["makespan"] == 0.0
    assert "│averageJCT(s)│-│" in squash(result.output)  # the table shows a dash
    out = tmp_path / "compare.json"
    result = runner.invoke(
        app, ["sim", "compare", *base, "--policies", "fifo,sjf", "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    by_policy = strict_json(out)
    assert [p["median_jct"] for p in by_policy.values()] == [None, None]


def test_plan_json_has_null_for_a_size_where_no_job_fits(
    runner: CliRunner, tmp_path: Path, too_wide: Path
) -> None:
    out = tmp_path / "plan.json"
    args = ["sim", "plan", "--workload", str(too_wide), "--target", "avg_jct<=1h",
            "--max-nodes", "4", "--json", str(out)]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    plan = strict_json(out)
    one = plan["tried"][0]
    assert one["nodes"] == 1 and one["missed"] == ["2 job(s) never fit"]
    assert one["avg_jct"] is None and one["gpu_utilization"] == 0.0
    assert plan["nodes"] == 2 and isinstance(plan["tried"][-1]["avg_jct"], float)


def test_compare_refuses_a_policy_named_twice(runner: CliRunner, tmp_path: Path) -> None:
    out = tmp_path / "compare.json"
    args = ["sim", "compare", "--jobs", "5", "--policies", "fifo,sjf, fifo", "--quiet"]
    result = runner.invoke(app, [*args, "--json", str(out)])
    assert result.exit_code == 2
    assert "--policies" in result.output and "'fifo' is named twice" in result.output
    assert not out.exists()
    result = runner.invoke(app, ["sim", "compare", "--jobs", "5", "--policies", ",", "--quiet"])
    assert result.exit_code == 2 and "--policies is empty" in result.output


@pytest.fixture
def teams(tmp_path: Path) -> Path:
    path = tmp_path / "teams.csv"
    rows = ["name,submit_time,gpus,duration,project,user"]
    rows += ["a0,0,1,600,vision,ana", "a1,0,1,600,vision,ana", "b0,0,1,600,nlp,bo"]
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.mark.parametrize("command", ["run", "compare", "plan"])
@pytest.mark.parametrize(
    ("flag", "pair", "known"),
    [
        ("--quota", "vison=1", "its projects: nlp, vision"),
        ("--user-quota", "anna=1", "its users: ana, bo"),
        ("--project-share", "vison=2", "its projects: nlp, vision"),
    ],
)
def test_quotas_and_shares_must_name_a_project_or_user_of_the_workload(
    runner: CliRunner, teams: Path, command: str, flag: str, pair: str, known: str
) -> None:
    """A name no job has would change nothing (a typo, most likely): an error naming the
    flag, the name and the workload's names, before anything is simulated."""
    args = ["sim", command, "--workload", str(teams), "--nodes" if command != "plan" else
            "--max-nodes", "1"]  # fmt: skip
    args += ["--target", "avg_jct<=1h"] if command == "plan" else ["--quiet"]
    result = runner.invoke(app, [*args, flag, pair])
    assert result.exit_code == 2, result.output
    name = pair.split("=")[0]
    assert f"{flag}: no job of workload 'teams' has" in result.output
    assert f"'{name}'" in result.output and squash(known) in squash(result.output)
    good = pair.replace(name, "vision" if "project" in known else "ana")
    result = runner.invoke(app, [*args, flag, good])
    assert result.exit_code == 0, result.output


def test_user_quota_on_a_workload_without_users(runner: CliRunner) -> None:
    result = runner.invoke(app, ["sim", "run", "--jobs", "5", "--user-quota", "ana=2", "--quiet"])
    assert result.exit_code == 2
    assert "--user-quota" in result.output and "it has no users" in result.output
    result = runner.invoke(app, ["sim", "run", "--jobs", "5", "--quota", "default=2", "--quiet"])
    assert result.exit_code == 0, result.output


def _column(output: str, header: str) -> list[str]:
    """The cells of a Rich table's column, by its header (a table too wide to wrap)."""
    lines = output.splitlines()
    heads = next(line for line in lines if header in line and "┃" in line)
    index = [cell.strip() for cell in heads.split("┃")].index(header)
    return [line.split("│")[index].strip() for line in lines if line.startswith("│")]


def test_plan_table_writes_counts_as_counts(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sim_cli, "console", Console(width=250))
    args = ["sim", "plan", "--jobs", "40", "--policy", "tiresias", "--target", "preemptions<=2",
            "--target", "max_job_restarts<=1", "--max-nodes", "8"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code in (0, 1), result.output
    for header in ("preemptions", "max_job_restarts"):
        cells = _column(result.output, header)
        assert cells and all(cell.replace(",", "").isdigit() for cell in cells), cells
    assert all("." in cell for cell in _column(result.output, "GPU util"))  # ratios stay


@pytest.mark.parametrize("command", [["run"], ["compare", "--policies", "fifo,sjf"]])
def test_an_output_named_dash_is_refused_before_any_work(
    runner: CliRunner,
    tmp_path: Path,
    too_wide: Path,
    monkeypatch: pytest.MonkeyPatch,
    command: list[str],
) -> None:
    """``--json -`` is no standard output here (the tables are printed there): it wrote a
    file named ``-`` in the working folder; refused, naming the flag and the fix."""
    monkeypatch.chdir(tmp_path)
    base = ["--workload", str(too_wide), "--nodes", "1", "--quiet"]
    result = runner.invoke(app, ["sim", *command, *base, "--json", "-"])
    assert result.exit_code == 2, result.output
    assert "--json -: give a file name" in " ".join(result.output.split())
    assert not (tmp_path / "-").exists()
