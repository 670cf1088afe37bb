"""``danlu sim`` flags and workload headers as users write them: a negative ``--seed``
(``random.Random`` seeds with its absolute value, so ``--seed -1`` drew ``--seed 1``'s
workload under another name), an ``--option`` given twice (the last silently won), an
infinite MTBF (refused as if it were not above 0), a policy named in capitals, and a plain
CSV whose header names its columns in another case (``Name``: refused; an optional
``Project``: ignored, every job in project ``default``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from danlu.cli.main import app
from danlu.core.errors import ConfigError
from danlu.sim.workload import load_workload, synthetic_workload


def squash(text: str) -> str:
    """Output without whitespace: Rich wraps long lines at the terminal width."""
    return "".join(text.split())


def invoke(args: list[str]) -> tuple[int, str]:
    result = CliRunner().invoke(app, args)
    return result.exit_code, result.output


def test_a_negative_seed_is_refused_naming_the_flag() -> None:
    code, output = invoke(["sim", "run", "--quiet", "--jobs", "5", "--seed", "-1"])
    assert code == 2, output
    assert "Traceback" not in output
    flat = squash(output)
    assert "--seed:-1isoutofrange" in flat and "0ormore" in flat


def test_a_negative_seed_is_refused_by_the_library_too() -> None:
    """-1 and 1 drew the same jobs; a sweep over -5..5 ran each workload twice."""
    with pytest.raises(ConfigError, match=r"seed \(--seed\) must be a whole number of 0 or more"):
        synthetic_workload(jobs=5, seed=-1)
    assert synthetic_workload(jobs=5, seed=0).jobs != synthetic_workload(jobs=5, seed=1).jobs


def test_an_option_given_twice_is_refused() -> None:
    code, output = invoke(
        [
            "sim",
            "run",
            "--quiet",
            "--jobs",
            "5",
            "--policy",
            "tiresias",
            "--option",
            "starvation_factor=2",
            "--option",
            "starvation-factor=3",
        ]
    )
    assert code == 2, output
    assert "Traceback" not in output
    flat = squash(output)
    assert "--optionnames'starvation_factor'morethanonce" in flat
    assert "starvation_factor=2andstarvation-factor=3" in flat


def test_distinct_options_are_all_kept() -> None:
    from danlu.cli.sim_flags import parse_options

    assert parse_options(["placement=best-fit", "thresholds=[3600, 36000]"]) == {
        "placement": "best-fit",
        "thresholds": (3600, 36000),
    }


@pytest.mark.parametrize("flag", ["--node-mtbf", "--gpu-mtbf"])
def test_an_infinite_mtbf_is_said_to_be_infinite(flag: str) -> None:
    code, output = invoke(["sim", "run", "--quiet", "--jobs", "5", flag, "inf"])
    assert code == 2, output
    flat = squash(output)
    assert f"{flag}mustbeadurationabove0andfinite" in flat and "got'inf'" in flat


def test_a_policy_in_capitals_gets_its_name_as_the_hint() -> None:
    code, output = invoke(["sim", "compare", "--quiet", "--jobs", "5", "--policies", "FIFO"])
    assert code == 2, output
    assert "didyoumeanfifo?" in squash(output)


def test_a_header_in_another_case_is_read(tmp_path: Path) -> None:
    """``Name,Submit_Time,GPUs,Duration`` was an unrecognised header, and an optional
    column in capitals (``Project``) was dropped: both jobs ran in project ``default``."""
    path = tmp_path / "jobs.csv"
    path.write_text(
        "Name, Submit_Time ,GPUs,Duration,Project,Priority\r\n"
        "j1,0,1,100,vision,2\r\n"
        "j2,10,2,50,,\r\n"
    )
    workload = load_workload(path)
    assert workload.format == "danlu"
    assert [(j.request.id, j.request.gpus) for j in workload.jobs] == [("j1", 1), ("j2", 2)]
    assert [j.request.project for j in workload.jobs] == ["vision", "default"]
    assert [j.request.priority for j in workload.jobs] == [2, 0]


def test_a_header_in_capitals_reaches_the_quota_flag(tmp_path: Path) -> None:
    path = tmp_path / "jobs.csv"
    path.write_text("NAME,SUBMIT_TIME,GPUS,DURATION,PROJECT\nj1,0,1,100,vision\n")
    code, output = invoke(["sim", "run", "--quiet", "--workload", str(path), "--quota", "vision=1"])
    assert code == 0, output


def test_a_column_beside_its_lower_case_twin_is_kept_apart(tmp_path: Path) -> None:
    """A header with ``name`` and ``Name`` was read before (``Name`` an extra column); it
    still is, not refused as a column given twice."""
    path = tmp_path / "jobs.csv"
    path.write_text("name,Name,submit_time,gpus,duration\nj1,label,0,1,100\n")
    workload = load_workload(path)
    assert [j.request.id for j in workload.jobs] == ["j1"]


@pytest.mark.parametrize(("separator", "called"), [("\t", "tabs"), (";", "semicolons")])
def test_a_file_of_another_separator_is_said_to_be_one(
    tmp_path: Path, separator: str, called: str
) -> None:
    """A spreadsheet's tab- or semicolon-separated export was refused as unrecognised
    columns only, the one column shown holding every name."""
    path = tmp_path / "jobs.csv"
    columns = ["name", "submit_time", "gpus", "duration"]
    path.write_text(separator.join(columns) + "\n" + separator.join(["j1", "0", "1", "10"]) + "\n")
    code, output = invoke(["sim", "run", "--quiet", "--workload", str(path)])
    assert code == 2, output
    assert f"thelineholdsnocommabut{called}" in squash(output)
    assert "comma-separatedCSV" in squash(output)


def test_a_plot_without_matplotlib_is_refused_before_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without matplotlib, ``--plot`` ended the finished run in a ModuleNotFoundError
    traceback (the JSON written, the plot not)."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # an import of it fails
    out = tmp_path / "out.json"
    code, output = invoke(
        [
            "sim",
            "run",
            "--quiet",
            "--jobs",
            "5",
            "--plot",
            str(tmp_path / "t.png"),
            "--json",
            str(out),
        ]
    )
    assert code == 2, output
    assert "Traceback" not in output
    flat = squash(output)
    assert "--plotneedsmatplotlib" in flat and "pipinstallmatplotlib" in flat
    assert not out.exists()  # refused before the simulation, not after it
