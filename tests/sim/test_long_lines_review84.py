"""A CSV file the simulator reads with a line longer than
:data:`~danlu.sim.csv_rows.MAX_LINE_CHARS` is refused at that line, naming the flag.

``danlu sim run --workload /dev/zero`` (or ``sim pack --pods`` of any file without line
breaks) used to read the whole file as its first line: for ever, or until memory ran out.
A long line of a regular file failed only once read whole, as a CSV field limit or an
"unrecognised workload columns" error listing a million columns.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from danlu.cli.main import app
from danlu.core.errors import DataError
from danlu.sim.csv_rows import MAX_LINE_CHARS
from danlu.sim.elastic import load_profile
from danlu.sim.openb import load_nodes, load_pods
from danlu.sim.workload import RigidWork, load_workload

LONG = "a," * (MAX_LINE_CHARS // 2 + 1)  # short fields, none past csv's field limit


def test_a_workload_line_longer_than_the_bound_is_refused_at_its_line(tmp_path: Path) -> None:
    path = tmp_path / "w.csv"
    path.write_text("name,submit_time,gpus,duration\nj1,0,1,60\n" + LONG + "\n")
    with pytest.raises(DataError) as caught:
        load_workload(path)
    message = str(caught.value)
    assert f"{path}:3:" in message
    assert "--workload" in message and f"{MAX_LINE_CHARS:,} characters" in message


def test_a_header_without_line_breaks_is_refused_naming_the_workload(tmp_path: Path) -> None:
    path = tmp_path / "w.csv"
    path.write_text("x" * (3 * MAX_LINE_CHARS))  # one field, past csv's field limit
    with pytest.raises(DataError, match=r":1: a line longer than .*--workload"):
        load_workload(path)


def test_a_line_of_exactly_the_bound_is_read(tmp_path: Path) -> None:
    """The bound counts the line's characters, not its line break (CRLF or LF); empty
    fields beyond the header (a spreadsheet's trailing commas) fill the line."""
    row = "j1,0,1,60"
    row += "," * (MAX_LINE_CHARS - len(row))
    path = tmp_path / "w.csv"
    path.write_bytes(f"name,submit_time,gpus,duration\r\n{row}\r\nj2,5,2,30\r\n".encode())
    jobs = load_workload(path).jobs
    assert [(j.request.id, j.request.gpus, j.work) for j in jobs] == [
        ("j1", 1, RigidWork(60.0)),
        ("j2", 2, RigidWork(30.0)),
    ]


@pytest.mark.parametrize(
    ("load", "header", "flag"),
    [
        (load_pods, "name,cpu_milli,memory_mib,num_gpu,gpu_milli", "--pods"),
        (load_nodes, "sn,cpu_milli,memory_mib,gpu,model", "--nodes"),
    ],
)
def test_an_openb_list_line_longer_than_the_bound_is_refused(
    tmp_path: Path, load: Callable[[Path], object], header: str, flag: str
) -> None:
    path = tmp_path / "list.csv"
    path.write_text(header + "\n" + LONG + "\n")
    with pytest.raises(DataError) as caught:
        load(path)
    message = str(caught.value)
    assert f"{path}:2: a line longer than" in message and flag in message


def test_a_trace_table_line_longer_than_the_bound_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "traces" / "toyapp"
    folder.mkdir(parents=True)
    (folder / "placements.csv").write_text(
        "placement,local_bsz,step_time,sync_time\n1,32,0.10,0.01\n" + LONG + "\n"
    )
    with pytest.raises(DataError, match=r"placements.csv:3: a line longer than .*--traces"):
        load_profile(folder)


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="a system without /dev/zero")
@pytest.mark.parametrize(
    "args",
    [
        ["sim", "run", "--workload", "/dev/zero", "--quiet"],
        ["sim", "pack", "--pods", "/dev/zero", "--nodes", "/dev/zero", "--seeds", "42"],
    ],
)
def test_dev_zero_is_refused_not_read_for_ever(args: list[str]) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "/dev/zero:1: a line longer than" in result.output
    assert "one row per line" in result.output
