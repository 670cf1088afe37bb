"""Simulator inputs that hung, crashed or were reported at the wrong place.

- a ``--traces`` measurement with a step time <= 0, a negative sync time, or gradient
  statistics that are both 0 made ``danlu sim run`` hang (progress going backwards) or
  crash with ZeroDivisionError; a ``validation-0.csv`` failed later without naming the file;
- workload errors counted rows, not lines, so a blank line or a multi-line quoted field
  shifted every line number after it;
- an empty or unrecognised workload file's error did not name the file;
- ``danlu sim pack --seeds 42-5100000000`` built billions of seeds (MemoryError).

The trace folders here are small synthetic ones, so these tests need no shared data.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from danlu.cli.main import app
from danlu.cli.sim import parse_seeds
from danlu.core.errors import ConfigError, DataError
from danlu.sim.elastic import load_profile
from danlu.sim.workload import load_workload

MAX_SEEDS = 10_000  # the most seeds ``--seeds`` accepts (its --help says so)
APP = "toyapp"  # not in APP_OVERRIDES: its epochs come from the validation files

TOY_FILES: dict[str, list[str]] = {
    "placements.csv": [
        "placement,local_bsz,step_time,sync_time",
        "1,32,0.10,0.01",
        "1,64,0.20,0.01",
        "2,32,0.15,0.05",
        "2,64,0.25,0.05",
    ],
    "scalability.csv": [
        "num_nodes,num_replicas,local_bsz,step_time,sync_time",
        "6,6,32,0.30,0.10",
        "6,6,64,0.40,0.10",
    ],
    "validation-128.csv": [
        "progress,grad_sqr,grad_var",
        "100,1.0,2.0",
        "200,0.0,2.0",  # grad_sqr 0 alone is valid (the deepspeech2 traces have it)
    ],
    "validation-256.csv": [
        "progress,grad_sqr,grad_var",
        "101,1.0,0.0",  # and so is grad_var 0 alone
        "201,0.5,2.0",
    ],
}


def write_traces(root: Path, edits: dict[tuple[str, int], str] | None = None) -> Path:
    """A traces folder holding one synthetic application; ``edits`` replaces line ``n``
    (1-based, the header is line 1) of a file with the given text."""
    folder = root / "traces" / APP
    folder.mkdir(parents=True)
    for name, lines in TOY_FILES.items():
        lines = list(lines)
        for (file, number), text in (edits or {}).items():
            if file == name:
                lines[number - 1] = text
        (folder / name).write_text("\n".join(lines) + "\n")
    return folder


def squash(text: str) -> str:
    """Output without whitespace: Rich wraps long lines at the terminal width."""
    return "".join(text.split())


def test_valid_synthetic_traces_load(tmp_path: Path) -> None:
    """The baseline that the bad cases below differ from by one line."""
    profile = load_profile(write_traces(tmp_path))
    assert profile.validated_batch_sizes == (128, 256)
    assert profile.max_epochs == 2 and profile.epoch_boundaries == (100.0, 200.0)
    assert profile.gain(128, 1) == pytest.approx(1.0)
    assert profile.gain(256, 0) == pytest.approx(1.0)  # grad_var 0: no statistical gain
    assert profile.min_local_bsz == 32 and profile.max_local_bsz == 64


@pytest.mark.parametrize(
    ("file", "line", "text", "message"),
    [
        ("placements.csv", 3, "1,64,0,0", r"placements\.csv:3: step_time='0' must be > 0"),
        ("placements.csv", 3, "1,64,-0.5,0", r"placements\.csv:3: step_time='-0.5' must be > 0"),
        (
            "placements.csv",
            2,
            "1,32,0.1,-0.01",
            r"placements\.csv:2: sync_time='-0.01' must be >= 0",
        ),
        (
            "placements.csv",
            2,
            "1,32,0.1,0.2",
            r"placements\.csv:2: sync_time=0\.2 is above step_time=0\.1",
        ),
        ("placements.csv", 4, "2,0,0.15,0.05", r"placements\.csv:4: local_bsz='0' must be a whole"),
        ("placements.csv", 4, "2,2.5,0.15,0.05", r"placements\.csv:4: local_bsz='2\.5' must be a"),
        ("placements.csv", 4, "2,32,nan,0.05", r"placements\.csv:4: step_time='nan' must be a fin"),
        ("scalability.csv", 3, "6,6,64,0,0", r"scalability\.csv:3: step_time='0' must be > 0"),
        ("scalability.csv", 2, "0,6,32,0.3,0.1", r"scalability\.csv:2: num_nodes='0' must be a wh"),
        ("scalability.csv", 2, "6,-6,32,0.3,0.1", r"scalability\.csv:2: num_replicas='-6' must be"),
        ("scalability.csv", 2, "6,6,32,0.3,-1", r"scalability\.csv:2: sync_time='-1' must be >= 0"),
        (
            "validation-128.csv",
            3,
            "200,0,0",
            r"validation-128\.csv:3: grad_sqr and grad_var are both 0",
        ),
        ("validation-256.csv", 2, "101,-1,2", r"validation-256\.csv:2: grad_sqr='-1' must be >= 0"),
        ("validation-256.csv", 3, "201,1,-2", r"validation-256\.csv:3: grad_var='-2' must be >= 0"),
        ("validation-128.csv", 2, "0,1,2", r"validation-128\.csv:2: progress='0' must be > 0"),
        ("validation-128.csv", 2, "-5,1,2", r"validation-128\.csv:2: progress='-5' must be > 0"),
    ],
    ids=[
        "step-zero",
        "step-negative",
        "sync-negative",
        "sync-above-step",
        "local-bsz-zero",
        "local-bsz-fraction",
        "step-nan",
        "scalability-step-zero",
        "scalability-nodes-zero",
        "scalability-replicas-negative",
        "scalability-sync-negative",
        "grad-stats-both-zero",
        "grad-sqr-negative",
        "grad-var-negative",
        "progress-zero",
        "progress-negative",
    ],
)
def test_a_bad_measurement_is_refused_naming_file_line_and_column(
    tmp_path: Path, file: str, line: int, text: str, message: str
) -> None:
    """These loaded, then hung the simulation or crashed it with ZeroDivisionError."""
    folder = write_traces(tmp_path, {(file, line): text})
    with pytest.raises(DataError, match=message) as caught:
        load_profile(folder)
    assert str(folder / file) in str(caught.value)


def test_trace_line_numbers_count_blank_lines(tmp_path: Path) -> None:
    folder = write_traces(tmp_path, {("placements.csv", 3): "\n\n1,64,0,0"})
    with pytest.raises(DataError, match=r"placements\.csv:5: step_time='0' must be > 0"):
        load_profile(folder)


def test_a_validation_file_for_batch_0_is_refused_naming_it(tmp_path: Path) -> None:
    """It failed later with "batch limits: need 1 <= init_batch ..." naming no file."""
    folder = write_traces(tmp_path)
    (folder / "validation-128.csv").rename(folder / "validation-0.csv")
    with pytest.raises(DataError, match=r"validation-0\.csv: the batch size in the name"):
        load_profile(folder)


def test_two_validation_files_for_one_batch_size_are_refused(tmp_path: Path) -> None:
    """``validation-0128.csv`` silently replaced ``validation-128.csv`` (or the reverse)."""
    folder = write_traces(tmp_path)
    (folder / "validation-0128.csv").write_text((folder / "validation-128.csv").read_text())
    with pytest.raises(DataError, match=r"validation-128\.csv: a second file for batch size 128"):
        load_profile(folder)


def test_an_override_below_the_measured_micro_batches_is_refused(tmp_path: Path) -> None:
    """yolov3's artifact cap (8) above its measurements: a later error named no file."""
    from danlu.sim.elastic import AppOverride

    folder = write_traces(tmp_path)
    with pytest.raises(DataError, match=r"placements\.csv: the smallest local_bsz 32 is above"):
        load_profile(folder, AppOverride(max_local_bsz=16))


