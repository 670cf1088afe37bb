"""A Ray run whose launch record is missing or damaged while its actors are alive holds only
the GPUs its actors were placed on (each tells its node and the ``CUDA_VISIBLE_DEVICES`` the
control plane gave it): every GPU of the cluster was held until it exited, so one such run on
one GPU kept every other job from launching anywhere. An actor of an older danlu, which
cannot tell, still holds every GPU."""

from __future__ import annotations

import os
import types
from pathlib import Path

import pytest
from fake_ray import FakeRay
from run_helpers import launch

from danlu.core.cluster import Cluster, Node
from danlu.executors import GpusBusyError, GpuSlot, Handle, supervise
from danlu.executors.ray_records import placed_gpus

pytestmark = pytest.mark.xdist_group("ray")

LONG = "import time; time.sleep(60)"
CLUSTER = Cluster((Node("n1", 4), Node("n2", 2)), "ray")


def _damaged(fake: FakeRay, state: Path) -> Path:
    """A run of job ``held-1`` on GPUs 1 and 2 of node n1, its launch record rewritten."""
    from danlu.executors.ray_executor import RayExecutor

    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    ex = RayExecutor(state, address=None, base_env=base)
    ex.submit(launch("held-1", LONG, gpus=(GpuSlot(0, 1), GpuSlot(0, 2))))
    run_dir = ex._runs / "held-1"
    (run_dir / supervise.LAUNCH).write_text('{"job_id": "held-1", "gpus": []}')
    return run_dir


def test_a_damaged_ray_run_holds_only_the_gpus_its_actors_were_given(
    fake: FakeRay, tmp_path: Path
) -> None:
    from danlu.executors.ray_executor import RayExecutor

    _damaged(fake, tmp_path / "state")
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    restarted = RayExecutor(tmp_path / "state", address=None, base_env=base)
    for gpu in (1, 2):
        with pytest.raises(GpusBusyError, match="held by job held-1"):
            restarted.submit(launch(f"other-{gpu}", LONG, gpus=(GpuSlot(0, gpu),)))
    for n, gpu in ((0, 0), (0, 3), (1, 1)):  # the GPUs it was not given are free
        job = launch(f"free-{n}-{gpu}", LONG, gpus=(GpuSlot(n, gpu),))
        assert restarted.submit(job) == Handle(job.job_id, 0)


def test_an_older_actor_without_its_placement_holds_every_gpu(
    fake: FakeRay, tmp_path: Path
) -> None:
    from danlu.executors.ray_executor import RayExecutor

    _damaged(fake, tmp_path / "state")
    actor = fake.actors["danlu.held-1.0.0"]
    actor.instance = types.SimpleNamespace(close=actor.instance.close)  # no placement()
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    restarted = RayExecutor(tmp_path / "state", address=None, base_env=base)
    with pytest.raises(GpusBusyError, match="held by job held-1"):
        restarted.submit(launch("other-1", LONG, gpus=(GpuSlot(1, 1),)))


def test_placements_map_to_the_inventory_s_gpus() -> None:
    placed = {"node": "n2", "visible": "1", "shared": False}
    held = placed_gpus("j", [placed, {"node": "n1", "visible": "3,0"}], CLUSTER, False)
    assert held is not None and list(held.gpus) == [(0, 0), (0, 3), (1, 1)]
    assert not held.shared and not held.stopping
    shared = placed_gpus("j", [{**placed, "shared": True}], CLUSTER, True)
    assert shared is not None and shared.shared and shared.stopping
    # no GPUs, or a node no longer in the inventory: none held
    empty = placed_gpus(
        "j", [{"node": None, "visible": ""}, {"node": "gone", "visible": "0"}], CLUSTER, False
    )
    assert empty is not None and list(empty.gpus) == []


@pytest.mark.parametrize(
    "answer",
    [
        None,
        {"node": "n1"},
        {"node": None, "visible": "0"},
        {"node": "n2", "visible": "2"},
        {"node": "n1", "visible": "GPU-5f1c"},
        {"node": 3, "visible": "0"},
    ],
)
def test_a_placement_that_names_no_known_gpu_holds_every_gpu(answer: object) -> None:
    assert placed_gpus("j", [answer], CLUSTER, False) is None
