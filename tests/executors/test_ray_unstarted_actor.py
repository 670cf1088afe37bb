"""A Ray actor whose creation fails on its node (danlu not importable there, its
``__init__`` raising) against a fake Ray (:mod:`fake_ray`): the run fails naming the node,
Ray's cause and the fix, instead of counting as lost with a node that is still there (which
re-queued the job at once, onto the same node, for ever)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_ray import ActorDiedError, FakeRay, node
from run_helpers import launch

from danlu.executors import GpuSlot, Outcome, RunState
from danlu.executors.ray_executor import RayExecutor

# Its runs make ``danlu-run-*`` folders, which test_ray.py counts: same xdist worker.
pytestmark = pytest.mark.xdist_group("ray")

SLEEP = "import time; time.sleep(60)"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeRay]:
    ray = FakeRay([node("n1"), node("n2")]).install(monkeypatch)
    try:
        yield ray
    finally:
        ray.close_all()


@pytest.fixture
def ex(fake: FakeRay, tmp_path: Path) -> RayExecutor:
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    return RayExecutor(tmp_path / "state", address=None, base_env=base, cancel_grace=1.0)


def test_an_actor_that_cannot_import_danlu_fails_the_run_not_its_node(
    ex: RayExecutor, fake: FakeRay
) -> None:
    fake.init_error = ModuleNotFoundError("No module named 'danlu'")
    handle = ex.submit(launch("noimport", SLEEP, gpus=(GpuSlot(0, 0),)))
    status = ex.poll(handle)
    assert status.state is RunState.EXITED
    assert not status.node_lost and status.outcome is Outcome.FAILED
    assert "n1: ModuleNotFoundError: No module named 'danlu'" in status.message
    assert "pip install 'danlu[ray]'" in status.message and "\x1b" not in status.message
    assert fake.live("danlu.noimport.") == []


def test_an_actor_that_fails_on_one_node_ends_the_others_of_its_run(
    ex: RayExecutor, fake: FakeRay, tmp_path: Path
) -> None:
    """The node whose actor started has its command ended with the run; only the node whose
    actor failed is named."""
    handle = ex.submit(launch("half", SLEEP, gpus=(GpuSlot(0, 0), GpuSlot(1, 0))))
    fake.actors["danlu.half.0.1"].init_error = OSError("No space left on device")
    status = ex.poll(handle)
    assert status.outcome is Outcome.FAILED and not status.node_lost
    assert "n2: OSError: No space left on device" in status.message
    assert "n1:" not in status.message
    assert fake.live("danlu.half.") == []


def test_a_dead_actor_whose_creation_had_run_is_still_a_lost_node(
    ex: RayExecutor, fake: FakeRay
) -> None:
    handle = ex.submit(launch("lost", SLEEP, gpus=(GpuSlot(0, 0),)))
    assert ex.poll(handle).running
    fake.actors["danlu.lost.0.0"].dead()
    status = ex.poll(handle)
    assert status.node_lost and status.outcome is Outcome.PREEMPTED


def test_creation_failure_reads_rays_cause_from_its_last_line() -> None:
    from danlu.executors.ray_results import creation_failure

    ray_text = (
        "The actor died because of an error raised in its creation task, \x1b[36mray::a:"
        "NodeRun.__init__()\x1b[39m (pid=1, ip=10.0.0.1)\n           ^^^^^^^^^^^^\n"
        "RuntimeError: The actor with name NodeRun failed to import on the worker.\n\n"
        "\x1b[36mray::a:NodeRun.__init__()\x1b[39m (pid=1)\n          ^^^^^^^^\n"
        "ModuleNotFoundError: No module named 'danlu'\n"
    )
    cause = creation_failure(ActorDiedError(ray_text, actor_init_failed=True))
    assert cause == "ModuleNotFoundError: No module named 'danlu'"
    assert creation_failure(ActorDiedError("the actor died (its node lost)")) is None
    long = creation_failure(ActorDiedError("x" * 5000, actor_init_failed=True))
    assert long is not None and len(long) == 500 and long.endswith("...")


def test_a_real_ray_error_carries_the_flag_read() -> None:
    """Ray's own ``ActorDiedError`` has the ``actor_init_failed`` flag read (where Ray is
    installed)."""
    exceptions = pytest.importorskip("ray.exceptions")
    assert isinstance(exceptions.ActorDiedError.actor_init_failed, property)


def test_a_run_whose_actor_never_answers_says_so_not_that_it_is_gone(
    fake: FakeRay, tmp_path: Path
) -> None:
    """An actor that has not answered once by START_TIMEOUT after the launch (Ray has not
    started it on its node, or cannot reach it) ends the run as a lost node does (the job
    re-queued free), but its message said the actor "is gone (node lost?)", with Ray
    saying nothing of the kind: it names the wait and where to look instead."""
    from danlu.executors.ray_executor import START_TIMEOUT

    now = [1000.0]
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    ex = RayExecutor(tmp_path / "state", address=None, base_env=base, clock=lambda: now[0])
    handle = ex.submit(launch("silent", SLEEP, gpus=(GpuSlot(1, 0),)))
    fake.actors["danlu.silent.0.0"].hanging = True
    assert ex.poll(handle).running  # still starting
    now[0] += START_TIMEOUT + 1
    status = ex.poll(handle)
    assert status.node_lost and status.outcome is Outcome.PREEMPTED
    assert f"on n2 did not answer within {START_TIMEOUT:g} s of the launch" in status.message
    assert "is gone" not in status.message and "Ray logs" in status.message


def test_a_lost_actor_of_a_run_without_gpus_names_its_node_as_such(
    ex: RayExecutor, fake: FakeRay
) -> None:
    """A run without GPUs (the executor's API: Ray picks its node) names no node: the
    message said "on ? is gone"."""
    handle = ex.submit(launch("anywhere", SLEEP))
    assert ex.poll(handle).running
    fake.actors["danlu.anywhere.0.0"].dead()
    status = ex.poll(handle)
    assert status.node_lost
    assert "the run's actor on its node is gone" in status.message
