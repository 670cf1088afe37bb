"""An Alibaba pod or node list that is not UTF-8 CSV text is reported on the line of its
first bad byte (the message named only the file, so an 8,000-line list had to be searched
by hand)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from danlu.core.errors import DataError
from danlu.sim.openb import load_nodes, load_pods

POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,creation_time,deletion_time"


def _pods(tmp_path: Path, bad_line: bytes, at: int) -> Path:
    lines = [POD_HEADER.encode()] + [
        f"pod-{i},1000,1024,1,1000,,0,60".encode() for i in range(3000)
    ]
    lines[at - 1] = bad_line
    path = tmp_path / "pods.csv"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def test_a_bad_byte_in_a_pod_list_is_reported_on_its_line(tmp_path: Path) -> None:
    path = _pods(tmp_path, b"pod-\xe9,1000,1024,1,1000,,0,60", 2501)
    with pytest.raises(DataError, match=r"pods\.csv:2501: not a UTF-8 CSV file"):
        load_pods(path)


def test_a_bad_byte_in_a_node_list_is_reported_on_its_line(tmp_path: Path) -> None:
    path = tmp_path / "nodes.csv"
    path.write_bytes(b"sn,cpu_milli,memory_mib,gpu,model\nn1,1000,1024,8,V100\nn\xff2,1,1,8,V100\n")
    with pytest.raises(DataError, match=r"nodes\.csv:3: not a UTF-8 CSV file"):
        load_nodes(path)


def test_a_csv_error_names_its_line(tmp_path: Path) -> None:
    old = csv.field_size_limit(64)
    try:
        path = _pods(tmp_path, b"pod-x," + b"9" * 200 + b",1024,1,1000,,0,60", 7)
        with pytest.raises(DataError, match=r"pods\.csv:7: not a CSV file"):
            load_pods(path)
    finally:
        csv.field_size_limit(old)
