"""``danlu sim pack``'s inputs: ``gpu_spec`` matched against the node list's
GPU models whatever the case, a spec naming no model of the node list refused at its line
(every such pod failed, silently), and numbers too large for a node or a pod refused at
their line (they crashed with OverflowError, or hung the run)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from danlu.cli.main import app
from danlu.core.errors import DataError
from danlu.sched.placement.share import ShareCluster, ShareNode, ShareRequest
from danlu.sim import openb
from danlu.sim.openb import OpenbPod, load_nodes, load_pods, run_allocation_experiment

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "alibaba-gpu-v2023"
POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model\n"
LISTS = [
    *("default", "cpu0", "cpu037", "cpu050", "cpu072", "cpu100", "cpu200", "cpu235", "cpu300"),
    *("gpushare100", "gpushare20", "gpushare60", "gpushare80"),
    *("gpuspec05", "gpuspec10", "gpuspec20", "gpuspec25", "multigpu20", "multigpu30"),
]


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def t4_nodes() -> list[ShareNode]:
    return [ShareNode("n1", 64_000, 262_144, 4, "T4"), ShareNode("n2", 64_000, 262_144, 4, "G2")]


# -- gpu_spec against the node list's models ---------------------------------------------------


def test_the_cluster_matches_a_spec_whatever_its_case() -> None:
    cluster = ShareCluster(t4_nodes())
    assert cluster.model_allowed(frozenset({"t4"})).tolist() == [False, True]  # models: G2, T4
    assert cluster.feasible(ShareRequest(1000, 1024, 1, 500, frozenset({"t4"}))).tolist() == [
        True,
        False,
    ]


def test_a_lower_case_spec_is_placed_on_its_model(tmp_path: Path) -> None:
    """The scheduler lowercases GPU types; the pod list's 't4' made every such pod fail."""
    pods = load_pods(
        write(tmp_path, "pods.csv", POD_HEADER + "p1,1000,1024,1,500,t4\np2,1000,1024,1,1000,t4\n")
    )
    result = run_allocation_experiment(pods, t4_nodes(), "fgd", 0.1, [1])
    assert result.per_seed[0].failed_pods == 0
    assert result.allocation_ratio > 0.0
    # spelled as the node list spells it, so the fragmentation measures see it alike
    assert openb.match_gpu_specs(pods, t4_nodes())[0].request.gpu_spec == frozenset({"T4"})


def test_a_spec_naming_no_model_of_the_node_list_is_refused_at_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, "pods.csv", POD_HEADER + "p1,1000,1024,1,500,T4\np2,1,1,1,250,T5|H100\n")
    pods = load_pods(path)
    pattern = r"pods\.csv, line 3, column gpu_spec: 'H100\|T5' names no GPU model .*G2, T4"
    with pytest.raises(DataError, match=pattern):
        run_allocation_experiment(pods, t4_nodes(), "fgd", 1.0, [1])
    # one name the node list has is enough: the pod may run there (no node has the other)
    partly = [OpenbPod("p", ShareRequest(1, 1, 1, 250, frozenset({"H100", "g2"})))]
    assert openb.match_gpu_specs(partly, t4_nodes())[0].request.gpu_spec == frozenset({"G2"})
    # a pod built in code names itself instead of a line
    alone = [OpenbPod("p9", ShareRequest(1, 1, 1, 250, frozenset({"H100"})))]
    with pytest.raises(DataError, match=r"pod 'p9', column gpu_spec: 'H100'"):
        openb.match_gpu_specs(alone, t4_nodes())


