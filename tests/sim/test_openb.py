"""Tests of the openb loaders and the FGD allocation experiment."""

from __future__ import annotations

from pathlib import Path

import pytest

from danlu.core.errors import DataError, UnknownNameError
from danlu.sched.placement.share import ShareNode, ShareRequest
from danlu.sim.openb import OpenbPod, load_nodes, load_pods, run_allocation_experiment

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "alibaba-gpu-v2023"
POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase\n"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# ----------------------------------------------------------------- loaders
def test_load_nodes(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "nodes.csv",
        "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,P100\nn1,32000,1024,0,\n",
    )
    nodes = load_nodes(path)
    assert nodes == [ShareNode("n0", 64000, 262144, 2, "P100"), ShareNode("n1", 32000, 1024, 0, "")]


def test_load_pods_with_and_without_gpu_spec(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "pods.csv",
        POD_HEADER + "p0,6000,12288,1,460,,LS,Running\n"
        "p1,8000,100,1,1000,V100M16|V100M32,LS,Running\n"
        "p2,4000,100,0,0,,BE,Failed\n"
        "p3,88000,327680,8,1000,,BE,Running\n",
    )
    pods = load_pods(path)
    assert pods[0] == OpenbPod("p0", ShareRequest(6000, 12288, 1, 460))
    assert pods[1].request.gpu_spec == frozenset({"V100M16", "V100M32"})
    assert pods[2].request.num_gpu == 0 and pods[3].request.total_gpu_milli == 8000
    bare = write(
        tmp_path, "bare.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,2,1,1000\n"
    )
    assert load_pods(bare)[0].request == ShareRequest(1, 2, 1, 1000)


def test_bad_value_names_file_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, "pods.csv", POD_HEADER + "p0,6000,12288,1,460,,LS,R\np1,x,1,0,0,,LS,R\n")
    with pytest.raises(DataError, match=r"pods\.csv, line 3, column cpu_milli"):
        load_pods(path)
    path = write(tmp_path, "pods2.csv", POD_HEADER + "p0,6000,12288,2,500,,LS,R\n")
    with pytest.raises(DataError, match=r"line 2, column gpu_milli"):
        load_pods(path)
    path = write(tmp_path, "cpu.csv", POD_HEADER + "p0,6000,12288,0,abc,,LS,R\n")
    with pytest.raises(DataError, match=r"line 2, column gpu_milli: not a plain integer"):
        load_pods(path)  # a pod without GPUs: its gpu_milli was not read at all
    path = write(tmp_path, "nodes.csv", "sn,cpu_milli,memory_mib,gpu\nn0,1,1,1\n")
    with pytest.raises(DataError, match=r"nodes\.csv, line 1: missing column\(s\) model"):
        load_nodes(path)
    path = write(tmp_path, "nodes2.csv", "sn,cpu_milli,memory_mib,gpu,model\nn0,1,1,-2,T4\n")
    with pytest.raises(DataError, match="column gpu: negative"):
        load_nodes(path)
    with pytest.raises(DataError, match="cannot read"):
        load_nodes(tmp_path / "missing.csv")
    path = write(tmp_path, "short.csv", POD_HEADER + "p0,1,1\n")
    with pytest.raises(DataError, match="line 2: 3 fields"):
        load_pods(path)


# ----------------------------------------------------------------- experiment
def gpu_pods(n: int, milli: int = 1000, cpu: int = 1000) -> list[OpenbPod]:
    return [OpenbPod(f"p{i:03d}", ShareRequest(cpu, 1024, 1, milli)) for i in range(n)]


def small_nodes() -> list[ShareNode]:
    return [ShareNode("a", 32_000, 65_536, 2, "T4"), ShareNode("b", 32_000, 65_536, 2, "T4")]


@pytest.mark.parametrize("policy", ["random", "best-fit", "fgd"])
def test_whole_gpu_pods_fill_the_cluster(policy: str) -> None:
    result = run_allocation_experiment(gpu_pods(4), small_nodes(), policy, 1.0, [1, 2])
    # demand reaches exactly 4 GPUs with the fourth pod, and every pod fits
    assert result.allocation_ratio == 100.0
    assert [s.failed_pods for s in result.per_seed] == [0, 0]
    assert result.to_json()["allocation_ratio"] == 100.0


def test_a_pod_that_steps_over_the_target_window_still_gives_a_result() -> None:
    """One pod brings the demand to 99.6 % (inside the window below the target) and the next
    far past it: the fragmentation was never measured and the run failed an assert."""
    nodes = [ShareNode(f"n{i:03d}", 64_000, 262_144, 2, "T4") for i in range(125)]
    pods = [OpenbPod("big", ShareRequest(1000, 1024, 249, 1000))]  # 249 of 250 GPUs
    result = run_allocation_experiment(pods, nodes, "best-fit", 1.0, [1])
    assert result.allocation_ratio == 0.0  # no node has 249 GPUs
    assert result.per_seed[0].window_pods == 1


