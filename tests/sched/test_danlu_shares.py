"""heSRPT-style GPU shares (:mod:`danlu.sched.policies.danlu_shares`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from danlu.core.cluster import Cluster
from danlu.core.errors import ConfigError
from danlu.sched.policies.danlu import DanluPolicy
from danlu.sched.policies.danlu_alloc import Option, walk
from danlu.sched.policies.danlu_shares import P_MIN, delay, profile, share_walk
from danlu.sim.elastic import load_profiles
from danlu.sim.engine import SimConfig, Simulator
from danlu.sim.workload import load_workload


def power_law(size: float, p: float, most: int) -> list[Option]:
    """``T(n) = size / n**p`` for every ``n`` in ``1..most``."""
    return [Option(n, size / n**p) for n in range(1, most + 1)]


def hesrpt(count: int, p: float) -> list[float]:
    """heSRPT's shares for ``count`` jobs, shortest first: the ``i`` longest jobs (``i =
    1..count``) hold ``(i / count)**(1 / (1 - p))`` of the machine together."""
    q = 1.0 / (1.0 - p)
    longest_first = [(i / count) ** q - ((i - 1) / count) ** q for i in range(1, count + 1)]
    return longest_first[::-1]


@pytest.mark.parametrize(("count", "p"), [(2, 0.5), (3, 0.3), (5, 0.5), (8, 0.6)])
def test_power_law_jobs_get_hesrpt_shares(count: int, p: float) -> None:
    """Equal exponents, fine-grained options: every job's GPUs are its heSRPT share of the
    machine (within the rounding to whole GPUs), the shortest job the largest."""
    capacity = 1000
    sizes = [1000.0 * (k + 1) for k in range(count)]  # job k is the (k+1)-th shortest
    options = [power_law(size, p, capacity) for size in sizes]
    chosen = share_walk(options, list(range(count)), capacity, hysteresis=0.0, p_max=0.95)
    gpus = [options[j][k].gpus for j, k in enumerate(chosen)]
    assert sum(gpus) == capacity
    assert gpus == sorted(gpus, reverse=True)  # the shortest job gets the largest share
    for got, share in zip(gpus, hesrpt(count, p), strict=True):
        assert got == pytest.approx(share * capacity, abs=count + 1)


def test_shortest_job_gets_about_1_over_p_times_the_walks_share() -> None:
    """The walk's linear price gives the shortest job about ``p`` times its heSRPT share."""
    capacity, p, count = 1000, 0.5, 10
    options = [power_law(1000.0 * (k + 1), p, capacity) for k in range(count)]
    order = list(range(count))
    shares = share_walk(options, order, capacity, hysteresis=0.0, p_max=0.95)
    walked = walk(options, order, capacity, hysteresis=0.0)
    first_share, first_walk = options[0][shares[0]].gpus, options[0][walked[0]].gpus
    assert first_share == pytest.approx(hesrpt(count, p)[0] * capacity, abs=2)
    assert 1.5 < first_share / first_walk < 2.5


def test_profile_reads_the_exponent_off_the_options() -> None:
    exponent, fastest = profile(power_law(100.0, 0.4, 16))
    assert exponent == pytest.approx(0.4) and fastest == 16
    assert profile(power_law(100.0, 0.9, 16), p_max=0.65) == (0.65, 16)
    flat = [Option(1, 10.0), Option(2, 10.0), Option(4, 12.0)]
    assert profile(flat) == (P_MIN, 1)  # no speed-up: its fastest size is its smallest
    assert profile([Option(3, 50.0)]) == (0.5, 3)
    assert profile([]) == (0.5, 0)


def test_delay_is_zero_when_the_jobs_behind_cannot_use_the_gpus() -> None:
    assert delay(8, 64, 0.0, 0.5, 64) == 0.0  # nobody behind
    assert delay(8, 64, 3.0, 0.5, 0) == 0.0  # nobody behind can use a GPU
    assert delay(8, 64, 3.0, 0.5, 40) == 0.0  # what they can use is still left
    assert delay(64, 64, 3.0, 0.5, 40) == pytest.approx(3.0)  # they are stopped
    assert delay(16, 64, 2.0, 0.5, 64) == pytest.approx(2.0 * (1.0 - 0.75**0.5))


def test_last_job_takes_its_fastest_option_and_a_lone_option_fits() -> None:
    fast = [Option(1, 100.0), Option(2, 60.0), Option(4, 50.0), Option(8, 55.0)]
    assert share_walk([fast], [0], 64) == [2]
    assert share_walk([[Option(4, 1e9)]], [0], 4) == [0]  # taken whatever its time
    assert share_walk([[Option(8, 1.0)]], [0], 4) == [-1]  # does not fit


def test_pinned_job_is_never_shrunk_and_grows_only_when_allowed() -> None:
    short = power_law(100.0, 0.5, 8)
    held = [Option(2, 500.0, keep=True), Option(4, 300.0), Option(8, 200.0)]
    chosen = share_walk([short, held], [0, 1], 8, pinned=[-1, 0], may_grow=[False, False])
    assert chosen[1] == 0 and short[chosen[0]].gpus == 6  # held keeps its 2, short the rest
    grown = share_walk([[], held], [0, 1], 8, pinned=[-1, 0], may_grow=[False, True])
    assert held[grown[1]].gpus == 8


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(10.0, 1e5), st.floats(0.0, 1.0), st.integers(1, 12)),
        min_size=1,
        max_size=12,
    ),
    st.integers(1, 48),
)
def test_capacity_respected_and_deterministic(
    jobs: list[tuple[float, float, int]], capacity: int
) -> None:
    counts = [1, 2, 3, 4, 8, 12, 16, 20, 24, 32, 40, 48]
    options = [[Option(n, size / n**p + 30.0) for n in counts[:most]] for size, p, most in jobs]
    order = sorted(range(len(jobs)), key=lambda j: jobs[j][0])
    chosen = share_walk(options, order, capacity, spare_gain=0.05)
    assert chosen == share_walk(options, order, capacity, spare_gain=0.05)
    assert sum(options[j][k].gpus for j, k in enumerate(chosen) if k >= 0) <= capacity
    # the shortest job runs whenever its smallest option fits
    assert chosen[order[0]] >= 0 or options[order[0]][0].gpus > capacity


POLLUX = Path(__file__).resolve().parents[2] / "../shared/data/pollux"


@pytest.mark.skipif(
    not (POLLUX / "workloads-0.5").is_dir() or not (POLLUX / "traces").is_dir(),
    reason="Pollux artifact data not found (../shared/data is absent)",
)
def test_policy_knob_selects_the_allocation() -> None:
    """On the first 24 jobs of a Pollux workload both allocations finish every job,
    deterministically, and they schedule differently (the knob reaches the walk)."""
    full = load_workload(POLLUX / "workloads-0.5" / "workload-1.csv")
    workload = dataclasses.replace(full, jobs=full.jobs[:24])
    profiles = load_profiles(POLLUX / "traces")

    def run(alloc: str) -> list[float]:
        result = Simulator(
            Cluster.homogeneous(4, 4),
            DanluPolicy(alloc=alloc),
            workload,
            SimConfig(interval=60.0, restart_cost=30.0),
            profiles,
        ).run()
        assert not result.unfinished
        return [r.jct for r in result.jobs]

    shares = run("shares")
    assert len(shares) == 24 and shares == run("shares")
    assert run("walk") != shares


def test_an_unknown_alloc_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="alloc must be 'shares' or 'walk'"):
        DanluPolicy(alloc="greedy")
