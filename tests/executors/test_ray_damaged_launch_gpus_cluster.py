"""Against a real Ray cluster: a run whose launch record is damaged while its actors are
alive holds the GPUs its actors tell they were given (their node and
``CUDA_VISIBLE_DEVICES``), and an actor of an older danlu, which has no such method to call
(Ray's handle raises ``AttributeError``), leaves every GPU held."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ray_cluster import ray_cluster
from run_helpers import launch

from danlu.executors import GpusBusyError, GpuSlot, Handle, RunState, supervise

SRC = str(Path(__file__).resolve().parents[2] / "src")

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]


@pytest.fixture
def cluster() -> Iterator[Any]:
    with ray_cluster() as started:
        yield started


def test_a_damaged_run_holds_the_gpus_its_real_actors_were_given(
    cluster: Any, tmp_path: Path
) -> None:
    import ray

    from danlu.executors.ray_executor import RayExecutor

    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": SRC}

    def executor() -> RayExecutor:
        return RayExecutor(tmp_path / "state", address=None, namespace="danlu-test", base_env=base)

    ex = executor()
    n2 = [node.name for node in ex.inventory().nodes].index("n2")
    handle = ex.submit(
        launch("held-1", "import time; time.sleep(60)", gpus=(GpuSlot(n2, 1), GpuSlot(n2, 3)))
    )
    deadline = time.monotonic() + 60
    while ex.poll(handle).started_at is None:  # its actor answered
        assert ex.poll(handle).state is RunState.RUNNING
        assert time.monotonic() < deadline, "the run never started"
        time.sleep(0.2)
    run_dir = ex._runs / "held-1"
    (run_dir / supervise.LAUNCH).write_text('{"job_id": "held-1", "gpus": []}')

    restarted = executor()
    held = restarted._unread_gpus(run_dir)
    assert held is not None and sorted(map(tuple, held.gpus)) == [(n2, 1), (n2, 3)]
    with pytest.raises(GpusBusyError, match="held by job held-1"):
        restarted.submit(launch("other-1", "pass", gpus=(GpuSlot(n2, 3),)))
    assert restarted.submit(launch("other-2", "pass", gpus=(GpuSlot(n2, 0),))) == Handle(
        "other-2", 0
    )

    class OlderNodeRun:  # (local: Ray's workers get it by value, not by its module)
        """An actor of a danlu whose ``NodeRun`` has no ``placement``."""

        def status(self, offset: int = 0) -> dict[str, Any]:
            return {}

    older = ray.remote(OlderNodeRun).options(
        name="danlu.old-1.0.0", namespace="danlu-test", lifetime="detached", num_cpus=0
    )
    actor = older.remote()
    ray.get(actor.status.remote(), timeout=60)
    assert restarted._unread_gpus(restarted._runs / "old-1") is None