def test_sim_pack_refuses_a_spec_naming_no_model_with_exit_2(tmp_path: Path) -> None:
    pods = write(tmp_path, "pods.csv", POD_HEADER + "p1,1000,1024,1,500,H100\n")
    nodes = write(tmp_path, "nodes.csv", NODE_HEADER + "n1,64000,262144,4,T4\n")
    args = ["sim", "pack", "--pods", str(pods), "--nodes", str(nodes), "--seeds", "1"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "column gpu_spec" in result.output and "H100" in result.output


@pytest.mark.skipif(not (DATA / "openb_pod_list_default.csv").exists(), reason="no openb data")
def test_every_openb_list_names_only_models_of_the_node_list() -> None:
    nodes = load_nodes(DATA / "openb_node_list_gpu_node.csv")
    assert max(n.num_gpu for n in nodes) == 8  # far below the bound on GPUs per node
    restricted = 0
    for name in LISTS:
        pods = load_pods(DATA / f"openb_pod_list_{name}.csv")
        matched = openb.match_gpu_specs(pods, nodes)
        assert [p.request for p in matched] == [p.request for p in pods], name  # spelled alike
        restricted += sum(1 for p in pods if p.request.gpu_spec)
    assert restricted > 0  # the gpuspec lists do restrict pods


# -- numbers too large for a node or a pod ------------------------------------------------------

HUGE = "999999999999999999999999"


@pytest.mark.parametrize(
    ("row", "column"),
    [
        (f"p1,{HUGE},1024,1,500,", "cpu_milli"),
        (f"p1,1000,{HUGE},1,500,", "memory_mib"),
        (f"p1,1000,1024,{HUGE},1000,", "num_gpu"),
        ("p1,1000,1024,2000000000,1000,", "num_gpu"),
        ("p1,1000000001,1024,1,500,", "cpu_milli"),
        (f"p1,1000,1024,0,{HUGE},", "cpu_only_gpu_milli_ignored"),
    ],
    ids=["cpu-huge", "memory-huge", "gpus-huge", "gpus-2e9", "cpu-above-bound", "cpu-only"],
)
def test_pod_numbers_above_their_bound_are_refused(tmp_path: Path, row: str, column: str) -> None:
    path = write(tmp_path, "pods.csv", POD_HEADER + row + "\n")
    if column == "cpu_only_gpu_milli_ignored":  # a CPU-only pod's gpu_milli is not read
        assert load_pods(path)[0].request.gpu_milli == 0
        return
    with pytest.raises(DataError, match=rf"pods\.csv, line 2, column {column}: .* at most"):
        load_pods(path)


@pytest.mark.parametrize(
    ("row", "column"),
    [
        (f"n1,{HUGE},16384,2,T4", "cpu_milli"),
        (f"n1,8000,{HUGE},2,T4", "memory_mib"),
        ("n1,8000,16384,2000000000,T4", "gpu"),
        ("n1,8000,16384,257,T4", "gpu"),
    ],
    ids=["cpu-huge", "memory-huge", "gpus-2e9", "gpus-257"],
)
def test_node_numbers_above_their_bound_are_refused(tmp_path: Path, row: str, column: str) -> None:
    path = write(tmp_path, "nodes.csv", NODE_HEADER + row + "\n")
    with pytest.raises(DataError, match=rf"nodes\.csv, line 2, column {column}: .* at most"):
        load_nodes(path)


def test_the_bounds_themselves_load(tmp_path: Path) -> None:
    row = "1000000000,1073741824,256"  # a million cores, 1 PiB, 256 GPUs
    nodes = load_nodes(write(tmp_path, "nodes.csv", f"{NODE_HEADER}n1,{row},T4\n"))
    assert nodes[0].num_gpu == 256
    pods = load_pods(write(tmp_path, "pods.csv", f"{POD_HEADER}p1,{row},1000,\n"))
    assert pods[0].request.num_gpu == 256


def test_sim_pack_refuses_a_huge_node_with_exit_2(tmp_path: Path) -> None:
    pods = write(tmp_path, "pods.csv", POD_HEADER + "p1,1000,1024,1,500,\n")
    nodes = write(tmp_path, "nodes.csv", NODE_HEADER + "n1,8000,16384,2000000000,T4\n")
    args = ["sim", "pack", "--pods", str(pods), "--nodes", str(nodes), "--seeds", "1"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "column gpu" in result.output and "at most 256" in result.output