def sim_run(runner: CliRunner, root: Path, traces: Path) -> tuple[int, str]:
    workload = root / "pc.csv"
    workload.write_text(f"name,time,application,num_replicas,batch_size\nj1,0,{APP},1,128\n")
    args = ["sim", "run", "--workload", str(workload), "--traces", str(traces)]
    flags = ["--policy", "fifo", "--nodes", "1", "--gpus-per-node", "2", "--quiet"]
    result = runner.invoke(app, [*args, *flags])
    return result.exit_code, result.output


def test_sim_run_on_the_synthetic_traces_completes(tmp_path: Path) -> None:
    code, output = sim_run(CliRunner(), tmp_path, write_traces(tmp_path).parent)
    assert code == 0, output


def test_sim_run_refuses_a_zero_step_time_with_exit_2(tmp_path: Path) -> None:
    """It crashed with a ZeroDivisionError traceback (a negative one hung)."""
    folder = write_traces(tmp_path, {("placements.csv", 3): "1,64,0,0"})
    code, output = sim_run(CliRunner(), tmp_path, folder.parent)
    assert code == 2, output
    assert squash(f"{folder / 'placements.csv'}:3: step_time='0' must be > 0") in squash(output)


# ---- workload files -------------------------------------------------------------------

HEADER = "name,submit_time,gpus,duration\n"


