"""Simulator: ``sim compare`` names the jobs each policy rejected or left
unfinished, a workload without a GPU job is refused, and openb pods that the trace never
scheduled are left out of ``sim run`` (and counted) but kept by ``sim pack``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from danlu.cli import sim as sim_cli
from danlu.cli.main import app
from danlu.core.errors import DataError
from danlu.sim.openb import load_pods
from danlu.sim.workload import RigidWork, load_workload

OPENB = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "alibaba-gpu-v2023"
OPENB_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time\n"
)


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """A console wide enough that Rich does not wrap the tables' rows."""
    monkeypatch.setattr(sim_cli, "console", Console(width=250))


def squash(text: str) -> str:
    return "".join(text.split())


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# -- 1. sim compare counts the rejected and unfinished jobs ---------------------------------


def test_compare_shows_rejected_and_unfinished_rows_and_warns(
    runner: CliRunner, tmp_path: Path, wide_console: None
) -> None:
    """Two of five jobs ask for more GPUs than the cluster has: the table's average JCTs are
    over the three others, and it says so, as ``sim run`` does."""
    text = "name,submit_time,gpus,duration\na,0,8,600\nb,0,1,600\nc,5,2,60\nd,9,16,60\ne,9,1,30\n"
    workload = write(tmp_path, "wide.csv", text)
    out = tmp_path / "cmp.json"
    args = ["sim", "compare", "--workload", str(workload), "--nodes", "1", "--gpus-per-node",
            "4", "--policies", "fifo,sjf", "--quiet", "--json", str(out)]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    flat = squash(result.output)
    assert "│jobsfinished│3│3│" in flat
    assert "│jobsrejected│2│2│" in flat
    assert "│jobsunfinished│0│0│" in flat
    for policy in ("fifo", "sjf"):
        assert f"{policy}: 2 job(s) rejected, e.g. a: asks for 8 GPUs" in result.output
    data = json.loads(out.read_text())
    assert [len(data[p]["rejected"]) for p in ("fifo", "sjf")] == [2, 2]
    assert data["fifo"]["unfinished"] == []
    # sim run prints the same rows and its own warning
    result = runner.invoke(app, ["sim", "run", *args[2:8], "--policy", "fifo", "--quiet"])
    assert result.exit_code == 0, result.output
    assert "│jobsrejected│2│" in squash(result.output)
    assert "2 job(s) rejected, e.g. a: asks for 8 GPUs" in result.output


def test_compare_without_rejections_prints_zero_and_no_warning(
    runner: CliRunner, wide_console: None
) -> None:
    args = ["sim", "compare", "--jobs", "10", "--policies", "fifo,sjf", "--quiet"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "│jobsrejected│0│0│" in squash(result.output)
    assert "rejected, e.g." not in result.output


# -- 2. a workload without a GPU job is refused ---------------------------------------------


@pytest.mark.parametrize(
    ("text", "cause"),
    [
        ("name,submit_time,gpus,duration\n", "no jobs"),
        ("name,time,application,num_replicas,batch_size\n", "no jobs"),
        ("timestamp,duration,num_gpus\n", "no jobs"),
        (OPENB_HEADER, "no jobs"),
        (OPENB_HEADER + "c0,4000,100,0,0,,BE,Running,0,80,0\n", "CPU-only"),
        (OPENB_HEADER + "p0,4000,100,1,500,,LS,Pending,0,80,\n", "never scheduled"),
    ],
)
def test_a_workload_without_gpu_jobs_is_a_data_error(tmp_path: Path, text: str, cause: str) -> None:
    path = write(tmp_path, "empty.csv", text)
    with pytest.raises(DataError, match="no GPU job") as info:
        load_workload(path)
    assert str(path) in str(info.value) and cause in str(info.value)


def test_sim_commands_refuse_an_empty_workload(runner: CliRunner, tmp_path: Path) -> None:
    path = write(tmp_path, "empty.csv", "name,submit_time,gpus,duration\n")
    for args in (
        ["sim", "run", "--workload", str(path), "--nodes", "1", "--quiet"],
        ["sim", "compare", "--workload", str(path), "--nodes", "1", "--quiet"],
        ["sim", "plan", "--workload", str(path), "--target", "avg_jct<=1h", "--max-nodes", "2"],
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert "noGPUjobtosimulate" in squash(result.output)


# -- 3. openb pods the trace never scheduled -------------------------------------------------

PENDING_TEXT = OPENB_HEADER + (
    "p-run,6000,2048,1,460,,LS,Running,100,700,200\n"
    "p-pend,6000,2048,1,500,,LS,Pending,150,900,\n"
    "p-cpu,4000,100,0,0,,BE,Pending,50,80,\n"
    "p-gang,8000,4096,8,1000,,BE,Running,10,1010,\n"
)


def test_openb_pods_never_scheduled_are_left_out_and_counted(tmp_path: Path) -> None:
    workload = load_workload(write(tmp_path, "openb.csv", PENDING_TEXT))
    assert [j.request.id for j in workload.jobs] == ["p-gang", "p-run"]
    assert workload.never_scheduled == ("p-pend",)
    gang, share = workload.jobs
    assert gang.work == RigidWork(1000.0)  # running, no scheduled_time: from creation
    assert share.work == RigidWork(500.0)


def test_sim_pack_keeps_the_pods_never_scheduled(tmp_path: Path) -> None:
    """``sim pack`` places every pod of the list (it has no time): unchanged."""
    pods = load_pods(write(tmp_path, "openb.csv", PENDING_TEXT))
    assert [p.name for p in pods] == ["p-run", "p-pend", "p-cpu", "p-gang"]


def test_sim_run_prints_and_writes_the_pods_left_out(
    runner: CliRunner, tmp_path: Path, wide_console: None
) -> None:
    path = write(tmp_path, "openb.csv", PENDING_TEXT)
    out = tmp_path / "run.json"
    args = ["sim", "run", "--workload", str(path), "--nodes", "2", "--gpus-per-node", "8",
            "--policy", "fifo", "--quiet", "--json", str(out)]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "2 jobs on 16 GPUs" in result.output
    assert "1 GPU pod(s) left out, never scheduled in the trace, e.g. p-pend" in result.output
    data = json.loads(out.read_text())
    assert data["jobs"] == 2 and data["never_scheduled"] == ["p-pend"]
    out = tmp_path / "cmp.json"
    args[args.index("--policy") : args.index("--policy") + 2] = ["--policies", "fifo,sjf"]
    args[1], args[-1] = "compare", str(out)
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "1 GPU pod(s) left out, never scheduled in the trace" in result.output
    data = json.loads(out.read_text())
    assert [data[p]["never_scheduled"] for p in ("fifo", "sjf")] == [["p-pend"], ["p-pend"]]


@pytest.mark.skipif(not (OPENB / "openb_pod_list_default.csv").exists(), reason="no openb data")
def test_openb_default_list_leaves_out_its_861_pending_gpu_pods() -> None:
    workload = load_workload(OPENB / "openb_pod_list_default.csv")
    assert len(workload.never_scheduled) == 861
    assert len(workload.jobs) == 7064 - 861
    assert len(load_pods(OPENB / "openb_pod_list_default.csv")) == 8152  # sim pack: all pods
