"""``danlu sim`` through Typer's CliRunner: run, compare, pack, and flag errors."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from typer.testing import CliRunner

from danlu.cli.main import app
from danlu.cli.sim import parse_options, parse_seeds
from danlu.core.errors import ConfigError

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def squash(text: str) -> str:
    """Output without whitespace: Rich wraps long lines at the terminal width."""
    return "".join(text.split())


def test_sim_run_default_prints_a_table_and_writes_json(runner: CliRunner, tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    result = runner.invoke(
        app, ["sim", "run", "--policy", "fifo", "--jobs", "60", "--quiet", "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    for label in ("average JCT (s)", "p99 JCT (s)", "makespan (s)", "fifo", "60 jobs on 64 GPUs"):
        assert squash(label) in squash(result.output)
    data = json.loads(out.read_text())
    assert data["policy"] == "fifo" and data["total_gpus"] == 64
    assert data["jobs"] == 60 and len(data["job_jcts"]) == 60
    jcts = list(data["job_jcts"].values())
    assert data["avg_jct"] == pytest.approx(statistics.fmean(jcts))
    assert min(jcts) <= data["p99_jct"] <= max(jcts)
    assert data["makespan"] > 0 and all(j > 0 for j in jcts)
    assert {j["id"] for j in data["per_job"]} == set(data["job_jcts"])
    assert "timeline" in data and "wall_seconds" in data


def test_sim_run_options_change_the_result(runner: CliRunner, tmp_path: Path) -> None:
    base, other = tmp_path / "a.json", tmp_path / "b.json"
    common = ["sim", "run", "--policy", "tiresias", "--jobs", "40", "--quiet", "--nodes", "2"]
    assert runner.invoke(app, [*common, "--json", str(base)]).exit_code == 0
    result = runner.invoke(
        app, [*common, "--option", "thresholds=[60]", "--option", "placement=best-fit",
              "--json", str(other)]
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads(base.read_text())["total_gpus"] == 8
    assert json.loads(base.read_text())["job_jcts"] != json.loads(other.read_text())["job_jcts"]


def test_sim_run_plot_writes_a_png(runner: CliRunner, tmp_path: Path) -> None:
    png = tmp_path / "timeline.png"
    result = runner.invoke(
        app, ["sim", "run", "--policy", "sjf", "--jobs", "30", "--quiet", "--plot", str(png)]
    )
    assert result.exit_code == 0, result.output
    assert png.read_bytes()[:8] == PNG_SIGNATURE
    assert png.stat().st_size > 1000


def test_sim_compare(runner: CliRunner, tmp_path: Path) -> None:
    out = tmp_path / "cmp.json"
    result = runner.invoke(
        app,
        ["sim", "compare", "--policies", "fifo,sjf", "--jobs", "40", "--quiet", "--json", str(out)],
    )
    assert result.exit_code == 0, result.output
    assert "fifo" in result.output and "sjf" in result.output
    data = json.loads(out.read_text())
    assert set(data) == {"fifo", "sjf"}
    assert data["fifo"]["jobs"] == data["sjf"]["jobs"] == 40
    # same workload, different order: SJF never has a larger average JCT here
    assert data["sjf"]["avg_jct"] <= data["fifo"]["avg_jct"]


def pack_files(tmp_path: Path) -> list[str]:
    """``sim pack --pods ... --nodes ...`` for a small pod and node list."""
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(
        "sn,cpu_milli,memory_mib,gpu,model\n"
        "n0,64000,262144,2,T4\nn1,64000,262144,4,T4\nn2,32000,65536,0,\n"
    )
    pods = tmp_path / "pods.csv"
    pods.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase\n"
        "p0,4000,1024,1,500,,LS,Running\n"
        "p1,4000,1024,1,250,,LS,Running\n"
        "p2,8000,2048,2,1000,,BE,Running\n"
        "p3,2000,512,1,1000,T4,LS,Running\n"
        "p4,1000,512,0,0,,BE,Running\n"
    )
    return ["sim", "pack", "--pods", str(pods), "--nodes", str(nodes)]


def test_sim_pack_writes_allocation_ratio(runner: CliRunner, tmp_path: Path) -> None:
    out = tmp_path / "pack.json"
    args = [*pack_files(tmp_path), "--policy", "best-fit"]
    result = runner.invoke(app, [*args, "--seeds", "1,3-4", "--load", "0.5", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "allocation_ratio" in result.output
    data = json.loads(out.read_text())
    assert data["seeds"] == [1, 3, 4] and len(data["per_seed"]) == 3
    assert 0 < data["allocation_ratio"] <= 100
    assert data["allocation_ratio"] == pytest.approx(
        statistics.fmean(s["allocation_ratio"] for s in data["per_seed"])
    )


def test_sim_pack_danlu_scorer_options(runner: CliRunner, tmp_path: Path) -> None:
    out = tmp_path / "pack.json"
    args = [*pack_files(tmp_path), "--policy", "danlu", "--seeds", "1", "--json", str(out)]
    result = runner.invoke(app, [*args, "--option", "large_weight=0", "--option", "fgd-weight=8"])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["options"] == {"large_weight": 0, "fgd_weight": 8}
    assert {"failed_multi_gpu_pods", "first_multi_gpu_refusal"} <= set(data["per_seed"][0])
    for extra, needle in [
        (["--option", "colour=1"], "unknown option 'colour'; valid: fgd_weight"),
        (["--option", "large_weight=-1"], "large_weight must be finite and >= 0"),
        (["--option", "large_weight=abc"], "large_weight must be a number"),
        (["--option", "large_weight=true"], "large_weight must be a number"),
        (["--policy", "fgd", "--option", "large_weight=0"], "fgd scorer takes no options"),
    ]:
        result = runner.invoke(app, [*args, *extra])
        assert result.exit_code == 2, extra
        assert squash(needle) in squash(result.output), (extra, result.output)


def bad_pack_args(tmp_path: Path) -> list[str]:
    return ["sim", "pack", "--pods", str(tmp_path / "p.csv"), "--nodes", str(tmp_path / "n.csv")]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["sim", "run", "--policy", "nope", "--quiet"], "--policy"),
        (["sim", "compare", "--policies", "fifo,nope", "--quiet"], "--policies"),
        (["sim", "run", "--option", "thresholds", "--quiet"], "--option"),
        (["sim", "run", "--policy", "fifo", "--option", "colour=1", "--quiet"], "'colour'"),
        (
            ["sim", "run", "--policy", "danlu", "--option", "restart_cost=abc", "--quiet"],
            "'restart_cost' must be a number",
        ),
        (
            ["sim", "run", "--policy", "danlu", "--option", "share_p_max=2", "--quiet"],
            "share_p_max must be in [0.05, 1]",
        ),
        (["sim", "run", "--jobs", "0", "--quiet"], "--jobs"),
        (["sim", "run", "--jobs", "5", "--interval", "inf", "--quiet"], "interval"),
        (["sim", "run", "--jobs", "5", "--restart-cost", "nan", "--quiet"], "restart_cost"),
        (["sim", "compare", "--jobs", "5", "--restart-cost", "inf", "--quiet"], "restart_cost"),
        (["sim", "run", "--jobs", "5", "--project-share", "a=0", "--quiet"], "--project-share"),
        (["sim", "run", "--jobs", "5", "--project-share", "a", "--quiet"], "NAME=WEIGHT"),
        (
            ["sim", "compare", "--jobs", "5", "--project-share", "=2", "--quiet"],
            "--project-share",
        ),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(runner: CliRunner, args: list[str], needle: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert "error" in result.output and needle in result.output


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--seeds", "5-1"], "--seeds"),
        (["--seeds", "x"], "--seeds"),
        (["--seeds", ","], "--seeds"),
        (["--policy", "tightest"], "--policy"),
        (["--load", "0"], "--load"),
        (["--option", "large_weight"], "--option"),
    ],
)
def test_bad_pack_flags_exit_2(
    runner: CliRunner, tmp_path: Path, extra: list[str], needle: str
) -> None:
    result = runner.invoke(app, [*bad_pack_args(tmp_path), *extra])
    assert result.exit_code == 2
    assert needle in result.output


def test_missing_files_exit_2_naming_the_file(runner: CliRunner, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.csv"
    result = runner.invoke(app, ["sim", "run", "--workload", str(missing), "--quiet"])
    assert result.exit_code == 2
    assert squash(str(missing)) in squash(result.output)
    result = runner.invoke(app, [*bad_pack_args(tmp_path), "--seeds", "1"])
    assert result.exit_code == 2
    assert squash(str(tmp_path / "n.csv")) in squash(result.output)


def test_pollux_workload_without_traces_exits_2(runner: CliRunner, tmp_path: Path) -> None:
    workload = tmp_path / "pollux.csv"
    workload.write_text("name,time,application,num_replicas,batch_size\nj,0,cifar10,1,128\n")
    args = ["sim", "run", "--workload", str(workload), "--traces", str(tmp_path / "no"), "--quiet"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "--traces" in result.output


def test_project_shares_weigh_the_fair_share_turns(runner: CliRunner, tmp_path: Path) -> None:
    rows = [f"a{i},0,1,600,,,,,a" for i in range(24)] + [f"b{i},0,1,600,,,,,b" for i in range(24)]
    workload = tmp_path / "teams.csv"
    header = "name,submit_time,gpus,duration,priority,gpu_memory,family,model,project"
    workload.write_text("\n".join([header, *rows]) + "\n")
    waits = {}
    for weight in ("1", "3"):
        out = tmp_path / f"w{weight}.json"
        args = ["sim", "run", "--workload", str(workload), "--policy", "fair-share", "--nodes",
                "1", "--gpus-per-node", "4", "--project-share", f"a={weight}", "--quiet",
                "--json", str(out)]  # fmt: skip
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        per_job = json.loads(out.read_text())["per_job"]
        waits[weight] = {
            team: statistics.fmean(j["queueing_delay"] for j in per_job if j["id"][0] == team)
            for team in "ab"
        }
    assert waits["1"]["a"] == pytest.approx(waits["1"]["b"], abs=60)
    assert waits["3"]["a"] < 0.6 * waits["3"]["b"]  # a holds 3 of the 4 GPUs while b waits


def test_parse_seeds_and_options() -> None:
    assert parse_seeds("42-44") == [42, 43, 44]
    assert parse_seeds("1, 5-6,9") == [1, 5, 6, 9]
    for bad in ("", "a-b", "3-1", "1.5"):
        with pytest.raises(ConfigError, match="--seeds"):
            parse_seeds(bad)
    assert parse_options(["thresholds=[1, 2]", "backfill=true", "placement=best-fit"]) == {
        "thresholds": (1, 2),
        "backfill": True,
        "placement": "best-fit",
    }
    assert parse_options(["aging-per-hour=2"]) == {"aging_per_hour": 2}
    with pytest.raises(ConfigError, match="key=value"):
        parse_options(["=1"])


def test_unwritable_outputs_are_refused_before_simulating(
    runner: CliRunner, tmp_path: Path
) -> None:
    """An output that cannot be written is an error (exit 2) naming the flag, found before
    the simulation runs rather than as a traceback after it."""
    absent = tmp_path / "absent" / "out.json"
    for flag, target in (("--json", absent), ("--plot", absent), ("--json", tmp_path)):
        result = runner.invoke(app, ["sim", "run", "--jobs", "3", flag, str(target), "--quiet"])
        assert result.exit_code == 2, result.output
        assert flag in result.output and "Traceback" not in result.output
        assert "simulated in" not in result.output
    result = runner.invoke(app, ["sim", "compare", "--jobs", "3", "--json", str(absent)])
    assert result.exit_code == 2 and "--json" in result.output
    result = runner.invoke(app, [*bad_pack_args(tmp_path), "--json", str(absent)])
    assert result.exit_code == 2 and "--json" in result.output
    assert not absent.parent.exists()


def test_files_that_are_not_utf8_text_exit_2(runner: CliRunner, tmp_path: Path) -> None:
    """A binary or mis-encoded file is a clear error naming it, in the header or further down."""
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"\xff\xfe\x00garbage\n")
    latin = tmp_path / "latin.csv"
    latin.write_bytes(b"name,submit_time,gpus,duration\nj1,0,1,60\nj\xe9,5,1,60\n")
    for path in (binary, latin):
        result = runner.invoke(app, ["sim", "run", "--workload", str(path), "--quiet"])
        assert result.exit_code == 2, result.output
        assert "UTF-8" in result.output and squash(str(path)) in squash(result.output)
    result = runner.invoke(
        app, ["sim", "pack", "--pods", str(binary), "--nodes", str(binary), "--seeds", "1"]
    )
    assert result.exit_code == 2 and "UTF-8" in result.output
