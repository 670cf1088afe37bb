"""heSRPT-style GPU shares (:mod:`danlu.sched.policies.danlu_shares`)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from danlu.core.cluster import Allocation, Cluster
from danlu.core.errors import ConfigError
from danlu.sched.policies import danlu_model as dm
from danlu.sched.policies.danlu import DanluPolicy
from danlu.sched.policies.danlu_alloc import Option, walk
from danlu.sched.policies.danlu_shares import P_MIN, P_SINGLE, _behind, delay, profile, share_walk
from danlu.sched.view import JobRequest, JobStatus
from danlu.sim.config import SimConfig
from danlu.sim.elastic import load_profiles
from danlu.sim.engine import Simulator
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


def test_profile_can_read_the_exponent_off_measured_sizes_only() -> None:
    """Options beyond the measured sizes (an optimistic prior) set the exponent unless
    ``measured``: then it is read between the smallest and the fastest measured option,
    while the GPUs returned stay those of the fastest option of all."""
    curve = [Option(1, 100.0), Option(2, 60.0), Option(4, 45.0)]  # p = log(100/45)/log 4
    prior = [Option(8, 20.0, measured=False), Option(16, 10.0, measured=False)]
    options = curve + prior
    assert profile(options, p_max=0.95) == (pytest.approx(math.log(10.0) / math.log(16.0)), 16)
    p, fastest = profile(options, p_max=0.95, measured=True)
    assert p == pytest.approx(math.log(100.0 / 45.0) / math.log(4.0)) and fastest == 16
    # one measured size: nothing to read a curve off, the single-option exponent
    assert profile([Option(1, 100.0), *prior], p_max=0.95, measured=True) == (0.5, 16)
    # the fastest option measured: the same reading either way
    assert profile(curve, measured=True) == profile(curve)


def test_measured_exponents_set_the_delay_of_the_jobs_behind() -> None:
    """The job ahead prices the GPUs it takes with the exponent of the job behind: with
    ``measured``, the one read off the behind job's measured sizes (flat: it hardly slows
    down when left fewer GPUs), else the one its unmeasured, linear-looking sizes give."""
    ahead = power_law(1000.0, 0.5, 64)
    behind = [
        Option(1, 1e5),
        Option(2, 0.8e5),
        Option(4, 0.7e5),
        *(Option(n, 1e5 / n, measured=False) for n in range(5, 65)),
    ]  # it takes every GPU the job ahead leaves: no spare pass
    p_seen = math.log(1e5 / 0.7e5) / math.log(4.0)

    def taken(measured: bool) -> int:
        chosen = share_walk(
            [ahead, behind], [0, 1], 64, hysteresis=0.0, p_max=0.95, measured=measured
        )
        return ahead[chosen[0]].gpus

    def best(p: float) -> int:
        return min(ahead, key=lambda o: o.seconds * (1 + delay(o.gpus, 64, 1.0, p, 64))).gpus

    assert taken(measured=False) == best(0.95)
    assert taken(measured=True) == best(p_seen) != best(0.95)


def test_policy_marks_options_beyond_the_measured_replicas() -> None:
    """A job measured on 4 GPUs offers bigger sizes from its prior: they are not
    ``measured``, its sizes up to 4 are."""
    observed = {
        "init_batch": 128.0,
        "max_batch": 4096.0,
        "min_local_bsz": 32.0,
        "max_local_bsz": 256.0,
        "target_batch": 128.0,
        "progress": 0.2,
        "step_time": 0.1,
        "sync_time": 0.05,
        "local_bsz": 64.0,
        "accum_steps": 0.0,
        "batch_size": 256.0,
        "num_replicas": 4.0,
        "num_nodes": 1.0,
        "grad_sqr": 1.0,
        "grad_var": 200.0,
    }
    marks = dm.remembered({}, observed)
    job = JobStatus(
        request=JobRequest(id="e", submit_time=0.0, gpus=4, seq=0),
        allocation=Allocation.whole_gpus([(0, i) for i in range(4)]),
        last_start=0.0,
        observed=observed,
        marks=marks,
    )
    options = DanluPolicy()._options(job, marks, 1000.0, 16, 4, 600.0)
    assert {o.gpus for o in options if not o.measured} == {8, 12} & {o.gpus for o in options}
    assert {o.gpus for o in options if o.measured} == {1, 2, 3, 4} & {o.gpus for o in options}
    assert any(not o.measured for o in options)


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


def behind_one_by_one(
    options: list[list[Option]],
    order: list[int],
    chosen: list[int],
    locked: list[bool],
    may_grow: list[bool] | None,
    p_max: float,
    measured: bool,
) -> tuple[list[float], list[float], list[int]]:
    """The suffix sums of :func:`_behind` as its definition reads: one job at a time from
    the last rank up."""
    n_sum, p_sum, room_sum = 0.0, 0.0, 0
    n_after, p_after, room_after = [n_sum], [p_sum], [room_sum]
    for j in reversed(order):
        p, room = profile(options[j], p_max, measured)
        weight = 1.0
        if locked[j]:
            held = options[j][chosen[j]].gpus
            room = max(room - held, 0) if may_grow is not None and may_grow[j] else 0
            weight = room / (room + held) if room > 0 else 0.0
        n_sum += weight
        p_sum += weight * p
        room_sum += room
        n_after.append(n_sum)
        p_after.append(p_sum)
        room_after.append(room_sum)
    return n_after[::-1], p_after[::-1], room_after[::-1]


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_behind_sums_are_those_of_one_job_at_a_time(data: st.DataObject) -> None:
    """The array sums behind each rank equal the one-at-a-time loop's, bit for bit (the
    walk's choices must not depend on how they are summed), with jobs of no, one or several
    options, held or free, growing or not."""
    count = data.draw(st.integers(0, 25))
    options: list[list[Option]] = []
    chosen: list[int] = []
    locked: list[bool] = []
    for _ in range(count):
        sizes = data.draw(st.lists(st.integers(1, 64), max_size=5, unique=True))
        seconds = data.draw(st.lists(st.floats(1.0, 1e5), min_size=5, max_size=5))
        opts = [Option(n, t, measured=n < 8) for n, t in zip(sorted(sizes), seconds, strict=False)]
        options.append(opts)
        held = bool(opts) and data.draw(st.booleans())
        locked.append(held)
        chosen.append(data.draw(st.integers(0, len(opts) - 1)) if held else -1)
    order = data.draw(st.permutations(range(count)))
    may_grow = data.draw(st.none() | st.lists(st.booleans(), min_size=count, max_size=count))
    p_max = data.draw(st.sampled_from([0.3, 0.65, 0.95]))
    measured = data.draw(st.booleans())
    single = min(P_SINGLE, p_max)
    got = _behind(options, order, chosen, locked, may_grow, single, p_max, measured)
    want = behind_one_by_one(options, order, chosen, locked, may_grow, p_max, measured)
    assert got == want
    assert [type(x) for x in got[2]] == [int] * (count + 1)


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
