"""The Ray executor against a fake Ray (:mod:`fake_ray`): the actors are real
:class:`~danlu.executors.ray_actor.NodeRun` objects in this process, the faults are Ray's as
the executor meets them. An actor unreachable for a moment is not a lost node; a run without
GPUs gets torchrun's settings for one node on this host; a run's exit is its first failure in
time; actors whose kill failed are killed at a later poll; Ray's errors in a poll or a stop
are :class:`ExecutorUnavailableError`; a node name two Ray nodes share refuses only the
launches onto it."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from fake_ray import FakeRay, ObjectLostError, RayError, node
from run_helpers import ENV_DUMP, launch, wait

from danlu.executors import GpuSlot, Outcome, RunState, StopReason, ray_executor, slurm_task
from danlu.executors.errors import ExecutorUnavailableError, NodeLaunchError
from danlu.executors.ray_actor import NodeRun
from danlu.executors.ray_executor import RayExecutor

# Its runs make ``danlu-run-*`` folders, which test_ray.py counts: same xdist worker.
pytestmark = pytest.mark.xdist_group("ray")

PY = sys.executable
SLEEP = "import time; time.sleep(60)"
TWO_NODES = (GpuSlot(0, 0), GpuSlot(1, 0))


class Clock:
    """The executor's clock: the time now, plus what a test moved it on by."""

    def __init__(self) -> None:
        self.skew = 0.0

    def __call__(self) -> float:
        return time.time() + self.skew


@pytest.fixture
def clock() -> Clock:
    return Clock()


def executor(state: Path, clock: Clock | None = None) -> RayExecutor:
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    return RayExecutor(state, address=None, base_env=base, cancel_grace=1.0, clock=clock or Clock())


@pytest.fixture
def ex(fake: FakeRay, tmp_path: Path, clock: Clock) -> RayExecutor:
    return executor(tmp_path / "state", clock)


