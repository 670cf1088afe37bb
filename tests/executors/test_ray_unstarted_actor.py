"""A Ray actor whose creation fails on its node (danlu not importable there, its
``__init__`` raising) against a fake Ray (:mod:`fake_ray`): the run fails naming the node,
Ray's cause and the fix, instead of counting as lost with a node that is still there (which
re-queued the job at once, onto the same node, for ever)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fake_ray import ActorDiedError, FakeRay
from run_helpers import launch

from danlu.executors import ExecutorUnavailableError, GpuSlot, Handle, Outcome, RunState
from danlu.executors.ray_executor import RayExecutor

# Its runs make ``danlu-run-*`` folders, which test_ray.py counts: same xdist worker.
pytestmark = pytest.mark.xdist_group("ray")

SLEEP = "import time; time.sleep(60)"


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


def _silent_run(
    fake: FakeRay, tmp_path: Path, job_id: str, gpus: tuple[GpuSlot, ...], silent: str
) -> tuple[RayExecutor, Handle, list[float]]:
    """A run of ``job_id`` whose actor ``silent`` never answers, launched at a clock of the
    test's (its list's one value), still starting at its first poll."""
    now = [1000.0]
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    ex = RayExecutor(tmp_path / "state", address=None, base_env=base, clock=lambda: now[0])
    handle = ex.submit(launch(job_id, SLEEP, gpus=gpus))
    fake.actors[silent].hanging = True
    assert ex.poll(handle).running  # still starting
    return ex, handle, now


def test_a_run_whose_actor_never_answers_on_a_live_node_could_not_start_there(
    fake: FakeRay, tmp_path: Path
) -> None:
    """An actor that has not answered once by START_TIMEOUT after the launch, on a node Ray
    lists alive (Ray has not started it there, or it cannot be reached): the run ended as
    one lost with its node, the job re-queued at once with nothing counted, onto the same
    free node, every START_TIMEOUT for ever. It is a run that could not start there
    (``start_failed_on``: counted toward the node's cordon and the job's bound), and its
    message names the wait and where to look, not that the actor "is gone"."""
    from danlu.executors.ray_executor import START_TIMEOUT

    ex, handle, now = _silent_run(fake, tmp_path, "silent", (GpuSlot(1, 0),), "danlu.silent.0.0")
    now[0] += START_TIMEOUT + 1
    status = ex.poll(handle)
    assert status.state is RunState.EXITED
    assert not status.node_lost and status.outcome is Outcome.FAILED
    assert status.start_failed_on == ("n2",)
    assert f"on n2 did not answer within {START_TIMEOUT:g} s of the launch" in status.message
    assert "is gone" not in status.message and "Ray logs" in status.message
    assert fake.live("danlu.silent.") == []
    assert ex.poll(handle).start_failed_on == ("n2",)  # recorded: the same at later polls


def test_only_the_silent_node_of_a_run_is_named(fake: FakeRay, tmp_path: Path) -> None:
    """Of a run over two nodes whose actor on n1 answers, only n2 could not start it."""
    from danlu.executors.ray_executor import START_TIMEOUT

    gpus = (GpuSlot(0, 0), GpuSlot(1, 0))
    ex, handle, now = _silent_run(fake, tmp_path, "half-silent", gpus, "danlu.half-silent.0.1")
    now[0] += START_TIMEOUT + 1
    status = ex.poll(handle)
    assert status.start_failed_on == ("n2",) and not status.node_lost
    assert "on n2 did not answer" in status.message and "n1" not in status.message


def test_a_run_whose_silent_actors_node_left_ray_is_lost_with_it(
    fake: FakeRay, tmp_path: Path
) -> None:
    """The node Ray no longer lists alive: the run is lost with it (re-queued free), and the
    node is not counted as one that could not start it."""
    from danlu.executors.ray_executor import START_TIMEOUT

    ex, handle, now = _silent_run(fake, tmp_path, "gone", (GpuSlot(1, 0),), "danlu.gone.0.0")
    fake.nodes[1]["Alive"] = False
    now[0] += START_TIMEOUT + 1
    status = ex.poll(handle)
    assert status.node_lost and status.outcome is Outcome.PREEMPTED
    assert status.start_failed_on == ()
    assert f"on n2 did not answer within {START_TIMEOUT:g} s" in status.message


def test_a_silent_actor_is_judged_only_once_rays_gcs_answers(fake: FakeRay, tmp_path: Path) -> None:
    """The GCS cannot be asked whether the node is alive (the control plane's own network
    gone): nothing is decided, the run is asked about again at the next poll."""
    from danlu.executors.ray_executor import START_TIMEOUT

    ex, handle, now = _silent_run(fake, tmp_path, "blip", (GpuSlot(1, 0),), "danlu.blip.0.0")
    now[0] += START_TIMEOUT + 1
    fake.fail("nodes", ConnectionError("GCS unreachable"))
    with pytest.raises(ExecutorUnavailableError):
        ex.poll(handle)
    assert fake.live("danlu.blip.") == ["danlu.blip.0.0"]  # nothing ended
    fake.actors["danlu.blip.0.0"].hanging = False  # the node's actor reached again
    status = ex.poll(handle)
    assert status.running and not status.start_failed_on


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
