"""Input files given to the wrong flag, or to none that exists, are named by their role.

- ``danlu sim pack`` with ``--pods`` and ``--nodes`` swapped said only ``missing column(s)
  sn, gpu, model``: the file is a whole pod list, and the error now says so and which flag
  takes it (and the reverse for a node list given to ``--pods``).
- ``danlu sim run --workload nothere.csv`` said ``cannot read workload nothere.csv: No such
  file or directory``, naming no flag: it names ``--workload`` now.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from danlu.cli.main import app
from danlu.core.errors import DataError
from danlu.sim.elastic import load_profiles
from danlu.sim.openb import load_nodes, load_pods
from danlu.sim.workload import load_workload

POD_LIST = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase\n"
    "p0,6000,12288,1,1000,,LS,Running\n"
)
NODE_LIST = "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,8,V100M16\n"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_pod_list_read_as_nodes_is_named_a_pod_list(tmp_path: Path) -> None:
    pods = _write(tmp_path, "pods.csv", POD_LIST)
    with pytest.raises(DataError) as info:
        load_nodes(pods)
    message = str(info.value)
    assert "line 1: missing column(s) sn, gpu, model" in message, message
    assert "this looks like a pod list: give it to --pods" in message, message


def test_a_node_list_read_as_pods_is_named_a_node_list(tmp_path: Path) -> None:
    nodes = _write(tmp_path, "nodes.csv", NODE_LIST)
    with pytest.raises(DataError) as info:
        load_pods(nodes)
    message = str(info.value)
    assert "line 1: missing column(s) name, num_gpu, gpu_milli" in message, message
    assert "this looks like a node list: give it to --nodes" in message, message


@pytest.mark.parametrize(
    ("header", "load"),
    [
        ("sn,cpu_milli,memory_mib,gpu\n", load_nodes),  # a node list lacking model
        ("name,cpu_milli,memory_mib,num_gpu\n", load_pods),  # a pod list lacking gpu_milli
        ("sn,cpu_milli,memory_mib,gpu\n", load_pods),  # neither list's columns in full
    ],
)
def test_a_list_short_of_columns_is_not_called_the_other_list(
    tmp_path: Path, header: str, load: Callable[[Path], object]
) -> None:
    path = _write(tmp_path, "list.csv", header)
    with pytest.raises(DataError, match=r"missing column\(s\)") as info:
        load(path)
    assert "looks like" not in str(info.value)


def test_sim_pack_with_the_lists_swapped_says_which_flag_takes_each(tmp_path: Path) -> None:
    pods = _write(tmp_path, "pods.csv", POD_LIST)
    nodes = _write(tmp_path, "nodes.csv", NODE_LIST)
    args = ["sim", "pack", "--seeds", "42", "--pods", str(nodes), "--nodes", str(pods)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    said = " ".join(result.stderr.split())
    assert "this looks like a pod list: give it to --pods" in said, said


def test_a_missing_workload_names_the_flag(tmp_path: Path) -> None:
    missing = tmp_path / "nothere.csv"
    with pytest.raises(DataError) as info:
        load_workload(missing)
    message = str(info.value)
    assert f"cannot read workload {missing} (--workload): No such file or directory" in message
    assert "Errno" not in message


def test_sim_run_with_a_missing_workload_names_the_flag(tmp_path: Path) -> None:
    missing = tmp_path / "nothere.csv"
    result = CliRunner().invoke(app, ["sim", "run", "--workload", str(missing)])
    assert result.exit_code == 2, result.output
    said = " ".join(result.stderr.split())
    assert "--workload" in said and str(missing) in said, said
    assert "No such file or directory" in said, said


@pytest.mark.parametrize(
    ("load", "role"), [(load_nodes, "a node list (--nodes)"), (load_pods, "a pod list (--pods)")]
)
def test_a_list_that_cannot_be_read_is_named_by_its_role(
    tmp_path: Path, load: Callable[[Path], object], role: str
) -> None:
    """A folder (or a file gone, or one not readable) given to the reader in code: the error
    said ``cannot read: [Errno 21] Is a directory: '...'``, naming no list or flag."""
    with pytest.raises(DataError) as info:
        load(tmp_path)
    message = str(info.value)
    assert f"{tmp_path}: cannot read {role}: Is a directory" in message, message
    assert "Errno" not in message


def test_a_node_list_given_as_a_workload_is_named_a_node_list(tmp_path: Path) -> None:
    """``danlu sim run --workload`` with a node list: the error listed the workload formats
    only; it says the file is a node list, which ``sim pack --nodes`` reads."""
    nodes = _write(tmp_path, "nodes.csv", NODE_LIST)
    with pytest.raises(DataError, match="unrecognised workload columns") as info:
        load_workload(nodes)
    message = str(info.value)
    assert "this looks like an openb node list" in message, message
    assert "`danlu sim pack --nodes` reads it" in message, message


def test_an_unknown_workload_header_is_not_called_a_node_list(tmp_path: Path) -> None:
    path = _write(tmp_path, "jobs.csv", "sn,gpu,model\nn0,8,V100M16\n")
    with pytest.raises(DataError, match="unrecognised workload columns") as info:
        load_workload(path)
    assert "node list" not in str(info.value)


def test_a_file_given_as_the_traces_folder_is_not_said_to_be_missing(tmp_path: Path) -> None:
    """``load_profiles`` on a file that exists: the error said the folder does not exist."""
    table = _write(tmp_path, "placements.csv", "placement,local_bsz\n1,32\n")
    with pytest.raises(DataError) as info:
        load_profiles(table)
    message = str(info.value)
    assert f"traces folder {table} is not a folder" in message, message
    with pytest.raises(DataError, match="does not exist"):
        load_profiles(tmp_path / "nothere")
