"""The ``optimus`` baseline on the Pollux workloads at 1.0x load comes within a fifth of the
published Optimus+Oracle+TunedJobs averages (Pollux OSDI'21 artifact), though it learns the
step times and the remaining work online where the study's Optimus knew them; given that
oracle (``benchmarks/optimus_oracle.py``) it gives the published figures."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from danlu.core.cluster import Cluster
from danlu.sched.registry import make_policy
from danlu.sim.config import SimConfig
from danlu.sim.elastic import load_profiles
from danlu.sim.engine import Simulator
from danlu.sim.workload import ProfiledWork, load_workload

POLLUX = Path(__file__).resolve().parents[2] / "../shared/data/pollux"

pytestmark = pytest.mark.skipif(
    not (POLLUX / "workloads").is_dir() or not (POLLUX / "traces").is_dir(),
    reason=f"Pollux artifact data not found at {POLLUX.resolve()} (../shared/data is absent)",
)


@pytest.mark.parametrize("number", [1, 3])
def test_optimus_comes_near_its_published_average(
    number: int, load_benchmark: Callable[[str], ModuleType]
) -> None:
    # Optimus+Oracle+TunedJobs' published figures (danlu_pollux.OPTIMUS, from the artifact)
    published, _ = load_benchmark("danlu_pollux").OPTIMUS[("1.0", number)]
    workload = load_workload(POLLUX / "workloads" / f"workload-{number}.csv")
    profiles = dict(load_profiles(POLLUX / "traces"))
    result = Simulator(
        Cluster.homogeneous(16, 4),
        make_policy("optimus"),
        workload,
        SimConfig(interval=60.0, restart_cost=30.0),
        profiles,
    ).run()
    assert result.unfinished == [] and result.rejected == []
    avg = result.summary()["avg_jct"]
    assert avg == pytest.approx(published, rel=0.2)
    # it moves jobs whenever the split changes: several restarts per job on average
    assert sum(job.restarts for job in result.jobs) > 3 * len(result.jobs)


def test_with_the_study_s_oracle_it_gives_the_published_figures(
    load_benchmark: Callable[[str], ModuleType],
) -> None:
    bench = load_benchmark("optimus_oracle")
    published, published_p99 = bench.OPTIMUS[("0.5", 1)]  # 1309.69 s and 15301.62 s
    path = POLLUX / "workloads-0.5" / "workload-1.csv"
    profiles = dict(load_profiles(POLLUX / "traces"))
    jobs = load_workload(path).jobs
    apps = {j.request.id: j.work.application for j in jobs if isinstance(j.work, ProfiledWork)}
    policy = bench.OracleOptimus(applications=apps, profiles=profiles)
    avg, p99 = bench.jct_figures(bench.simulate(path, policy, profiles))
    assert avg == pytest.approx(published, rel=0.01)
    assert p99 == pytest.approx(published_p99, rel=0.01)
    online, _ = bench.jct_figures(bench.simulate(path, make_policy("optimus"), profiles))
    assert online > 1.1 * avg  # learning what the oracle knew costs the online baseline
