"""The bridge of ``benchmarks/artifact_crosscheck.py`` between danlu's policy and the Pollux
artifact's simulator, against a stand-in of the artifact's jobs built on danlu's profiles
(the artifact itself is not part of danlu's data)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from danlu.sched.policies.danlu import DanluPolicy
from danlu.sim.elastic import ApplicationProfile, load_profiles

POLLUX = Path(__file__).resolve().parents[2] / "../shared/data/pollux"

pytestmark = pytest.mark.skipif(
    not (POLLUX / "traces").is_dir(),
    reason=f"Pollux artifact data not found at {POLLUX.resolve()} (../shared/data is absent)",
)


Load = Callable[[str], ModuleType]


@dataclass
class _App:
    """The artifact's ``Application`` interface, answered from danlu's profile."""

    profile: ApplicationProfile

    @property
    def name(self) -> str:
        return self.profile.name

    def __getattr__(self, attr: str) -> Any:  # the batch limits and max_epochs
        return getattr(self.profile, attr)

    def get_progress(self, epoch: int) -> float:
        return 0.0 if epoch == 0 else self.profile.epoch_boundaries[epoch - 1]

    def get_throughput(self, placement: tuple[int, ...], local_bsz: int) -> tuple[float, float]:
        return self.profile.step_time(placement, local_bsz)

    def get_grad_stats(self, batch_size: int, epoch: int) -> tuple[float, float]:
        return self.profile.grad_stats(batch_size, epoch)


def _job(app: _App, name: str, *, target_batch_size: int | None = None) -> SimpleNamespace:
    return SimpleNamespace(
        name=name,
        application=app,
        submission_time=0.0,
        target_batch_size=target_batch_size,
        progress=0.0,
        epoch=0,
        placement=(),
        atomic_bsz=0,
        accum_steps=0,
        completion_time=None,
    )


def _workload(*rows: tuple[str, int, int]) -> Any:
    """The artifact's workload frame: ``itertuples()`` rows with name, replicas, batch."""
    records = [SimpleNamespace(name=n, num_replicas=r, batch_size=b) for n, r, b in rows]
    return SimpleNamespace(itertuples=lambda: iter(records))


@pytest.fixture(scope="module")
def apps() -> dict[str, _App]:
    profiles = load_profiles(POLLUX / "traces")
    return {name: _App(profiles[name]) for name in ("cifar10", "ncf")}


def test_a_running_job_reports_its_placement_batch_and_progress(
    load_benchmark: Load, apps: dict[str, _App]
) -> None:
    bench = load_benchmark("artifact_crosscheck")
    cifar = apps["cifar10"]
    bridge = bench.ArtifactBridge(DanluPolicy(), _workload(("cifar10-0", 2, 128)))
    job = _job(cifar, "cifar10-0")
    job.placement, job.atomic_bsz, job.accum_steps, job.epoch = (4, 2), 128, 1, 3
    job.progress = cifar.profile.target_progress / 2
    seen = bridge.observed(job)
    step, sync = cifar.profile.step_time((4, 2), 128)
    sqr, var = cifar.profile.grad_stats(6 * 128 * 2, 3)
    assert seen["progress"] == pytest.approx(0.5)
    assert seen["adaptive"] == 1.0
    assert seen["target_batch"] == 128.0  # the workload's batch: the job picks its own
    assert (seen["num_replicas"], seen["num_nodes"], seen["batch_size"]) == (6.0, 2.0, 1536.0)
    assert (seen["step_time"], seen["sync_time"]) == (pytest.approx(step), pytest.approx(sync))
    assert (seen["grad_sqr"], seen["grad_var"]) == (pytest.approx(sqr), pytest.approx(var))
    job.placement = ()
    assert "step_time" not in bridge.observed(job)  # nothing measured off the GPUs


def test_a_job_at_a_fixed_batch_is_not_adaptive(
    load_benchmark: Load, apps: dict[str, _App]
) -> None:
    bench = load_benchmark("artifact_crosscheck")
    bridge = bench.ArtifactBridge(DanluPolicy(), _workload(("ncf-0", 1, 1024)))
    seen = bridge.observed(_job(apps["ncf"], "ncf-0", target_batch_size=32768))
    assert "adaptive" not in seen
    assert seen["target_batch"] == 32768.0


def test_rounds_hand_the_artifact_node_lists_and_forget_finished_jobs(
    load_benchmark: Load, apps: dict[str, _App]
) -> None:
    bench = load_benchmark("artifact_crosscheck")
    names = [f"cifar10-{i}" for i in range(3)]
    bridge = bench.ArtifactBridge(DanluPolicy(), _workload(*((n, 1, 128) for n in names)))
    jobs = [_job(apps["cifar10"], n) for n in names]
    bridge.artifact_cluster = SimpleNamespace(current_time=60.0, jobs=jobs)
    nodes, desired = bridge.optimize({n: None for n in names}, None, {}, None)
    assert desired == bench.NODES
    assert sorted(nodes) == names  # an empty cluster starts every job
    for job_id, node_list in nodes.items():
        assert node_list == sorted(node_list)
        assert all(node_list.count(n) <= bench.GPUS_PER_NODE for n in node_list)
        assert bridge.last_start[job_id] == 60.0
    assert sum(map(len, nodes.values())) <= bench.NODES * bench.GPUS_PER_NODE
    # The artifact drops a completed job from the active ones: the bridge lets its GPUs go.
    bridge.artifact_cluster.current_time = 120.0
    nodes, _ = bridge.optimize({n: None for n in names[1:]}, None, {}, None)
    assert names[0] not in nodes and names[0] not in bridge.allocations


def test_a_folder_that_is_not_the_artifact_is_refused(load_benchmark: Load, tmp_path: Path) -> None:
    bench = load_benchmark("artifact_crosscheck")
    with pytest.raises(SystemExit, match="not the artifact's simulator folder"):
        bench.load_artifact(tmp_path)
