"""An exit status above 128 is a death by signal ``status - 128`` only where that is a
signal (:func:`~danlu.executors.base.exit_signal`). The Ray executor reported a program's own
``exit(255)`` (``exit -1``, ssh's failure) as killed by signal 127, which no process can
get, and a run that exited 255 while being preempted was classified a preemption, as if it
had been killed, where its own exit status after the request is a failure."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_ray import FakeRay, node
from run_helpers import launch, wait

from danlu.core.cluster import Cluster
from danlu.executors import JobLaunch, Outcome, StopReason, classify_exit
from danlu.executors.base import exit_signal
from danlu.executors.fake import FakeExecutor, FakeWorld

pytestmark = pytest.mark.xdist_group("ray")


@pytest.mark.parametrize("code", [None, 0, 1, 75, 128, 255, 200, 128 + 65])
def test_an_exit_status_of_no_signal_names_none(code: int | None) -> None:
    assert exit_signal(code) is None


@pytest.mark.parametrize(("code", "sig"), [(129, 1), (137, 9), (143, 15), (128 + 64, 64)])
def test_an_exit_status_of_a_signal_names_it(code: int, sig: int) -> None:
    assert exit_signal(code) == sig


def test_a_run_that_exits_255_when_preempted_failed() -> None:
    assert classify_exit(255, "", StopReason.PREEMPT) is Outcome.FAILED
    assert classify_exit(137, "", StopReason.PREEMPT) is Outcome.PREEMPTED  # killed


@pytest.mark.parametrize(("exit_code", "sig"), [(143, signal.SIGTERM), (137, 9), (255, None)])
def test_a_fake_run_names_the_signal_its_exit_status_reports(
    exit_code: int, sig: int | None
) -> None:
    """The fake executor named signal 9 for 137 alone, none for a death by SIGTERM (143)."""
    world = FakeWorld()
    ex = FakeExecutor(Cluster.homogeneous(1, 1), world)
    world.script("j", duration=1, outcome=Outcome.FAILED, exit_code=exit_code)
    handle = ex.submit(JobLaunch("j", ("python", "train.py")))
    world.clock.advance(1)
    status = ex.poll(handle)
    assert (status.exit_code, status.signal) == (exit_code, sig)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeRay]:
    ray = FakeRay([node("n1")]).install(monkeypatch)
    try:
        yield ray
    finally:
        ray.close_all()


@pytest.mark.parametrize(
    ("code", "exit_code", "sig"),
    [
        ("import sys; sys.exit(255)", 255, None),
        ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", 137, signal.SIGKILL),
    ],
)
def test_a_ray_run_names_a_signal_only_for_a_death_by_one(
    fake: FakeRay, tmp_path: Path, code: str, exit_code: int, sig: int | None
) -> None:
    from danlu.executors.ray_executor import RayExecutor

    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    ex = RayExecutor(tmp_path / "state", address=None, base_env=base)
    status = wait(ex, ex.submit(launch("exits", code)), 30)
    assert (status.exit_code, status.signal, status.outcome) == (exit_code, sig, Outcome.FAILED)
    again = RayExecutor(tmp_path / "state", address=None, base_env=base)  # as recorded
    (handle,) = again.adopt()
    assert again.poll(handle).signal == sig
