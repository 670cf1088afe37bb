"""The simulator's trace loaders: Philly jobs of no GPU run as 1-GPU jobs
(where an openb list's CPU-only pods are left out), files of endless rows read for ever,
and pod and node lists' errors a line early after a quoted field spanning lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from danlu.core.errors import DataError
from danlu.sim import csv_rows
from danlu.sim.elastic import load_profile
from danlu.sim.openb import load_nodes, load_pods
from danlu.sim.workload import load_workload

PHILLY_HEADER = "timestamp,duration,num_gpus,gpu_time,cluster"


def test_philly_jobs_of_no_gpu_are_left_out_as_openb_cpu_pods_are(tmp_path: Path) -> None:
    path = tmp_path / "philly.csv"
    rows = [
        PHILLY_HEADER,
        "2017-10-09 07:00:00,60,0,0,cpu-team",  # asks for no GPU: it ran on 1 GPU
        "2017-10-09 07:01:00,60,2,120,b",
        "2017-10-09 07:02:00,30,1,30,c",
    ]
    path.write_text("\n".join(rows) + "\n")
    workload = load_workload(path)
    # the others keep the names of their rows, and the times count from the first GPU job
    assert [(j.request.id, j.request.gpus) for j in workload.jobs] == [
        ("philly-1", 2),
        ("philly-2", 1),
    ]
    assert [j.request.submit_time for j in workload.jobs] == [0.0, 60.0]
    assert workload.no_gpu == ("philly-0",)
    assert {j.request.project for j in workload.jobs} == {"b", "c"}


def test_a_philly_trace_of_no_gpu_job_is_refused_naming_why(tmp_path: Path) -> None:
    path = tmp_path / "philly.csv"
    path.write_text(f"{PHILLY_HEADER}\n2017-10-09 07:00:00,60,0,0,a\n")
    with pytest.raises(DataError, match=r"no GPU job .*1 job\(s\) ask for no GPU \(num_gpus 0\)"):
        load_workload(path)


def test_openb_cpu_pods_are_named_as_left_out(tmp_path: Path) -> None:
    path = tmp_path / "pods.csv"
    path.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time\n"
        "cpu,1000,100,0,0,0,100\n"
        "gpu,1000,100,1,500,0,100\n"
    )
    workload = load_workload(path)
    assert [j.request.id for j in workload.jobs] == ["gpu"] and workload.no_gpu == ("cpu",)


@pytest.fixture
def few_lines(monkeypatch: pytest.MonkeyPatch) -> int:
    """The simulator's CSV readers take at most 4 lines (the header included)."""
    monkeypatch.setattr(csv_rows, "MAX_LINES", 4, raising=False)  # (old code: no bound)
    return 4


def test_a_workload_of_too_many_lines_is_refused(tmp_path: Path, few_lines: int) -> None:
    path = tmp_path / "w.csv"
    path.write_text(
        "name,submit_time,gpus,duration\n" + "".join(f"j{i},0,1,60\n" for i in range(3))
    )
    assert len(load_workload(path).jobs) == 3  # 4 lines: read
    path.write_text(
        "name,submit_time,gpus,duration\n" + "".join(f"j{i},0,1,60\n" for i in range(9))
    )
    with pytest.raises(DataError, match=rf"w\.csv:5: more than {few_lines} lines; a workload"):
        load_workload(path)


def test_blank_lines_count_towards_the_bound(tmp_path: Path, few_lines: int) -> None:
    """An endless stream of blank lines was read for ever too (each is skipped)."""
    path = tmp_path / "w.csv"
    path.write_text("name,submit_time,gpus,duration\nj,0,1,60\n" + "\n" * 10)
    with pytest.raises(DataError, match=r"w\.csv:5: more than 4 lines"):
        load_workload(path)


def test_pod_and_node_lists_of_too_many_lines_are_refused(tmp_path: Path, few_lines: int) -> None:
    pods = tmp_path / "pods.csv"
    pods.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
        + "".join(f"p{i},1000,100,1,500\n" for i in range(5))
    )
    with pytest.raises(DataError, match=r"pods\.csv:5: more than 4 lines; a pod list \(--pods\)"):
        load_pods(pods)
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(
        "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(f"n{i},1000,100,1,T4\n" for i in range(5))
    )
    with pytest.raises(DataError, match=r"nodes\.csv:5: more than 4 lines; a node list"):
        load_nodes(nodes)


def test_a_trace_table_of_too_many_lines_is_refused(tmp_path: Path, few_lines: int) -> None:
    folder = tmp_path / "app"
    folder.mkdir()
    (folder / "placements.csv").write_text(
        "placement,local_bsz,step_time,sync_time\n" + "1,1,0.5,0.1\n" * 6
    )
    with pytest.raises(DataError, match=r"placements\.csv:5: more than 4 lines; a trace table"):
        load_profile(folder)


def test_pod_list_errors_name_the_line_after_a_field_spanning_lines(tmp_path: Path) -> None:
    path = tmp_path / "pods.csv"
    path.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
        '"p\n1",1000,100,1,500\n'  # a quoted name over lines 2 and 3
        "p2,1000,100,1,abc\n"  # line 4 (it was reported as line 3)
    )
    with pytest.raises(DataError, match=r"pods\.csv, line 4, column gpu_milli"):
        load_pods(path)
    path.write_text(
        'name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"p\n1",1000,100,1,500\np2,1000,100,1,500\n'
    )
    pods = load_pods(path)
    assert [p.source for p in pods] == [f"{path}, line 2", f"{path}, line 4"]


def test_node_list_errors_name_the_line_after_a_field_spanning_lines(tmp_path: Path) -> None:
    path = tmp_path / "nodes.csv"
    path.write_text('sn,cpu_milli,memory_mib,gpu,model\n"n\n1",1000,100,1,T4\nn2,1000,100,1,\n')
    with pytest.raises(DataError, match=r"nodes\.csv, line 4, column model: empty"):
        load_nodes(path)


def test_a_trace_table_byte_not_utf8_is_named_by_its_line(tmp_path: Path) -> None:
    """The error gave the decoder's position in the 8 KiB it had read ahead ('position
    284'), not the line."""
    folder = tmp_path / "app"
    folder.mkdir()
    rows = [b"placement,local_bsz,step_time,sync_time"]
    rows += [b"1,%d,0.5,0.1" % (32 + i) for i in range(40)]
    rows[30] += b"\xff"
    (folder / "placements.csv").write_bytes(b"\n".join(rows) + b"\n")
    with pytest.raises(DataError, match=r"placements\.csv:31: not a UTF-8 CSV file"):
        load_profile(folder)


def test_a_trace_table_error_quotes_the_cell_cut_short(tmp_path: Path) -> None:
    """A quoted cell left open swallows the rest of the file: the error quoted all of it."""
    folder = tmp_path / "app"
    folder.mkdir()
    rest = "".join(f"1,{32 + i},0.5,0.1\n" for i in range(2000))
    (folder / "placements.csv").write_text(
        f'placement,local_bsz,step_time,sync_time\n1,"45,0.5,0.1\n{rest}'
    )
    with pytest.raises(DataError, match=r"local_bsz='45") as caught:
        load_profile(folder)
    assert len(str(caught.value)) < 300
