"""``sim pack`` names the pods of the list that fit no node even of the empty
cluster (every copy of them fails), which it used to accept silently.

``openb_pod_list_gpuspec25.csv`` holds one: ``openb-pod-3362`` asks for 8 G2 GPUs with
120.2 cores and 625 GiB, and every G2 node has 96 cores and 384 GiB. The experiment keeps
such pods as FGD's artifact does (the allocation ratio is unchanged); the result lists
them, the JSON has them, and the command prints a note.
"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from danlu.cli.main import app
from danlu.sched.placement.share import ShareNode, ShareRequest
from danlu.sim.openb import OpenbPod, run_allocation_experiment, unplaceable_pods

NODES = [
    ShareNode("n0", 32000, 131072, 8, "A10"),
    ShareNode("n1", 96000, 393216, 4, "G2"),
    ShareNode("n2", 64000, 65536, 0),
]
FITS = [
    OpenbPod("p-share", ShareRequest(4000, 1024, 1, 500)),
    OpenbPod("p-whole", ShareRequest(8000, 2048, 2, 1000)),
    OpenbPod("p-cpu", ShareRequest(60000, 4096)),  # CPU only: fits n2
    OpenbPod("p-g2", ShareRequest(90000, 300000, 4, 1000, frozenset({"G2"}))),
]
NO_NODE = [
    OpenbPod("x-gpus", ShareRequest(1000, 1024, 16, 1000)),  # 16 GPUs, nodes have 8
    OpenbPod("x-g2-cpu", ShareRequest(120000, 1024, 1, 1000, frozenset({"G2"}))),
    OpenbPod("x-memory", ShareRequest(1000, 1 << 20)),  # 1 TiB of memory
]


def squash(text: str) -> str:
    """Output without whitespace: Rich wraps long lines at the terminal width."""
    return "".join(text.split())


def test_unplaceable_pods_are_those_no_empty_node_holds() -> None:
    pods = [FITS[0], NO_NODE[0], FITS[1], NO_NODE[1], FITS[2], NO_NODE[2], FITS[3]]
    assert unplaceable_pods(pods, NODES) == NO_NODE
    assert unplaceable_pods(FITS, NODES) == []


def test_the_result_names_them_and_keeps_the_artifacts_ratio() -> None:
    with_them = run_allocation_experiment([*FITS, *NO_NODE], NODES, "best-fit", 1.0, [1, 2])
    assert with_them.unplaceable_pods == ("x-gpus", "x-g2-cpu", "x-memory")
    assert with_them.to_json()["unplaceable_pods"] == ["x-gpus", "x-g2-cpu", "x-memory"]
    for seed in with_them.per_seed:  # every copy failed, its demand counted as arrived
        assert seed.failed_pods >= 1
    alone = run_allocation_experiment(FITS, NODES, "best-fit", 1.0, [1, 2])
    assert alone.unplaceable_pods == ()
    assert alone.to_json()["unplaceable_pods"] == []


def write_lists(tmp_path: Path, extra_pod: str) -> list[str]:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,32000,131072,8,A10\n")
    pods = tmp_path / "pods.csv"
    pods.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
        "p0,4000,1024,1,500\np1,8000,2048,2,1000\n" + extra_pod
    )
    return ["sim", "pack", "--pods", str(pods), "--nodes", str(nodes), "--seeds", "1"]


def test_sim_pack_prints_a_note_naming_the_pod_and_its_line(tmp_path: Path) -> None:
    out = tmp_path / "pack.json"
    args = [*write_lists(tmp_path, "big,64000,1024,2,1000\n"), "--json", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    text = squash(result.output)
    assert squash("1 pod(s) fit no node") in text
    assert squash(f"big ({tmp_path / 'pods.csv'}, line 4)") in text
    assert json.loads(out.read_text())["unplaceable_pods"] == ["big"]


def test_sim_pack_prints_no_note_when_every_pod_fits(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, write_lists(tmp_path, "p2,2000,512,1,1000\n"))
    assert result.exit_code == 0, result.output
    assert "fit no node" not in result.output