def test_cpu_limits_cap_the_allocation() -> None:
    # each pod needs 20 cores: only one fits per 32-core node, so 2 of 4 GPUs get used
    result = run_allocation_experiment(gpu_pods(4, cpu=20_000), small_nodes(), "best-fit", 1.0, [7])
    assert result.allocation_ratio == 50.0
    assert result.per_seed[0].failed_pods == 2
    assert result.frag_ratio == 100.0  # the free GPUs can host no typical pod (no CPU left)


def test_deterministic_for_a_seed_and_half_load() -> None:
    pods = gpu_pods(30, milli=300) + gpu_pods(10, milli=700)
    pods = [OpenbPod(f"{p.name}-{i}", p.request) for i, p in enumerate(pods)]
    nodes = [ShareNode(f"n{i}", 64_000, 262_144, 4, "T4") for i in range(4)]
    for policy in ("random", "best-fit", "fgd"):
        a = run_allocation_experiment(pods, nodes, policy, 0.5, [3, 4])
        b = run_allocation_experiment(pods, nodes, policy, 0.5, [3, 4])
        assert a.per_seed == b.per_seed
        assert 0.0 < a.allocation_ratio <= 55.0
    # demand beyond the list is met with copies of its pods
    c = run_allocation_experiment(pods[:5], nodes, "fgd", 1.0, [5])
    assert c.per_seed[0].arrived_pods > 5


def test_refused_multi_gpu_pods_are_counted_with_the_demand_at_the_first() -> None:
    nodes = [ShareNode(f"n{i}", 32_000, 65_536, 1, "T4") for i in range(4)]
    pods = [*gpu_pods(2), OpenbPod("two", ShareRequest(1000, 1024, 2, 1000))]
    result = run_allocation_experiment(pods, nodes, "fgd", 1.0, [1, 2, 3])
    for one in result.per_seed:  # a 2-GPU pod fits no 1-GPU node
        assert one.failed_multi_gpu_pods >= 1
        first = one.first_multi_gpu_refusal
        assert first is not None and first % 25.0 == 0.0 and 50.0 <= first <= 100.0
        assert one.to_json()["first_multi_gpu_refusal"] == first
    alone = run_allocation_experiment(gpu_pods(4), nodes, "fgd", 1.0, [1]).per_seed[0]
    assert (alone.failed_multi_gpu_pods, alone.first_multi_gpu_refusal) == (0, None)
    assert alone.to_json()["failed_multi_gpu_pods"] == 0


def test_unknown_policy() -> None:
    with pytest.raises(UnknownNameError):
        run_allocation_experiment(gpu_pods(2), small_nodes(), "nope", 1.0, [1])


@pytest.mark.skipif(not (DATA / "openb_pod_list_default.csv").exists(), reason="no openb data")
def test_real_default_list_best_fit_one_seed() -> None:
    nodes = load_nodes(DATA / "openb_node_list_gpu_node.csv")
    pods = load_pods(DATA / "openb_pod_list_default.csv")
    assert len(nodes) == 1213 and sum(n.num_gpu for n in nodes) == 6212
    assert len(pods) == 8152
    result = run_allocation_experiment(pods, nodes, "best-fit", 1.0, [42])
    # published mean of 10 seeds: 92.9 (per-seed spread in the artifact: 92.6..93.1)
    assert 91.5 <= result.allocation_ratio <= 94.0


@pytest.mark.skipif(not (DATA / "openb_pod_list_default.csv").exists(), reason="no openb data")
def test_real_default_list_danlu_keeps_room_for_multi_gpu_pods() -> None:
    nodes = load_nodes(DATA / "openb_node_list_gpu_node.csv")
    pods = load_pods(DATA / "openb_pod_list_default.csv")
    danlu = run_allocation_experiment(pods, nodes, "danlu", 1.0, [42]).per_seed[0]
    assert danlu.first_multi_gpu_refusal is not None and danlu.first_multi_gpu_refusal > 90.0
    assert danlu.allocation_ratio > 95.4  # FGD: 95.11 % on this seed
    # the host-reserve cost alone keeps the room too (without the shapes' host pressure)
    alone = run_allocation_experiment(pods, nodes, "danlu", 1.0, [42], {"large_weight": 0})
    first = alone.per_seed[0].first_multi_gpu_refusal
    assert first is not None and first > 90.0
    # without either, an 8-GPU pod is refused at 38.7 %: the run stops at half the capacity
    # asked for, past the bound checked (a seed's arrivals up to there are a full run's)
    options = {"large_weight": 0, "reserve_weight": 0}
    plain = run_allocation_experiment(pods, nodes, "danlu", 0.5, [42], options)
    first = plain.per_seed[0].first_multi_gpu_refusal
    assert first is not None and 35.0 < first < 45.0
    assert plain.to_json()["options"] == options
