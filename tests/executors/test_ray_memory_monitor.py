"""A Ray actor whose worker Ray's memory monitor killed (its node ran low on host memory): the
run ends as the job's out-of-memory, a restart counted, not as a run lost with its node. Ray
raises its ``OutOfMemoryError`` for every call to such an actor, which is no
``RayActorError``: each poll of the run was an ``ExecutorUnavailableError``, the run never
ended while the control plane ran (its GPUs held), and after a restart, the actor not found
by name, it was counted lost with its node (re-queued with no restart, to run out again).

The classification is tested with Ray's own exception objects, as a poll gets them (their
text as Ray 2.x words it); the executor's poll against a fake Ray (:mod:`fake_ray`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from fake_ray import FakeRay
from run_helpers import launch

from danlu.executors import GpuSlot, Outcome, RunState, StopReason
from danlu.executors.ray_executor import RayExecutor
from danlu.executors.ray_results import memory_killed_result, memory_monitor_kill

# Its runs make ``danlu-run-*`` folders, which test_ray.py counts: same xdist worker.
pytestmark = pytest.mark.xdist_group("ray")

SLEEP = "import time; time.sleep(60)"
SAID = (
    "1 worker(s) were killed due to the node running low on memory. Memory on the node (IP: "
    "10.0.0.7, ID: 5e93) was 30.10GB used / 31.00GB limit (0.970968)"
)
"""The first line of the text of Ray's ``OutOfMemoryError`` (Ray 2.60, abridged ID)."""
OOM_TEXT = (
    f"\x1b[31m{SAID}\x1b[0m\n"
    "OOM kill reason: Memory usage 32319229132B exceeded threshold of 29450000000B\n"
    "Object store memory usage: [- objects spillable: 0\n\n"
    "Ray killed 1 worker(s) based on the killing policy\n"
    "Refer to the documentation on how to address the out of memory issue: https://docs.ray.io"
)
WORKER_DIED = "The actor is dead because its worker process has died. Worker exit type: "


@pytest.fixture
def ray_exceptions() -> Any:
    """Ray's ``ray.exceptions`` (skipped without Ray, as the other Ray tests are, unless
    ``DANLU_TEST_REQUIRE_RAY`` says it must be there)."""
    try:
        import ray.exceptions
    except ImportError:
        if os.environ.get("DANLU_TEST_REQUIRE_RAY"):
            pytest.fail("Ray is required: pip install -e '.[ray]'")
        pytest.skip("Ray is not installed (pip install -e '.[ray]')")
    return ray.exceptions


def actor_died(ray_exceptions: Any, message: str, reason: str) -> Exception:
    """Ray's ``ActorDiedError`` as a call to a dead actor gets it (the GCS's context)."""
    from ray.core.generated.common_pb2 import ActorDiedErrorContext

    context = ActorDiedErrorContext(
        error_message=message,
        class_name="NodeRunOnNode",
        actor_id=b"\x01" * 16,
        name="danlu.j.0.0",
        node_ip_address="10.0.0.7",
        reason=ActorDiedErrorContext.Reason.Value(reason),
    )
    error: Exception = ray_exceptions.ActorDiedError(context)
    return error


def test_rays_out_of_memory_error_is_a_memory_monitor_kill(ray_exceptions: Any) -> None:
    error = ray_exceptions.OutOfMemoryError(OOM_TEXT)
    assert memory_monitor_kill(error, (ray_exceptions.OutOfMemoryError,)) == SAID


def test_an_actor_died_error_naming_the_memory_monitors_exit_is_one(ray_exceptions: Any) -> None:
    detail = "Task was killed due to the node running low on memory."
    error = actor_died(
        ray_exceptions,
        f"{WORKER_DIED}NODE_OUT_OF_MEMORY Worker exit detail: {detail}",
        "WORKER_DIED",
    )
    assert memory_monitor_kill(error, (ray_exceptions.OutOfMemoryError,)) == detail


def test_other_deaths_are_no_memory_monitor_kill(ray_exceptions: Any) -> None:
    """A worker that died otherwise (the kernel's OOM killer only a cause Ray guesses at), a
    node that died: gone, not killed by Ray's memory monitor."""
    crashed = actor_died(
        ray_exceptions,
        f"{WORKER_DIED}SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a "
        "connection error code 2. End of file. There are some potential root causes. (1) The "
        "process is killed by SIGKILL by OOM killer due to high memory usage.",
        "WORKER_DIED",
    )
    node_died = actor_died(
        ray_exceptions, "The actor died because its node has died. Node Id: 5e93", "NODE_DIED"
    )
    for error in (crashed, node_died, ray_exceptions.ActorDiedError()):
        assert memory_monitor_kill(error, (ray_exceptions.OutOfMemoryError,)) is None


def test_a_memory_monitor_kill_is_the_jobs_out_of_memory_not_a_lost_node() -> None:
    result = memory_killed_result(["n1", "n2"], {1: SAID}, 100.0, None)
    assert result["outcome"] == Outcome.OOM.value and "node_lost" not in result
    assert result["error"] == (
        f"killed by Ray's memory monitor: the node ran low on host memory (n2: {SAID})"
    )
    during_preemption = memory_killed_result(["n1"], {0: SAID}, 100.0, StopReason.PREEMPT)
    assert during_preemption["outcome"] == Outcome.PREEMPTED.value


@pytest.fixture
def ex(fake: FakeRay, tmp_path: Path) -> RayExecutor:
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    return RayExecutor(tmp_path / "state", address=None, base_env=base, cancel_grace=1.0)


def test_a_run_whose_actor_the_memory_monitor_killed_ends_out_of_memory(
    ex: RayExecutor, fake: FakeRay, tmp_path: Path
) -> None:
    """Its other node's actor is killed with it; a restarted control plane reads the result
    recorded, not a run lost with its node."""
    handle = ex.submit(launch("oom", SLEEP, gpus=(GpuSlot(0, 0), GpuSlot(1, 0))))
    assert ex.poll(handle).running
    fake.actors["danlu.oom.0.1"].memory_killed(OOM_TEXT)
    status = ex.poll(handle)
    assert status.state is RunState.EXITED
    assert status.outcome is Outcome.OOM and not status.node_lost
    assert status.exit_code is None and status.signal is None
    assert status.message == (
        f"killed by Ray's memory monitor: the node ran low on host memory (n2: {SAID})"
    )
    assert fake.live("danlu.oom.") == []
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    restarted = RayExecutor(tmp_path / "state", address=None, base_env=base)
    (adopted,) = restarted.adopt()
    again = restarted.poll(adopted)
    assert again.outcome is Outcome.OOM and not again.node_lost
