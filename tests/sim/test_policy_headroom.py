"""The oracle model of ``benchmarks/policy_headroom.py``: the policy's batch search, with
true times and statistics from the simulator's profile."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from danlu.sched.policies import danlu_model as dm
from danlu.sched.policies.danlu import DanluPolicy
from danlu.sim.config import SimConfig
from danlu.sim.elastic import BatchConfig, load_profiles
from danlu.sim.workload import ProfiledWork, load_workload

POLLUX = Path(__file__).resolve().parents[2] / "../shared/data/pollux"

pytestmark = pytest.mark.skipif(
    not (POLLUX / "traces").is_dir(),
    reason=f"Pollux artifact data not found at {POLLUX.resolve()} (../shared/data is absent)",
)


Load = Callable[[str], ModuleType]


def _online() -> dm.JobModel:
    """A cifar10-like online model (limits of the profile, a made-up fit)."""
    return dm.JobModel(
        init_batch=128,
        max_batch=4096,
        min_local=32,
        max_local=512,
        alpha=0.02,
        beta=0.0004,
        sync_fit={"i": (0.01, 0.001), "x": (0.05, 0.005)},
        grad_sqr=1.0,
        grad_var=2.0,
        max_replicas_seen=4,
    )


def test_without_oracle_parts_it_is_the_online_model(load_benchmark: Load) -> None:
    bench = load_benchmark("policy_headroom")
    profile = load_profiles(POLLUX / "traces")["cifar10"]
    online = _online()
    values = {f.name: getattr(online, f.name) for f in dataclasses.fields(online)}
    plain = bench.OracleModel(**values, profile=profile, epoch=0, throughput=False, stats=False)
    for replicas in (1, 2, 4, 8, 12):
        assert plain.best_batch(replicas, 4) == pytest.approx(online.best_batch(replicas, 4))


def test_the_oracle_picks_the_truly_best_candidate(load_benchmark: Load) -> None:
    bench = load_benchmark("policy_headroom")
    profile = load_profiles(POLLUX / "traces")["cifar10"]
    online = _online()
    values = {f.name: getattr(online, f.name) for f in dataclasses.fields(online)}
    epoch = 10
    oracle = bench.OracleModel(**values, profile=profile, epoch=epoch, throughput=True, stats=True)
    placement = (4, 4)
    good, batch = oracle.best_batch(8, 4)
    assert batch > 0

    def split(total: int) -> dm.BatchSplit:
        return dm.split_batch(8, total, online.max_local, online.init_batch, online.max_batch)

    def true_goodput(total: int) -> float:
        split_ = split(total)
        config = BatchConfig(num_replicas=8, atomic_bsz=split_.atomic, accum_steps=split_.accum)
        seconds = profile.iteration_time(placement, config)
        return profile.gain(split_.batch, epoch) / seconds

    assert good == pytest.approx(true_goodput(batch))
    candidates = [
        b
        for b in oracle._candidates(8)
        if split(b).atomic >= online.min_local and split(b).batch >= online.init_batch
    ]
    assert len(candidates) > 3
    assert all(true_goodput(b) <= good * (1 + 1e-12) for b in candidates)
    # the online model's guess differs: the oracle is not the fit
    assert not math.isclose(online.best_batch(8, 4)[0], good, rel_tol=1e-3)


def test_future_oracle_times_are_bounded_by_the_fastest_configuration(
    load_benchmark: Load,
) -> None:
    """``--oracle future``: each epoch on ``n`` packed GPUs takes at least the bound's time
    (the fastest of every placement), the remaining time from the start is the sum of the
    epochs, and from an epoch boundary it is the sum of the epochs after it."""
    bench = load_benchmark("policy_headroom")
    jct_bound = load_benchmark("jct_bound")

    profile = load_profiles(POLLUX / "traces")["cifar10"]
    fastest = jct_bound.epoch_seconds(profile)
    table: dict[int, object] = {}
    for gpus in (1, 4, 8, 16, 32):
        seconds = bench._count_epochs(profile, gpus, 4)
        assert seconds.shape == fastest.shape
        assert (seconds >= fastest * (1 - 1e-9)).all()
        total = bench._remaining(profile, table, 0.0, gpus, 4)
        assert total == pytest.approx(float(seconds.sum()))
        third = profile.epoch_boundaries[2] / profile.target_progress
        assert bench._remaining(profile, table, third, gpus, 4) == pytest.approx(
            float(seconds[3:].sum())
        )
    # more GPUs are faster on cifar10 from one GPU to a few nodes, once its noise has grown
    later = [float(bench._count_epochs(profile, n, 4)[50]) for n in (1, 4, 16)]
    assert later[0] > later[1] > later[2]


def test_solo_runs_each_job_in_a_simulation_of_its_own(load_benchmark: Load) -> None:
    """``--solo``: one JCT per job, each that of the job simulated alone. Six cifar10 jobs
    submitted together want more than the 64 GPUs between them, so together they take
    longer in sum than each alone."""
    bench = load_benchmark("policy_headroom")
    profiles = load_profiles(POLLUX / "traces")
    whole = load_workload(POLLUX / "workloads-0.5" / "workload-1.csv")
    cifar = next(
        j
        for j in whole.jobs
        if isinstance(j.work, ProfiledWork) and j.work.application == "cifar10"
    )
    jobs = tuple(
        dataclasses.replace(
            cifar,
            request=dataclasses.replace(cifar.request, id=f"cifar10-{k}", submit_time=10.0, seq=k),
        )
        for k in range(6)
    )
    workload = dataclasses.replace(whole, jobs=jobs)
    config = SimConfig(interval=60.0, restart_cost=30.0)
    solo = bench.workload_jcts(workload, DanluPolicy, config, profiles, solo=True)
    assert len(solo) == len(jobs)
    for job, jct in zip(jobs, solo, strict=True):
        alone = dataclasses.replace(workload, jobs=(job,))
        assert bench.workload_jcts(alone, DanluPolicy, config, profiles) == [jct]
    shared = bench.workload_jcts(workload, DanluPolicy, config, profiles)
    assert len(shared) == len(jobs)
    assert sum(shared) > sum(solo)
