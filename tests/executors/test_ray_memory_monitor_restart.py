"""A Ray actor that Ray's memory monitor killed while the control plane was down: the
restarted plane no longer finds it by its name (Ray drops a dead actor's name), and the run
read as one lost with its node (re-queued with no restart counted, to run out of memory
again). Ray's GCS keeps the dead actor's record, by its id, with the cause of its death (an
``oom_context`` carrying the memory monitor's account, as Ray 2.60 does: checked against a
real cluster whose memory monitor killed an actor); the launch records the actors' ids, and
the poll reads that cause: the run is the job's out-of-memory of the host's memory, a restart
counted, as when the plane saw the kill itself.

Against the fake Ray of :mod:`fake_ray`, whose GCS keeps each actor's record and cause."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fake_ray import FakeRay
from oom_reasons import reason
from run_helpers import launch

from danlu.executors import GpuSlot, Outcome, RunState
from danlu.executors.ray_executor import RayExecutor
from danlu.executors.ray_results import memory_monitor_death
from danlu.server.run_exits import HOST_MEMORY_FIX

# Its runs make ``danlu-run-*`` folders, which test_ray.py counts: same xdist worker.
pytestmark = pytest.mark.xdist_group("ray")

SLEEP = "import time; time.sleep(60)"
SAID = (
    "1 worker(s) were killed due to the node running low on memory. Memory on the node (IP: "
    "10.0.0.7, ID: 7fa4) was 4.71GB used / 23.54GB limit (0.200273)"
)
"""The first line of the memory monitor's account (Ray 2.60's words, abridged ID)."""
ACCOUNT = f"{SAID}\nOOM kill reason: Memory usage 5057925120B exceeded threshold\n"


def _executor(tmp_path: Path) -> RayExecutor:
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    return RayExecutor(tmp_path / "state", address=None, base_env=base, cancel_grace=1.0)


def test_a_memory_monitor_kill_while_the_plane_was_down_is_the_jobs_oom(
    fake: FakeRay, tmp_path: Path
) -> None:
    """Its reason names host memory and Ray's account; a run whose actor died with its node
    meanwhile is still lost with it."""
    ex = _executor(tmp_path)
    oom = ex.submit(launch("oom", SLEEP, gpus=(GpuSlot(0, 0), GpuSlot(1, 0))))
    lost = ex.submit(launch("lost", SLEEP, gpus=(GpuSlot(0, 1),)))
    assert ex.poll(oom).running and ex.poll(lost).running
    del ex  # the control plane goes down; meanwhile:
    fake.actors["danlu.oom.0.1"].memory_killed(ACCOUNT)
    fake.actors["danlu.lost.0.0"].dead()

    restarted = _executor(tmp_path)
    handles = {h.job_id: h for h in restarted.adopt()}
    status = restarted.poll(handles["oom"])
    assert status.state is RunState.EXITED
    assert (status.outcome, status.node_lost, status.host_memory) == (Outcome.OOM, False, True)
    said = f"killed by Ray's memory monitor: the node ran low on host memory (n2: {SAID})"
    assert status.message == said
    assert reason(status) == f"out of host memory (no exit code; {said}); not GPU memory: " + (
        HOST_MEMORY_FIX
    )
    assert fake.live("danlu.oom.") == []  # its actor on n1 killed with it

    gone = restarted.poll(handles["lost"])
    assert (gone.outcome, gone.node_lost, gone.host_memory) == (Outcome.PREEMPTED, True, False)


def test_the_causes_of_death_ray_keeps() -> None:
    """As ``MessageToDict`` gives the GCS's ``ActorDeathCause``: an ``oom_context``, an
    older Ray's worker exit type in the died context, another death."""
    assert memory_monitor_death({"oom_context": {"error_message": ACCOUNT}}) == SAID
    exit_type = (
        "The actor is dead because its worker process has died. Worker exit type: "
        "NODE_OUT_OF_MEMORY Worker exit detail: Task was killed due to the node running low"
    )
    died = {"actor_died_error_context": {"error_message": exit_type, "reason": "WORKER_DIED"}}
    assert memory_monitor_death(died) == "Task was killed due to the node running low"
    node = {
        "actor_died_error_context": {"error_message": "its node has died", "reason": "NODE_DIED"}
    }
    assert memory_monitor_death(node) is None
    assert memory_monitor_death({}) is None


def test_the_gcss_own_proto_is_read() -> None:
    """The actor table's ``DeathCause`` is Ray's ``ActorDeathCause`` proto, as Ray 2.60's
    GCS gives it for an actor its memory monitor killed (skipped without Ray, as the other
    Ray tests are, unless ``DANLU_TEST_REQUIRE_RAY`` says it must be there)."""
    try:
        from ray.core.generated import common_pb2
    except ImportError:
        if os.environ.get("DANLU_TEST_REQUIRE_RAY"):
            pytest.fail("Ray is required: pip install -e '.[ray]'")
        pytest.skip("Ray is not installed (pip install -e '.[ray]')")
    oom = common_pb2.ActorDeathCause(oom_context=common_pb2.OomContext(error_message=ACCOUNT))
    assert memory_monitor_death(oom) == SAID
    died = common_pb2.ActorDiedErrorContext(
        error_message="The actor died because its node has died.",
        reason=common_pb2.ActorDiedErrorContext.Reason.Value("NODE_DIED"),
    )
    assert memory_monitor_death(common_pb2.ActorDeathCause(actor_died_error_context=died)) is None
    assert memory_monitor_death(None) is None