def _until(check: Any, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


# -- an actor unavailable for a moment ----------------------------------------------------------


def test_an_actor_unavailable_for_a_moment_leaves_the_run_running(
    ex: RayExecutor, fake: FakeRay
) -> None:
    """Ray's ActorUnavailableError (a RayActorError: a network blip) is no lost node: the
    run still runs, no actor is killed, and the next poll asks again."""
    handle = ex.submit(launch("blip", SLEEP, gpus=TWO_NODES))
    assert ex.poll(handle).state is RunState.RUNNING
    fake.actors["danlu.blip.0.1"].unavailable = True
    status = ex.poll(handle)
    assert status.state is RunState.RUNNING and not status.node_lost
    assert fake.killed == []
    fake.actors["danlu.blip.0.1"].unavailable = False
    assert ex.poll(handle).state is RunState.RUNNING
    assert fake.live("danlu.blip.") == ["danlu.blip.0.0", "danlu.blip.0.1"]


def test_a_dead_actor_makes_the_run_lost_with_its_node(ex: RayExecutor, fake: FakeRay) -> None:
    handle = ex.submit(launch("died", SLEEP, gpus=TWO_NODES))
    assert ex.poll(handle).running
    fake.actors["danlu.died.0.1"].dead()
    status = ex.poll(handle)
    assert status.state is RunState.EXITED and status.node_lost
    assert status.outcome is Outcome.PREEMPTED and "n2" in status.message
    assert fake.live("danlu.died.") == []


def test_an_actor_ray_cannot_find_is_gone(fake: FakeRay, tmp_path: Path) -> None:
    """A new executor (a restarted control plane) looks the actors up by name."""
    handle = executor(tmp_path / "state").submit(launch("lookup", SLEEP, gpus=TWO_NODES))
    fake.actors["danlu.lookup.0.0"].dead()
    status = executor(tmp_path / "state").poll(handle)
    assert status.node_lost and "n1" in status.message


# -- a run without GPUs ---------------------------------------------------------------------


def test_a_run_without_gpus_gets_torchruns_settings_for_this_host(
    ex: RayExecutor, fake: FakeRay
) -> None:
    handle = ex.submit(launch("cpu", ENV_DUMP))
    assert wait(ex, handle, 15).outcome is Outcome.SUCCEEDED
    line = ex.logs(handle)[0].decode().split("ENV ", 1)[1].splitlines()[0]
    env = json.loads(line)
    assert env["PET_MASTER_ADDR"] == "127.0.0.1"
    assert env["PET_NNODES"] == "1" and env["PET_NODE_RANK"] == "0"
    assert env["CUDA_VISIBLE_DEVICES"] == ""


def test_the_slurm_task_of_a_run_without_nodes_counts_one_node() -> None:
    task: dict[str, object] = {"env": {}, "devices": {}, "nodes": [], "master_addr": "127.0.0.1"}
    env = slurm_task.task_env(task, {"SLURMD_NODENAME": "n1", "SLURM_NODEID": "0"})
    assert env["PET_NNODES"] == "1" and env["PET_NODE_RANK"] == "0"
    assert env["PET_MASTER_ADDR"] == "127.0.0.1"


# -- the first failure in time --------------------------------------------------------------


def test_the_runs_exit_is_its_first_failure_in_time(
    ex: RayExecutor, fake: FakeRay, tmp_path: Path
) -> None:
    """Node 1 fails (3), node 0 fails half a second later (9); both have exited when the
    first poll asks: the run's exit is 3, whichever actor is asked first."""
    code = (
        "import os, pathlib, sys, time\n"
        "rank = os.environ['PET_NODE_RANK']\n"
        "if rank == '0':\n"
        "    time.sleep(0.5)\n"
        f"pathlib.Path({str(tmp_path)!r}, 'exited-' + rank).write_text('')\n"
        "sys.exit(9 if rank == '0' else 3)\n"
    )
    handle = ex.submit(launch("first", code, gpus=TWO_NODES))
    _until(lambda: all((tmp_path / f"exited-{r}").exists() for r in "01"))
    time.sleep(0.3)
    status = wait(ex, handle, 15)
    assert status.exit_code == 3 and status.outcome is Outcome.FAILED


def test_a_node_run_stamps_its_commands_exit_when_it_happens(tmp_path: Path) -> None:
    marker = tmp_path / "exiting"
    code = f"import pathlib; pathlib.Path({str(marker)!r}).write_text('')"
    run = NodeRun([PY, "-c", code], {"PATH": os.environ["PATH"]}, log_dir=str(tmp_path))
    try:
        _until(marker.exists)
        seen = time.time()
        time.sleep(1.0)
        status = run.status()
        assert status["exit_code"] == 0
        assert status["finished_at"] is not None and status["finished_at"] < seen + 0.5
    finally:
        run.close()


# -- killing the actors of a run that ended -------------------------------------------------


def test_a_kill_that_failed_is_made_again_at_a_later_poll(ex: RayExecutor, fake: FakeRay) -> None:
    handle = ex.submit(launch("leak", "print('done')", gpus=TWO_NODES))
    fake.fail("close.remote", ConnectionError("the GCS is unreachable"), times=2)
    fake.fail("kill", RayError("the GCS is unreachable"), times=2)
    status = wait(ex, handle, 15)  # the poll that sees the end neither raises
    assert status.outcome is Outcome.SUCCEEDED
    assert fake.live("danlu.leak.") == ["danlu.leak.0.0", "danlu.leak.0.1"]
    run_dir = ex._runs / "leak"
    assert not (run_dir / ray_executor.KILLED).exists()
    assert ex.poll(handle).outcome is Outcome.SUCCEEDED  # Ray answers again: killed now
    assert fake.live("danlu.leak.") == []
    assert (run_dir / ray_executor.KILLED).exists()
    killed = list(fake.killed)
    assert ex.poll(handle).outcome is Outcome.SUCCEEDED
    assert fake.killed == killed  # recorded: not asked again


def test_a_kill_that_failed_is_made_again_at_another_runs_poll(
    ex: RayExecutor, fake: FakeRay, clock: Clock
) -> None:
    other = ex.submit(launch("other", SLEEP, gpus=(GpuSlot(0, 1),)))
    handle = ex.submit(launch("ended", "print('done')", gpus=(GpuSlot(1, 1),)))
    fake.fail("kill", RayError("the GCS is unreachable"))
    assert wait(ex, handle, 15).outcome is Outcome.SUCCEEDED
    assert fake.live("danlu.ended.") == ["danlu.ended.0.0"]
    assert ex.poll(other).running  # not again this soon
    assert fake.live("danlu.ended.") == ["danlu.ended.0.0"]
    clock.skew += ray_executor.KILL_RETRY + 1
    assert ex.poll(other).running
    assert fake.live("danlu.ended.") == []
    assert (ex._runs / "ended" / ray_executor.KILLED).exists()


# -- Ray's errors ---------------------------------------------------------------------------


def test_a_ray_error_in_a_poll_is_executor_unavailable(
    ex: RayExecutor, fake: FakeRay, tmp_path: Path
) -> None:
    handle = ex.submit(launch("lost", SLEEP, gpus=TWO_NODES))
    assert ex.poll(handle).running
    fake.fail("get", ObjectLostError("the node holding the answer died"))
    with pytest.raises(ExecutorUnavailableError, match="answer"):
        ex.poll(handle)
    fake.fail("wait", RayError("the GCS is unreachable"))
    with pytest.raises(ExecutorUnavailableError):
        ex.poll(handle)
    fake.fail("get_actor", RayError("the GCS is unreachable"))
    with pytest.raises(ExecutorUnavailableError):
        executor(tmp_path / "state").poll(handle)  # no handle cached: looked up
    assert ex.poll(handle).running  # none was taken for a lost node
    assert fake.killed == []


def test_a_stop_ray_could_not_deliver_is_delivered_at_the_next_poll(
    ex: RayExecutor, fake: FakeRay
) -> None:
    handle = ex.submit(launch("stopme", SLEEP, gpus=TWO_NODES))
    assert ex.poll(handle).running
    fake.fail("stop.remote", RayError("the GCS is unreachable"))
    with pytest.raises(ExecutorUnavailableError):
        ex.cancel(handle)
    status = wait(ex, handle, 15)
    assert status.stop_reason is StopReason.CANCEL and status.exit_code == 128 + 15


def test_a_gang_stop_ray_could_not_deliver_is_made_at_the_next_poll(
    ex: RayExecutor, fake: FakeRay
) -> None:
    code = "import os, sys, time\nif os.environ['PET_NODE_RANK'] == '1': sys.exit(4)\n" + SLEEP
    handle = ex.submit(launch("gang", code, gpus=TWO_NODES))
    _until(lambda: fake.actors["danlu.gang.0.1"].instance.exit_code() is not None)
    fake.fail("stop.remote", RayError("the GCS is unreachable"))
    assert ex.poll(handle).running  # the gang stop failed: not recorded as made
    status = wait(ex, handle, 15)
    assert status.exit_code == 4 and status.outcome is Outcome.FAILED


# -- two Ray nodes of one name --------------------------------------------------------------


def test_a_name_two_other_nodes_share_does_not_block_a_launch(
    ex: RayExecutor, fake: FakeRay, caplog: pytest.LogCaptureFixture
) -> None:
    assert [n.name for n in ex.inventory().nodes] == ["n1", "n2"]
    fake.nodes.append(node("n2", NodeID="id-other"))
    with caplog.at_level(logging.WARNING):
        handle = ex.submit(launch("on-n1", "print(1)", gpus=(GpuSlot(0, 0),)))
    assert wait(ex, handle, 15).outcome is Outcome.SUCCEEDED
    assert "n2" in caplog.text


def test_a_name_two_nodes_of_the_run_share_is_a_node_fault(ex: RayExecutor, fake: FakeRay) -> None:
    ex.inventory()
    fake.nodes.append(node("n2", NodeID="id-other"))
    with pytest.raises(NodeLaunchError, match="n2") as raised:
        ex.submit(launch("on-n2", "print(1)", gpus=TWO_NODES))
    assert raised.value.nodes == ("n2",)
    assert fake.actors == {}
