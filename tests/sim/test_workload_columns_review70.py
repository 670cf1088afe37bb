"""A plain workload's columns read as the control plane reads a spec, and errors
at the right place.

- ``gpu_memory`` was a bare number of bytes (``16`` meant to be 16 GiB was a 16-byte share;
  ``16GiB`` was refused; ``0.5`` ran as a whole GPU): it is now read with the spec's size
  rules (units, the 1 MiB minimum, no fraction of a byte);
- ``submit_time`` was used as written: epoch seconds put the timeline 55 years out, and
  nanoseconds failed with advice about ``--interval`` whose runs were nonsense; times now
  start at the first submission, and a time over :data:`MOST_SECONDS` is refused as not
  seconds;
- a byte that is not UTF-8 was reported on the line of the 8 KiB chunk's start.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from danlu.cli.main import app
from danlu.core.cluster import Cluster
from danlu.core.errors import ConfigError, DataError
from danlu.core.units import GiB, MiB
from danlu.sched.registry import make_policy
from danlu.sched.view import JobRequest
from danlu.sim.config import SimConfig
from danlu.sim.engine import Simulator, _tick_after
from danlu.sim.workload import RigidWork, Workload, WorkloadJob, load_workload

HEADER = "name,submit_time,gpus,duration"


def write(tmp_path: Path, rows: list[str], header: str = HEADER) -> Path:
    path = tmp_path / "w.csv"
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def squash(text: str) -> str:
    """Output without whitespace: Rich wraps long lines at the terminal width."""
    return "".join(text.split())


# --- gpu_memory -------------------------------------------------------------------------


def test_gpu_memory_takes_the_units_of_a_spec(tmp_path: Path) -> None:
    # before: "column 'gpu_memory' must be a number, got '16GiB'"
    rows = [
        "a,0,1,60,16GiB",
        "b,0,1,60,512MiB",
        "c,0,1,60,1.5GB",
        f"d,0,1,60,{20 * GiB}",
        "e,0,1,60,",
    ]
    path = write(tmp_path, rows, HEADER + ",gpu_memory")
    memory = {job.request.id: job.request.gpu_memory for job in load_workload(path).jobs}
    assert memory == {"a": 16 * GiB, "b": 512 * MiB, "c": 1_500_000_000, "d": 20 * GiB, "e": 0}


@pytest.mark.parametrize(
    ("cell", "needles"),
    [
        # before: a 16-byte share, 20 such jobs running at once on one GPU
        ("16", ("below 1 MiB", "a number without a unit is bytes", "16GiB")),
        # before: int(0.5) == 0, the whole GPU
        ("0.5", ("fraction of a byte", "0.5GiB")),
        ("lots", ("not a byte size", "20GiB")),
        ("auto", ("auto", "16GiB")),
    ],
)
def test_gpu_memory_the_server_would_refuse_is_refused_naming_the_line(
    tmp_path: Path, cell: str, needles: tuple[str, ...]
) -> None:
    path = write(tmp_path, ["a,0,1,60,", f"b,0,1,60,{cell}"], HEADER + ",gpu_memory")
    with pytest.raises(DataError, match=r"w\.csv:3: column 'gpu_memory'") as caught:
        load_workload(path)
    for needle in needles:
        assert needle in str(caught.value)


def test_the_cli_refuses_a_gpu_memory_without_a_unit(tmp_path: Path) -> None:
    path = write(tmp_path, [f"j{i},0,1,3600,16" for i in range(20)], HEADER + ",gpu_memory")
    result = CliRunner().invoke(app, ["sim", "run", "--workload", str(path), "--quiet"])
    assert result.exit_code == 2, result.output  # before: exit 0, all 20 on one GPU
    assert "w.csv:2" in squash(result.output) and "16GiB" in result.output


# --- submit_time ------------------------------------------------------------------------


def test_plain_submit_times_start_at_the_first_submission(tmp_path: Path) -> None:
    # epoch seconds: before, the jobs were submitted 55 years into the simulation
    path = write(tmp_path, ["b,1733150060,1,3600", "a,1733150000,1,3600", "c,1733150000.5,1,1"])
    jobs = load_workload(path).jobs
    assert [(j.request.id, j.request.submit_time) for j in jobs] == [
        ("a", 0.0),
        ("c", 0.5),
        ("b", 60.0),
    ]


def test_nanosecond_submit_times_are_refused_as_not_seconds(tmp_path: Path) -> None:
    path = write(tmp_path, ["a,1733150000000000000,1,3600", "b,1733150060000000000,1,3600"])
    with pytest.raises(DataError, match=r"w\.csv:2: column 'submit_time' is seconds") as caught:
        load_workload(path)
    message = str(caught.value)
    assert "nanoseconds" in message and "--interval" not in message


def test_the_cli_refuses_nanoseconds_without_advice_on_the_interval(tmp_path: Path) -> None:
    path = write(tmp_path, ["a,1733150000000000000,1,3600", "b,1733150060000000000,1,3600"])
    result = CliRunner().invoke(app, ["sim", "run", "--workload", str(path), "--quiet"])
    assert result.exit_code == 2, result.output
    assert "nanoseconds" in result.output and "--interval" not in result.output


@pytest.mark.parametrize(
    ("row", "column"), [("a,0,1,3.6e12", "duration"), ("a,0,1,60,2e12", "time_limit")]
)
def test_durations_beyond_the_bound_are_refused_as_not_seconds(
    tmp_path: Path, row: str, column: str
) -> None:
    path = write(tmp_path, [row], HEADER + ",time_limit")
    with pytest.raises(DataError, match=rf"w\.csv:2: column '{column}' is seconds"):
        load_workload(path)


def test_a_clock_stuck_at_a_time_that_is_not_seconds_does_not_advise_the_interval() -> None:
    # before: "use an interval of at least 512 s", whose runs were nonsense
    with pytest.raises(ConfigError) as caught:
        _tick_after(1.73315e18, 60.0)
    message = squash(str(caught.value))
    assert "useaninterval" not in message and "notseconds" in message


def test_a_workload_too_late_for_the_interval_fails_instead_of_hanging() -> None:
    # a workload built in Python is not shifted: at 1e14 s floats are 1/64 s apart, and a
    # 1 ms grid cannot advance there
    request = JobRequest(id="j0", submit_time=1e14, gpus=1, seq=0, expected_duration=10.0)
    workload = Workload("late", "danlu", (WorkloadJob(request, RigidWork(10.0)),))
    config = SimConfig(interval=1e-3)
    sim = Simulator(Cluster.homogeneous(1, 1), make_policy("fifo"), workload, config)
    with pytest.raises(ConfigError, match=r"not seconds"):
        sim.run()


def test_times_within_the_bound_still_tick_as_before() -> None:
    assert _tick_after(1e9 + 0.5, 1e-3) > 1e9 + 0.5
    with pytest.raises(ConfigError, match=r"use an interval of at least"):
        _tick_after(1.0, 1e-300)  # an interval below SimConfig's own minimum
    assert math.isfinite(_tick_after(123456789.123, 7.0))


# --- the line of a byte that is not UTF-8 -----------------------------------------------


def test_a_bad_byte_is_reported_on_its_line_in_a_large_file(tmp_path: Path) -> None:
    lines = [HEADER.encode()] + [f"j{i},0,1,60".encode() for i in range(5000)]
    lines[3000] = b"j\xe9,0,1,60"  # line 3001
    path = tmp_path / "w.csv"
    path.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(DataError, match=r"w\.csv:3001: not a UTF-8 CSV file"):  # before: 2854
        load_workload(path)


@pytest.mark.parametrize(
    ("data", "line"),
    [
        (b"name,submit_time,gpus,duration\nj\xe9,0,1,60\n", 2),  # before: 1
        (b"\xef\xbb\xbfname,submit_time,gpus,duration\r\nj1,0,1,60\r\nj\xe9,0,1,60\r\n", 3),
        (b"name,submit_time,gpus,duration\nj1,0,1,60\nj2,0,1,60\xe2\x82", 3),  # cut short
        (b"na\xffme,submit_time,gpus,duration\nj1,0,1,60\n", 1),
    ],
    ids=["line-2", "bom-crlf", "truncated", "header"],
)
def test_a_bad_byte_is_reported_on_its_line(tmp_path: Path, data: bytes, line: int) -> None:
    path = tmp_path / "w.csv"
    path.write_bytes(data)
    with pytest.raises(DataError, match=rf"w\.csv:{line}: not a UTF-8 CSV file"):
        load_workload(path)
