"""Counts in ``danlu sim``'s output: ``1 node``, not ``1 nodes``, in what it prints, and
whole numbers in its JSON (``"jobs": 2``, not ``2.0``); ``sim pack``'s pod and node lists
read their header in any case, as a workload's is read; and ``--seeds`` takes whole
numbers of 0 or more written in the digits 0-9, saying so."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
from typer.testing import CliRunner

from danlu.cli.main import app
from danlu.cli.sim_flags import parse_seeds
from danlu.core.cluster import Cluster
from danlu.core.errors import ConfigError
from danlu.core.values import counted
from danlu.sched.registry import make_policy
from danlu.sim.config import SimConfig
from danlu.sim.engine import Simulator
from danlu.sim.metrics import COUNT_FIGURES
from danlu.sim.openb import load_nodes, load_pods, run_allocation_experiment
from danlu.sim.report import plot_timeline
from danlu.sim.workload import load_workload

ONE_JOB = "name,submit_time,gpus,duration\nj1,0,1,600\n"
TWO_JOBS = "name,submit_time,gpus,duration,project\nj1,0,2,3600,a\nj2,0,1,1800,b\n"


def squash(text: str) -> str:
    """Output without whitespace: Rich wraps long lines at the terminal width."""
    return "".join(text.split())


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_counted_says_one_thing_in_the_singular() -> None:
    assert counted(1, "node") == "1 node"
    assert counted(0, "GPU") == "0 GPUs"
    assert counted(4, "job") == "4 jobs"


def test_plan_prints_one_node_and_one_job_in_the_singular(tmp_path: Path) -> None:
    workload = write(tmp_path, "w.csv", ONE_JOB)
    result = CliRunner().invoke(
        app,
        [
            "sim",
            "plan",
            "--workload",
            str(workload),
            "--target",
            "avg_jct<=2h",
            "--max-nodes",
            "2",
            "--gpus-per-node",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    out = squash(result.output)
    assert squash("smallest cluster meeting the targets: 1 node x 1 GPU = 1 GPU") in out
    assert squash("w: 1 job, tiresias") in out
    assert "1nodes" not in out and "1jobs" not in out and "1GPUs" not in out


def test_plan_that_misses_says_one_node(tmp_path: Path) -> None:
    workload = write(tmp_path, "w.csv", ONE_JOB)
    result = CliRunner().invoke(
        app,
        ["sim", "plan", "--workload", str(workload), "--target", "avg_jct<=1", "--max-nodes", "1"],
    )
    assert result.exit_code == 1, result.output
    assert squash("no cluster of up to 1 node meets the targets") in squash(result.output)


@pytest.mark.parametrize("command", ["run", "compare"])
def test_run_and_compare_titles_say_one_job_on_one_gpu(tmp_path: Path, command: str) -> None:
    workload = write(tmp_path, "w.csv", ONE_JOB)
    policy = ["--policy", "fifo"] if command == "run" else ["--policies", "fifo,sjf"]
    result = CliRunner().invoke(
        app,
        [
            "sim",
            command,
            "--workload",
            str(workload),
            *policy,
            "--nodes",
            "1",
            "--gpus-per-node",
            "1",
            "--quiet",
        ],
    )
    assert result.exit_code == 0, result.output
    assert squash("w: 1 job on 1 GPU") in squash(result.output)


def test_run_of_one_round_says_one_scheduling_round(tmp_path: Path) -> None:
    # a job of no duration starts and ends in the first round (60 s): the only one
    workload = write(tmp_path, "w.csv", "name,submit_time,gpus,duration\nj1,0,1,0\n")
    result = CliRunner().invoke(app, ["sim", "run", "--workload", str(workload), "--quiet"])
    assert result.exit_code == 0, result.output
    assert squash("s wall, 1 scheduling round") in squash(result.output)
    assert "schedulingrounds" not in squash(result.output)


def _assert_counts_are_whole(figures: dict[str, object]) -> None:
    for key, value in figures.items():
        if key in COUNT_FIGURES and value is not None and not isinstance(value, list):
            assert type(value) is int, (key, value)


def test_run_json_counts_are_whole_numbers(tmp_path: Path) -> None:
    workload = write(tmp_path, "w.csv", TWO_JOBS)
    out = tmp_path / "run.json"
    result = CliRunner().invoke(
        app, ["sim", "run", "--workload", str(workload), "--quiet", "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["jobs"] == 2 and type(data["jobs"]) is int
    assert type(data["rounds"]) is int and type(data["preemptions"]) is int
    assert type(data["avg_jct"]) is float  # a figure with a fraction stays a float
    assert type(data["gpu_utilization"]) is float
    _assert_counts_are_whole(data)
    for row in data["projects"].values():
        assert type(row["jobs"]) is int and type(row["rejected"]) is int
        assert type(row["gpu_hours"]) is float
        _assert_counts_are_whole(row)


def test_compare_and_plan_json_counts_are_whole_numbers(tmp_path: Path) -> None:
    workload = write(tmp_path, "w.csv", TWO_JOBS)
    compared, planned = tmp_path / "compare.json", tmp_path / "plan.json"
    result = CliRunner().invoke(
        app,
        [
            "sim",
            "compare",
            "--workload",
            str(workload),
            "--policies",
            "fifo,sjf",
            "--quiet",
            "--json",
            str(compared),
        ],
    )
    assert result.exit_code == 0, result.output
    for by_policy in json.loads(compared.read_text()).values():
        assert type(by_policy["jobs"]) is int
        _assert_counts_are_whole(by_policy)
    result = CliRunner().invoke(
        app,
        [
            "sim",
            "plan",
            "--workload",
            str(workload),
            "--target",
            "avg_jct<=2h",
            "--max-nodes",
            "4",
            "--json",
            str(planned),
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(planned.read_text())
    assert type(data["nodes"]) is int
    for tried in data["tried"]:
        assert type(tried["nodes"]) is int and type(tried["jobs"]) is int
        assert type(tried["rounds"]) is int and type(tried["avg_jct"]) is float
        _assert_counts_are_whole(tried)


NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,96000,786432,8,V100M16\nn1,96000,786432,2,T4\n"
PODS = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
    "p0,4000,8192,1,500,\np1,8000,16384,1,1000,T4\np2,8000,16384,2,1000,\n"
)


def _recased(text: str, header: str) -> str:
    """``text`` with its header line replaced by ``header``."""
    return header + "\n" + text.split("\n", 1)[1]


def test_pack_lists_read_their_header_in_any_case(tmp_path: Path) -> None:
    nodes = write(tmp_path, "nodes.csv", NODES)
    pods = write(tmp_path, "pods.csv", PODS)
    upper_nodes = write(
        tmp_path, "NODES.csv", _recased(NODES, "SN, CPU_Milli ,Memory_MiB,GPU,Model")
    )
    upper_pods = write(
        tmp_path,
        "PODS.csv",
        _recased(PODS, "Name,CPU_Milli, memory_mib,Num_GPU,GPU_Milli,GPU_Spec"),
    )
    assert load_nodes(upper_nodes) == load_nodes(nodes)
    read = load_pods(upper_pods)
    assert [(p.name, p.request) for p in read] == [(p.name, p.request) for p in load_pods(pods)]
    assert read[1].request.gpu_spec == frozenset({"T4"})  # GPU_Spec was ignored
    plain = run_allocation_experiment(load_pods(pods), load_nodes(nodes), "fgd", 1.0, (1, 2))
    cased = run_allocation_experiment(read, load_nodes(upper_nodes), "fgd", 1.0, (1, 2))
    assert cased.per_seed == plain.per_seed


def test_pack_cli_reads_a_capitalised_pod_list(tmp_path: Path) -> None:
    nodes = write(tmp_path, "nodes.csv", NODES)
    pods = write(
        tmp_path, "pods.csv", _recased(PODS, "NAME,CPU_MILLI,MEMORY_MIB,NUM_GPU,GPU_MILLI,GPU_SPEC")
    )
    result = CliRunner().invoke(
        app, ["sim", "pack", "--pods", str(pods), "--nodes", str(nodes), "--seeds", "1"]
    )
    assert result.exit_code == 0, result.output
    assert "allocation_ratio" in result.output


def test_pack_lists_keep_a_column_named_twice_in_two_cases_apart(tmp_path: Path) -> None:
    # as a workload's header: ``Name`` beside ``name`` is an extra column, not a repeat
    pods = write(
        tmp_path, "pods.csv", _recased(PODS, "name,cpu_milli,memory_mib,num_gpu,gpu_milli,Name")
    )
    assert [p.name for p in load_pods(pods)] == ["p0", "p1", "p2"]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("-1", "-1 is negative; seeds are whole numbers of 0 or more"),
        ("1,-3", "-3 is negative"),
        ("1_0", "whole numbers of 0 or more, in the digits 0-9"),
        ("\u0661", "in the digits 0-9"),
        ("4-2", "the range 4-2 counts down; write 2-4"),
    ],
)
def test_seeds_are_whole_numbers_of_zero_or_more(text: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")):
        parse_seeds(text)


def test_seeds_still_read_as_written() -> None:
    assert parse_seeds("42-45") == [42, 43, 44, 45]
    assert parse_seeds(" 1, 5 - 7 ,") == [1, 5, 6, 7]
    assert parse_seeds("0") == [0]
    assert parse_seeds("+3") == [3]


def test_seed_flags_say_zero_or_more_in_their_help() -> None:
    run_help = CliRunner().invoke(app, ["sim", "run", "--help"], env={"COLUMNS": "200"})
    pack_help = CliRunner().invoke(app, ["sim", "pack", "--help"], env={"COLUMNS": "200"})
    assert "x>=0" in run_help.output
    assert squash("whole numbers of 0 or more") in squash(pack_help.output)


def test_the_plot_of_a_one_gpu_cluster_says_one_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.axes import Axes

    titles: list[str] = []
    monkeypatch.setattr(Axes, "set_title", lambda self, label, **_: titles.append(label))
    workload = load_workload(write(tmp_path, "w.csv", ONE_JOB))
    cluster = Cluster.homogeneous(1, 1)
    result = Simulator(cluster, make_policy("fifo"), workload, SimConfig()).run()
    plot_timeline(result, tmp_path / "timeline.png")
    assert titles == ["w - fifo (1 GPU)"]


def test_trace_tables_read_their_header_in_any_case(tmp_path: Path) -> None:
    from danlu.sim.elastic import load_profile

    source = Path(__file__).resolve().parents[2].parent / "shared/data/pollux/traces/cifar10"
    if not source.is_dir():
        pytest.skip(f"the Pollux traces are not at {source}")
    plain = load_profile(source)
    recased = tmp_path / "cifar10"
    recased.mkdir()
    for table in source.glob("*.csv"):
        header, rest = table.read_text().split("\n", 1)
        names = [
            f" {name.upper()}" if i % 2 else name.title()
            for i, name in enumerate(header.split(","))
        ]
        (recased / table.name).write_text(",".join(names) + "\n" + rest)
    # the same profile, every measured number and table alike
    assert pickle.dumps(vars(load_profile(recased))) == pickle.dumps(vars(plain))


def test_the_readme_names_every_count_of_the_json() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    start = readme.index("`--json` writes the summary's figures")
    paragraph = readme[start : readme.index("\n\n", start)]
    assert "whole numbers" in paragraph
    assert [name for name in sorted(COUNT_FIGURES) if f"`{name}`" not in paragraph] == []
