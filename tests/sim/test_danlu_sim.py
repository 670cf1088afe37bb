"""The danlu policy in the simulator: a small Pollux-format workload completes, runs are
deterministic, preemptions per job stay bounded, observations and batch sizes flow."""

from __future__ import annotations

from pathlib import Path

import pytest

from danlu.core.cluster import Allocation, Cluster
from danlu.sched.policies.danlu import DanluPolicy
from danlu.sim.config import SimConfig
from danlu.sim.elastic import load_profiles
from danlu.sim.engine import Simulator
from danlu.sim.metrics import SimResult
from danlu.sim.progress import ProfiledProgress
from danlu.sim.workload import load_workload

TRACES = Path(__file__).parents[2] / ".." / "shared" / "data" / "pollux" / "traces"
pytestmark = pytest.mark.skipif(not TRACES.is_dir(), reason="Pollux traces not present")

ROWS = [
    ("ncf-0", 0, "ncf", 1, 32768),
    ("cifar10-1", 10, "cifar10", 4, 2048),
    ("ncf-2", 20, "ncf", 1, 32768),
    ("cifar10-3", 30, "cifar10", 8, 2048),
    ("bert-4", 40, "bert", 4, 384),
    ("ncf-5", 50, "ncf", 1, 32768),
    ("cifar10-6", 300, "cifar10", 6, 2048),
    ("ncf-7", 400, "ncf", 1, 32768),
]


@pytest.fixture(scope="module")
def profiles() -> dict[str, object]:
    return dict(load_profiles(TRACES))


def run(tmp: Path, profiles: dict[str, object], policy: DanluPolicy) -> SimResult:
    path = tmp / "small.csv"
    lines = ["name,time,application,num_replicas,batch_size"]
    lines += [",".join(str(c) for c in row) for row in ROWS]
    path.write_text("\n".join(lines) + "\n")
    sim = Simulator(
        Cluster.homogeneous(2, 4),
        policy,
        load_workload(path),
        SimConfig(),
        profiles,  # type: ignore[arg-type]
    )
    return sim.run()


def test_small_workload_completes_deterministically(
    tmp_path: Path, profiles: dict[str, object]
) -> None:
    first = run(tmp_path, profiles, DanluPolicy())
    second = run(tmp_path, profiles, DanluPolicy())
    assert not first.unfinished and len(first.jobs) == len(ROWS)
    assert [(j.id, j.end_time) for j in first.jobs] == [(j.id, j.end_time) for j in second.jobs]


def test_preemptions_per_job_are_bounded(tmp_path: Path, profiles: dict[str, object]) -> None:
    policy = DanluPolicy(min_hold=120.0, max_moves=3)
    result = run(tmp_path, profiles, policy)
    for record in result.jobs:
        assert record.preemptions <= policy.max_moves + 1
        assert record.end_time is not None and record.start_time is not None
        # never moved more often than once per min_hold of its life
        life = record.end_time - record.start_time
        assert record.preemptions <= life / policy.min_hold + 1


def test_progress_uses_the_schedulers_batch_and_reports_observations(
    profiles: dict[str, object],
) -> None:
    profile = profiles["cifar10"]
    progress = ProfiledProgress(profile, 2048)  # type: ignore[arg-type]
    seen = progress.observe()
    assert seen["target_batch"] == 2048 and "step_time" not in seen
    two = Allocation.whole_gpus([(0, 0), (0, 1)])
    progress.start(0.0, two, 256)
    seen = progress.observe()
    assert seen["batch_size"] == 256 and seen["num_replicas"] == 2 and seen["step_time"] > 0
    progress.advance(0.0, 120.0)
    assert progress.observe()["progress"] > 0
    progress.stop(120.0)
    progress.start(120.0, two)  # no batch from the scheduler: the workload's own
    assert progress.observe()["batch_size"] == 2048
