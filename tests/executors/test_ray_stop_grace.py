"""The grace of a stop the Ray executor could not deliver at once (Ray's GCS unreachable):
recorded in the launch record (``unsignalled``) and sent again at the next poll. An endless
grace (``preempt(handle, inf)``) was recorded as ``Infinity``, which the record's check
refuses: the stop was dropped, and the run's command never got its SIGTERM."""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_ray import FakeRay, RayError, node
from run_helpers import launch, wait

from danlu.executors import GpuSlot, InvalidLaunchError
from danlu.executors.errors import ExecutorUnavailableError
from danlu.executors.ray_executor import RayExecutor

pytestmark = pytest.mark.xdist_group("ray")

SLEEP = "import time; time.sleep(60)"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeRay]:
    ray = FakeRay([node("n1")]).install(monkeypatch)
    try:
        yield ray
    finally:
        ray.close_all()


@pytest.fixture
def ex(fake: FakeRay, tmp_path: Path) -> RayExecutor:
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    return RayExecutor(tmp_path / "state", address=None, base_env=base, cancel_grace=1.0)


def _stops(fake: FakeRay) -> list[tuple[str, float]]:
    """The stops the run's actor was given: (reason, grace)."""
    return [args for _name, method, args in fake.calls if method == "stop"]


def test_an_endless_preemption_that_ray_missed_is_sent_again(
    ex: RayExecutor, fake: FakeRay
) -> None:
    handle = ex.submit(launch("endless", SLEEP, gpus=(GpuSlot(0, 0),)))
    assert ex.poll(handle).running
    fake.fail("stop.remote", RayError("the GCS is unreachable"))
    with pytest.raises(ExecutorUnavailableError, match="stop job endless"):
        ex.preempt(handle, math.inf)
    assert _stops(fake) == []
    ex.poll(handle)  # sends the stop again
    [(reason, grace)] = _stops(fake)
    assert reason == "preempt" and 0 < grace < math.inf
    assert wait(ex, handle).exit_code == 128 + 15  # the SIGTERM came


@pytest.mark.parametrize("grace", [math.nan, "30"])
def test_a_stop_grace_that_is_not_seconds_is_refused(
    ex: RayExecutor, fake: FakeRay, grace: object
) -> None:
    """``nan`` reached the actor, which cannot wait it: nothing was signalled, though the
    run's stop was recorded."""
    handle = ex.submit(launch("odd", SLEEP, gpus=(GpuSlot(0, 0),)))
    with pytest.raises(InvalidLaunchError, match=r"grace_seconds: .* give a number of seconds"):
        ex.preempt(handle, grace)  # type: ignore[arg-type]
    status = ex.poll(handle)
    assert status.running and status.stop_reason is None
    ex.cancel(handle)
