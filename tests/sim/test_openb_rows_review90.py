"""The openb pod and node list readers: a row ending in empty fields beyond
the header (a spreadsheet's trailing commas), or stopping before an optional column, was
refused (``12 fields, header has 11``), though a workload's rows are read so and the same
pod list loads as a workload (``--workload``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from danlu.core.errors import DataError
from danlu.sim.openb import load_nodes, load_pods
from danlu.sim.workload import load_workload

POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time\r\n"
)


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, newline="")
    return path


def test_pod_rows_with_trailing_empty_fields_load(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "pods.csv",
        POD_HEADER
        + "p0,12000,16384,1,1000,,LS,Running,0,100,0,\r\n"  # one comma too many
        + "p1,6000,12288,1,460,T4,LS,Running,5,100,5,,,\r\n",
    )
    pods = load_pods(path)
    assert [(p.name, p.request.gpu_milli, sorted(p.request.gpu_spec)) for p in pods] == [
        ("p0", 1000, []),
        ("p1", 460, ["T4"]),
    ]
    assert [job.request.id for job in load_workload(path).jobs] == ["p0", "p1"]  # as before


def test_pod_rows_without_optional_trailing_columns_load(tmp_path: Path) -> None:
    text = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos\np0,1000,1024,1,500\n"
    (pod,) = load_pods(write(tmp_path, "pods.csv", text))
    assert (pod.name, pod.request.gpu_milli, pod.request.gpu_spec) == ("p0", 500, frozenset())


def test_node_rows_with_trailing_empty_fields_load(tmp_path: Path) -> None:
    text = "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,P100,\nn1,32000,262144,0,,,\n"
    nodes = load_nodes(write(tmp_path, "nodes.csv", text))
    assert [(n.name, n.num_gpu, n.model) for n in nodes] == [("n0", 2, "P100"), ("n1", 0, "")]


def test_a_value_beyond_the_header_is_still_refused(tmp_path: Path) -> None:
    text = "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,P100,8\n"
    with pytest.raises(DataError, match=r"nodes\.csv:2: 6 fields but the header has 5"):
        load_nodes(write(tmp_path, "nodes.csv", text))
    text = POD_HEADER + "p0,12000,16384,1,1000,,LS,Running,0,100,0,x\r\n"
    with pytest.raises(DataError, match=r"pods\.csv:2: 12 fields .* \(beyond them: 'x'\)"):
        load_pods(write(tmp_path, "pods.csv", text))


def test_a_row_lacking_a_required_column_names_it(tmp_path: Path) -> None:
    text = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np0,1,1\n"
    with pytest.raises(
        DataError,
        match=r"line 2: 3 fields, header has 6; the row lacks column\(s\) num_gpu, gpu_milli",
    ):
        load_pods(write(tmp_path, "pods.csv", text))
    text = "sn,cpu_milli,memory_mib,gpu,model\nn0,1,1,0\n"
    with pytest.raises(DataError, match=r"line 2: 4 fields, header has 5; .* model"):
        load_nodes(write(tmp_path, "nodes.csv", text))
