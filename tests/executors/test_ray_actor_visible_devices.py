"""The GPUs a Ray run's command sees on a node whose Ray was started with a
``CUDA_VISIBLE_DEVICES`` of its own (``CUDA_VISIBLE_DEVICES=2,3 ray start ...``): Ray counts
two GPUs there, danlu places runs on its GPUs 0 and 1 (Ray's slots), and Ray would hand a
task on slot 1 device 3. The command must see device 3, not the machine's device 1 (another
user's GPU), while danlu keeps recording GPU 1 (what the launch record and the actor's
placement say)."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import pytest
from run_helpers import until_exit

from danlu.executors.ray_actor import NodeRun, node_visible_devices
from danlu.executors.ray_executor import NodeRunOnNode

# Its runs make ``danlu-run-*`` folders, which test_ray.py counts: same xdist worker.
pytestmark = pytest.mark.xdist_group("ray")

PRINT_DEVICES = [sys.executable, "-c", "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])"]


@pytest.mark.parametrize(
    ("given", "node", "seen"),
    [
        ("0,1", "2,3", "2,3"),
        ("1", "2,3", "3"),
        ("1,0", " 4, 6 ", "6,4"),
        ("0", "GPU-1f2e,GPU-9a8b", "GPU-1f2e"),  # a node naming its GPUs by UUID
        ("", "2,3", ""),  # a run without GPUs sees none
        ("0,1", None, "0,1"),  # the node names none: every device is the node's
        ("0,1", "", "0,1"),
        (None, "2,3", None),
    ],
)
def test_danlu_s_gpu_indices_are_positions_in_the_node_s_own_list(
    given: str | None, node: str | None, seen: str | None
) -> None:
    assert node_visible_devices(given, node) == seen


def test_an_index_past_the_node_s_list_is_refused_naming_the_variable() -> None:
    with pytest.raises(
        ValueError, match=r"GPU 2 .*\(CUDA_VISIBLE_DEVICES=2,3\).*--num-gpus at most 2"
    ):
        node_visible_devices("0,2", "2,3")


def test_the_command_sees_the_node_s_devices_and_the_placement_keeps_danlu_s(
    tmp_path: Path,
) -> None:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "CUDA_VISIBLE_DEVICES": "1"}
    run = NodeRun(PRINT_DEVICES, env, log_dir=str(tmp_path), node="gpu07", node_visible="2,3")
    done = until_exit(run)
    assert done["exit_code"] == 0
    assert done["output"] == b"3\n"
    assert run.placement() == {"node": "gpu07", "visible": "1", "shared": False}
    run.close()


def test_the_ray_actor_reads_its_node_s_own_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The actor's class reads the variable its process has: the node's raylet's (Ray sets
    none for an actor that asks for no GPU) when Ray recorded none at the worker's start."""
    _ray_recorded(monkeypatch, None)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "CUDA_VISIBLE_DEVICES": "0,1"}
    run = NodeRunOnNode(PRINT_DEVICES, env, log_dir=str(tmp_path), node="gpu07")
    assert until_exit(run)["output"] == b"2,3\n"
    assert run.placement()["visible"] == "0,1"
    run.close()


def test_the_ray_actor_reads_the_list_its_worker_was_started_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """For an actor asking for no GPU, Ray (by default until 2026; later with
    RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=1) sets the process's variable to "" before the
    actor starts: the node's list is the one Ray recorded when the worker started, which Ray
    maps GPU slots through. Read from the environment, danlu's GPU 1 was the machine's
    device 1 on a node started with 2,3."""
    pytest.importorskip("ray._private.worker")
    _ray_recorded(monkeypatch, ["2", "3"])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # as Ray set it for this actor
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "CUDA_VISIBLE_DEVICES": "1"}
    run = NodeRunOnNode(PRINT_DEVICES, env, log_dir=str(tmp_path), node="gpu07")
    assert until_exit(run)["output"] == b"3\n"
    assert run.placement()["visible"] == "1"
    run.close()


def test_a_worker_started_without_a_list_leaves_danlu_s_indices_as_they_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker Ray recorded with an empty list or none (the variable unset when it started)
    maps nothing, whatever Ray set since: the command gets danlu's indices as they are."""
    pytest.importorskip("ray._private.worker")
    for listed in ([], None):
        _ray_recorded(monkeypatch, listed)
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "CUDA_VISIBLE_DEVICES": "1"}
        run = NodeRunOnNode(PRINT_DEVICES, env, log_dir=str(tmp_path / str(listed)))
        assert until_exit(run)["output"] == b"1\n"
        run.close()


def _ray_recorded(monkeypatch: pytest.MonkeyPatch, listed: list[str] | None) -> None:
    """Make Ray's record of the GPUs this process started with ``listed`` (None: the
    variable unset then), where Ray is installed."""
    try:
        worker = importlib.import_module("ray._private.worker")
    except ImportError:
        return
    recorded = {**worker.global_worker.original_visible_accelerator_ids, "GPU": listed}
    monkeypatch.setattr(worker.global_worker, "original_visible_accelerator_ids", recorded)
