"""``benchmarks/pollux_jitter.py``: the shifted copies of a Pollux workload."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from danlu.sim.workload import load_workload

POLLUX = Path(__file__).resolve().parents[2] / "../shared/data/pollux"

pytestmark = pytest.mark.skipif(
    not (POLLUX / "workloads").is_dir(),
    reason=f"Pollux artifact data not found at {POLLUX.resolve()} (../shared/data is absent)",
)

Load = Callable[[str], ModuleType]


def test_a_copy_moves_every_submission_within_the_jitter_and_keeps_the_jobs(
    load_benchmark: Load,
) -> None:
    bench = load_benchmark("pollux_jitter")
    base = load_workload(POLLUX / "workloads" / "workload-1.csv")
    copy = bench.shifted(base, 10.0, 3)
    before = {job.request.id: job for job in base.jobs}
    after = {job.request.id: job for job in copy.jobs}
    assert before.keys() == after.keys()
    moved = 0
    for name, job in after.items():
        old = before[name].request.submit_time
        assert max(0.0, old - 10.0) <= job.request.submit_time <= old + 10.0
        assert job.work == before[name].work
        moved += job.request.submit_time != old
    assert moved > len(after) // 2
    times = [job.request.submit_time for job in copy.jobs]
    assert times == sorted(times)
    assert [job.request.seq for job in copy.jobs] == list(range(len(copy.jobs)))
    # the same seed draws the same copy; seed 0 and no jitter leave the workload as it is
    assert bench.shifted(base, 10.0, 3) == copy
    assert bench.shifted(base, 10.0, 4) != copy
    assert bench.shifted(base, 10.0, 0) is base
    assert bench.shifted(base, 0.0, 3) is base
