"""``benchmarks/contention.py``: each job alone against the whole workload in one run."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from danlu.sched.policies.danlu import DanluPolicy
from danlu.sched.policies.pollux import PolluxPolicy
from danlu.sim.config import SimConfig
from danlu.sim.elastic import load_profiles
from danlu.sim.workload import Workload, load_workload

POLLUX = Path(__file__).resolve().parents[2] / "../shared/data/pollux"

pytestmark = pytest.mark.skipif(
    not (POLLUX / "traces").is_dir(),
    reason=f"Pollux artifact data not found at {POLLUX.resolve()} (../shared/data is absent)",
)

Load = Callable[[str], ModuleType]


def _jobs(names: tuple[str, ...], apart: float) -> Workload:
    """The named jobs of the 0.5x workload 1, submitted ``apart`` seconds one after another."""
    workload = load_workload(POLLUX / "workloads-0.5" / "workload-1.csv")
    picked = [job for job in workload.jobs if job.request.id in names]
    assert len(picked) == len(names)
    moved = tuple(
        dataclasses.replace(
            job, request=dataclasses.replace(job.request, submit_time=i * apart, seq=i)
        )
        for i, job in enumerate(picked)
    )
    return dataclasses.replace(workload, jobs=moved)


@pytest.mark.parametrize(
    "policy",
    [DanluPolicy, functools.partial(PolluxPolicy, population=8, generations=4)],
    ids=["danlu", "pollux"],
)
def test_jobs_that_never_overlap_cost_nothing_in_contention(
    load_benchmark: Load, policy: Callable[[], object]
) -> None:
    bench = load_benchmark("contention")
    profiles = load_profiles(POLLUX / "traces")
    config = SimConfig(interval=60.0, restart_cost=30.0)
    # each of these finishes within an hour alone on the cluster
    apart = _jobs(("ncf-2", "cifar10-1", "ncf-3"), apart=7200.0)
    solo, full = bench.averages(apart, policy, config, profiles)
    assert solo > 0
    assert full == pytest.approx(solo)


def test_jobs_at_once_share_the_cluster_and_wait(load_benchmark: Load) -> None:
    bench = load_benchmark("contention")
    profiles = load_profiles(POLLUX / "traces")
    config = SimConfig(interval=60.0, restart_cost=30.0)
    # four jobs that each scale to most of the 64 GPUs, submitted together
    names = ("deepspeech2-0", "deepspeech2-27", "bert-34", "deepspeech2-50")
    solo, full = bench.averages(_jobs(names, apart=0.0), DanluPolicy, config, profiles)
    assert full > 1.05 * solo
