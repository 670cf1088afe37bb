"""A plain (``danlu`` format) workload written by hand, as the README describes it:

- a column misspelled (``projct``, ``timelimit``) was ignored, every job then in project
  ``default`` or without a limit, and the results looked as if it had been read: it is
  refused naming the column it looks like; a column it does not read at all (``notes``)
  is kept in ``Workload.unread_columns`` and ``danlu sim`` says so in a note;
- a header lacking a required column listed every format's columns, leaving the user to
  find which one was missing: it names the nearest format and what it lacks;
- a time written as a duration (``3h``, as a spec's ``time_limit`` may be) was told it
  must be a number: it is told the seconds to write;
- a negative ``time_limit`` was told ``must be >= 0``, and then 0 was refused as not above
  0: both are told the same rule.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from danlu.cli.main import app
from danlu.core.errors import DataError
from danlu.sim.workload import load_workload


def _write(tmp_path: Path, header: str, *rows: str) -> Path:
    path = tmp_path / "mine.csv"
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


@pytest.mark.parametrize(
    ("column", "meant"),
    [
        ("projct", "project"),
        ("timelimit", "time_limit"),
        ("gpu_mem", "gpu_memory"),
        ("usr", "user"),
    ],
)
def test_a_misspelled_column_is_refused_naming_the_one_it_looks_like(
    tmp_path: Path, column: str, meant: str
) -> None:
    path = _write(tmp_path, f"name,submit_time,gpus,duration,{column}", "a,0,1,100,x")
    with pytest.raises(DataError) as caught:
        load_workload(path)
    said = str(caught.value)
    assert f"{path}, line 1: column {column!r}" in said
    assert f"did you mean {meant!r}?" in said


def test_a_column_the_header_has_right_is_no_typo_of_it(tmp_path: Path) -> None:
    """``projects`` beside ``project`` is another column, not a misspelling of it."""
    path = _write(tmp_path, "name,submit_time,gpus,duration,project,projects", "a,0,1,100,nlp,x")
    workload = load_workload(path)
    assert workload.jobs[0].request.project == "nlp"
    assert workload.unread_columns == ("projects",)


def test_a_column_not_read_is_named_in_a_note(tmp_path: Path) -> None:
    path = _write(tmp_path, "name,submit_time,gpus,duration,notes,owner", "a,0,1,100,hi,me")
    assert load_workload(path).unread_columns == ("notes", "owner")
    result = CliRunner().invoke(app, ["sim", "run", "--quiet", "--workload", str(path)])
    assert result.exit_code == 0, result.output
    said = " ".join(result.stdout.split())
    assert "column(s) 'notes', 'owner' not read" in said
    assert "project, time_limit and user" in said
    # a file with only the columns it reads gets no note
    plain = _write(tmp_path, "name,submit_time,gpus,duration,project", "a,0,1,100,nlp")
    result = CliRunner().invoke(app, ["sim", "run", "--quiet", "--workload", str(plain)])
    assert result.exit_code == 0, result.output
    assert "not read" not in result.stdout


def test_a_header_lacking_a_column_names_the_nearest_format_and_what_it_lacks(
    tmp_path: Path,
) -> None:
    path = _write(tmp_path, "name,submit_time,duration,project", "a,0,100,nlp")
    with pytest.raises(DataError, match="unrecognised workload columns") as caught:
        load_workload(path)
    assert "nearest: the danlu format, which also needs gpus" in str(caught.value)
    result = CliRunner().invoke(app, ["sim", "run", "--quiet", "--workload", str(path)])
    assert result.exit_code == 2
    assert "which also needs gpus" in " ".join(result.stderr.split())


@pytest.mark.parametrize(
    ("column", "row", "seconds"),
    [
        ("time_limit", "a,0,1,100,3h", "10800"),
        ("time_limit", "a,0,1,100,1h30m", "5400"),
        ("duration", "a,0,1,04:00:00,", "14400"),
        ("submit_time", "a,2m,1,100,", "120"),
    ],
)
def test_a_time_written_as_a_duration_is_told_the_seconds_to_write(
    tmp_path: Path, column: str, row: str, seconds: str
) -> None:
    path = _write(tmp_path, "name,submit_time,gpus,duration,time_limit", row)
    with pytest.raises(DataError) as caught:
        load_workload(path)
    said = str(caught.value)
    assert f"{path}:2: column {column!r} is seconds" in said
    assert said.endswith(f"write {seconds}")


@pytest.mark.parametrize("limit", ["-5", "0", "-0.5"])
def test_a_time_limit_not_above_zero_is_told_one_rule(tmp_path: Path, limit: str) -> None:
    path = _write(tmp_path, "name,submit_time,gpus,duration,time_limit", f"a,0,1,100,{limit}")
    with pytest.raises(DataError) as caught:
        load_workload(path)
    said = str(caught.value)
    assert f"column 'time_limit' must be above 0 seconds, got {limit!r}" in said
    assert "leave it empty for no limit" in said