@pytest.mark.parametrize(
    ("body", "line"),
    [
        ("a,0,1,5\n\n\n\nb,0,1,-5\n", 6),
        ('"multi\nline\nname",0,1,5\nb,0,1,-5\n', 5),
        ('a,0,1,5\n"multi\nline",0,1,-5\n', 3),  # a multi-line row: the line it starts on
        ("\n\na,0,1,-5\n", 4),
    ],
    ids=["blank-lines", "multi-line-before", "multi-line-itself", "blank-after-header"],
)
def test_workload_errors_name_the_real_line(tmp_path: Path, body: str, line: int) -> None:
    path = tmp_path / "w.csv"
    path.write_text(HEADER + body)
    with pytest.raises(DataError, match=rf"w\.csv:{line}: column 'duration' must be >= 0"):
        load_workload(path)


def test_blank_lines_keep_philly_job_ids(tmp_path: Path) -> None:
    """Philly jobs are named by their row (``philly-0``, ...), not by their line."""
    path = tmp_path / "p.csv"
    path.write_text(
        "timestamp,duration,num_gpus\n2017-10-01 00:00:00,60,1\n\n2017-10-01 00:01:00,60,1\n"
    )
    assert [job.request.id for job in load_workload(path).jobs] == ["philly-0", "philly-1"]


def test_an_empty_workload_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "empty.csv"
    path.write_text("")
    with pytest.raises(DataError, match="empty file") as caught:
        load_workload(path)
    assert str(path) in str(caught.value)


def test_unrecognised_workload_columns_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "wrongcols.csv"
    path.write_text("job,start,n\nx,0,1\n")
    with pytest.raises(DataError, match=r"unrecognised workload columns") as caught:
        load_workload(path)
    assert str(caught.value).startswith(f"{path}, line 1: ")


def test_sim_run_on_an_empty_workload_names_it(tmp_path: Path) -> None:
    path = tmp_path / "empty.csv"
    path.write_text("")
    result = CliRunner().invoke(app, ["sim", "run", "--workload", str(path), "--quiet"])
    assert result.exit_code == 2
    assert squash(f"{path}: empty file") in squash(result.output)


# ---- --seeds --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["42-5100000000", f"0-{MAX_SEEDS}", f"1-{MAX_SEEDS - 1},5000000-5000001", "1,2-99999999999999"],
    ids=["range-of-billions", "one-range-too-many", "two-ranges-too-many", "list-then-range"],
)
def test_too_many_seeds_are_refused_before_the_list_is_built(text: str) -> None:
    with pytest.raises(ConfigError, match=rf"--seeds .* more than {MAX_SEEDS:,} seeds"):
        parse_seeds(text)


def test_the_most_seeds_are_accepted() -> None:
    assert parse_seeds(f"1-{MAX_SEEDS}") == list(range(1, MAX_SEEDS + 1))


def test_sim_pack_refuses_a_range_of_billions_with_exit_2(tmp_path: Path) -> None:
    """It raised MemoryError (or filled the memory) building the list."""
    pods, nodes = tmp_path / "pods.csv", tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,64000,262144,4,T4\n")
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np1,1000,1024,1,500\n")
    args = ["sim", "pack", "--pods", str(pods), "--nodes", str(nodes), "--seeds", "42-5100000000"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "--seeds" in result.output and f"{MAX_SEEDS:,}" in result.output
    help_text = CliRunner().invoke(app, ["sim", "pack", "--help"]).output
    assert f"{MAX_SEEDS:,}" in squash(help_text)
