"""Small odd inputs a user feeds ``danlu sim run`` and ``sim pack``: each simulates
sensibly or is refused naming the file, the row and the fix, never with a traceback or a
hang. Among them: a node list whose every node has 0 GPUs (refused only deep in the
experiment, without naming the file), a JSON file given as a workload, and a Philly
timestamp given as seconds (both refused without saying what to write)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from danlu.cli.main import app
from danlu.core.errors import ConfigError, DataError
from danlu.sched.placement.share import ShareNode, ShareRequest
from danlu.sim.openb import OpenbPod, load_nodes, run_allocation_experiment
from danlu.sim.workload import load_workload

HEADER = "name,submit_time,gpus,duration,priority,gpu_memory,family,model,project\n"
POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time\n"
)
NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model\n"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def squash(text: str) -> str:
    """Output without whitespace: Rich wraps long lines at the terminal width."""
    return "".join(text.split())


def test_a_node_list_without_gpus_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "nodes.csv", NODE_HEADER + "n0,64000,262144,0,\nn1,32000,1024,0,\n")
    with pytest.raises(DataError, match=r"nodes\.csv: no node has a GPU .*give a node list"):
        load_nodes(path)
    pods = write(tmp_path, "pods.csv", POD_HEADER + "p0,1000,1024,1,500,,LS,Running,0,100,0\n")
    result = CliRunner().invoke(
        app, ["sim", "pack", "--pods", str(pods), "--nodes", str(path), "--policy", "fgd"]
    )
    assert result.exit_code == 2, result.output
    assert squash(f"{path}: no node has a GPU") in squash(result.output)


def test_a_node_list_with_some_cpu_nodes_still_loads(tmp_path: Path) -> None:
    path = write(tmp_path, "nodes.csv", NODE_HEADER + "n0,64000,262144,0,\nn1,64000,1024,2,T4\n")
    assert [node.num_gpu for node in load_nodes(path)] == [0, 2]


def test_nodes_built_in_code_without_gpus_are_refused_with_the_fix() -> None:
    pods = [OpenbPod("p0", ShareRequest(1000, 1024, 1, 500))]
    nodes = [ShareNode("n0", 64000, 262144)]
    with pytest.raises(ConfigError, match=r"no node has a GPU .*give a node list with GPU"):
        run_allocation_experiment(pods, nodes, "fgd")


def test_a_json_workload_is_refused_saying_a_workload_is_a_csv(tmp_path: Path) -> None:
    path = write(tmp_path, "w.json", '[{"name": "a", "submit_time": 0, "gpus": 1}]\n')
    with pytest.raises(DataError, match=r"w\.json, line 1: .*looks like JSON: a workload is a CSV"):
        load_workload(path)


def test_a_philly_timestamp_in_seconds_is_refused_with_the_form_to_write(
    tmp_path: Path,
) -> None:
    path = write(tmp_path, "philly.csv", "timestamp,num_gpus,duration\n0,1,60\n")
    with pytest.raises(DataError, match=r"philly\.csv:2: .*write it as 2017-10-09 07:01:55"):
        load_workload(path)


ODD_WORKLOADS = {
    # name: (rows, finished, rejected)
    "one job": ("a,0,1,600,,,,,p\n", 1, 0),
    "all at t=0": ("a,0,1,600,,,,,p\nb,0,2,300,,,,,p\nc,0,4,100,,,,,p\nd,0,8,50,,,,,p\n", 4, 0),
    "wider than the cluster": ("a,0,1,600,,,,,p\nbig,10,1000,600,,,,,p\nc,20,2,100,,,,,p\n", 2, 1),
    "0 s duration": ("a,0,1,0,,,,,p\nb,5,1,60,,,,,p\n", 2, 0),
    "unsorted arrivals": ("a,500,1,600,,,,,p\nb,0,1,60,,,,,p\nc,100,8,60,,,,,p\n", 3, 0),
}


OPTIONS = {"pollux": ["--option", "population=16", "--option", "generations=16"]}
"""A smaller genetic search for pollux (its default takes seconds a run)."""


@pytest.mark.parametrize("policy", ["fifo", "priority", "sjf", "fair-share", "tiresias",
                                    "value-density", "optimus", "pollux", "danlu"])  # fmt: skip
def test_odd_workloads_simulate_under_every_policy(tmp_path: Path, policy: str) -> None:
    for label, (rows, finished, rejected) in ODD_WORKLOADS.items():
        path = write(tmp_path, "w.csv", HEADER + rows)
        out = tmp_path / "out.json"
        args = ["sim", "run", "--workload", str(path), "--policy", policy, "--nodes", "2",
                "--gpus-per-node", "4", "--quiet", "--json", str(out)]  # fmt: skip
        args += OPTIONS.get(policy, [])
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, (label, result.output)
        data = json.loads(out.read_text())
        assert (data["jobs"], len(data["rejected"])) == (finished, rejected), label
        assert not data["unfinished"], label
