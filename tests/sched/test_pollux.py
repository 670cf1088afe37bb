"""The ``pollux`` baseline: its search keeps every constraint and finds the best allocation
of small problems (checked against all of them), and the policy turns views into plans as
Pollux would (new jobs on one GPU, growth to twice what was measured, restart factor,
rigid jobs whole, deterministic)."""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from danlu.core.cluster import GPU_TYPES, Allocation, Cluster, Node
from danlu.core.errors import ConfigError
from danlu.core.units import GiB
from danlu.sched.policies import danlu_model as dm
from danlu.sched.policies import pollux_search as ps
from danlu.sched.policies.base import beyond_reach
from danlu.sched.policies.pollux import NO_GPUS, RESTARTS, PolluxPolicy
from danlu.sched.registry import make_policy
from danlu.sched.view import ClusterView, JobRequest, JobStatus, Plan

LIMITS = {"init_batch": 128.0, "max_batch": 4096.0, "min_local_bsz": 32.0, "max_local_bsz": 256.0}


def problem(
    speedup: np.ndarray,
    capacity: list[int],
    most: list[int],
    base: np.ndarray | None = None,
    factor: list[float] | None = None,
    gang: list[bool] | None = None,
    fairness: float = -1.0,
    least: list[int] | None = None,
) -> ps.SearchProblem:
    jobs = speedup.shape[0]
    extra = {} if least is None else {"min_replicas": np.array(least, dtype=np.int64)}
    return ps.SearchProblem(
        speedup=speedup,
        max_replicas=np.array(most, dtype=np.int64),
        capacity=np.array(capacity, dtype=np.int64),
        base=np.zeros((jobs, len(capacity)), dtype=np.int64) if base is None else base,
        restart_factor=np.ones(jobs) if factor is None else np.array(factor),
        gang=np.zeros(jobs, dtype=bool) if gang is None else np.array(gang),
        fairness=fairness,
        **extra,
    )


def concave(jobs: int, replicas: int, exponents: list[float], spread_cost: float) -> np.ndarray:
    table = np.zeros((jobs, 2, replicas + 1))
    r = np.arange(replicas + 1, dtype=float)
    for j, p in enumerate(exponents):
        table[j, 0] = r**p
        table[j, 1] = spread_cost * r**p
    return table


def valid(prob: ps.SearchProblem, state: np.ndarray) -> None:
    assert (state >= 0).all()
    assert (state.sum(axis=0) <= prob.capacity).all(), "a node over capacity"
    assert (state.sum(axis=1) <= prob.max_replicas).all(), "a job over its most replicas"
    spread = np.count_nonzero(state, axis=1) > 1
    assert ((state[spread] > 0).sum(axis=0) <= 1).all(), "two distributed jobs on a node"
    for j in np.flatnonzero(prob.gang):
        assert state[j].sum() in (0, prob.max_replicas[j]), "a gang split"
    least = getattr(prob, "min_replicas", None)
    if least is not None:
        totals = state.sum(axis=1)
        assert ((totals == 0) | (totals >= least)).all(), "a job below its least"


@settings(max_examples=30, deadline=None)
@given(
    jobs=st.integers(1, 6),
    nodes=st.integers(1, 4),
    seed=st.integers(0, 1000),
    gangs=st.lists(st.booleans(), min_size=6, max_size=6),
)
def test_search_keeps_every_constraint(jobs: int, nodes: int, seed: int, gangs: list[bool]) -> None:
    rng = np.random.default_rng(seed)
    capacity = rng.integers(0, 5, size=nodes).tolist()
    total = max(sum(capacity), 1)
    most = rng.integers(1, total + 1, size=jobs).tolist()
    exponents = rng.uniform(0.2, 1.0, size=jobs).tolist()
    prob = problem(concave(jobs, total, exponents, 0.8), capacity, most, gang=gangs[:jobs])
    best = ps.search(prob, prob.base[None], np.random.default_rng(seed), 20, 15)
    valid(prob, best)
    # random candidates are made valid by the repair too
    noisy = rng.integers(0, 6, size=(10, jobs, nodes))
    for state in ps.repair(prob, noisy, np.random.default_rng(seed)):
        valid(prob, state)


@settings(max_examples=30, deadline=None)
@given(jobs=st.integers(1, 6), nodes=st.integers(1, 4), seed=st.integers(0, 1000))
def test_search_keeps_every_job_at_none_or_at_least_its_minimum(
    jobs: int, nodes: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    capacity = rng.integers(0, 5, size=nodes).tolist()
    total = max(sum(capacity), 1)
    most = rng.integers(1, total + 1, size=jobs)
    least = np.minimum(rng.integers(1, 5, size=jobs), most)
    exponents = rng.uniform(0.2, 1.0, size=jobs).tolist()
    table = concave(jobs, total, exponents, 0.8)
    # a job on fewer than its least would count as scaling well there (the search must
    # not be driven by the values alone)
    prob = problem(table, capacity, most.tolist(), least=least.tolist())
    best = ps.search(prob, prob.base[None], np.random.default_rng(seed), 20, 15)
    valid(prob, best)
    noisy = rng.integers(0, 6, size=(10, jobs, nodes))
    for state in ps.repair(prob, noisy, np.random.default_rng(seed)):
        valid(prob, state)


def test_search_gives_a_job_its_minimum_when_there_is_room() -> None:
    # one node of 4 GPUs, two jobs scaling linearly: the second needs 3 at least, so the
    # fair split 2 + 2 is out; the best valid one is 1 + 3
    table = concave(2, 4, [1.0, 1.0], spread_cost=1.0)
    prob = problem(table, [4], [4, 4], least=[1, 3])
    best = ps.search(prob, prob.base[None], np.random.default_rng(0), 30, 30)
    valid(prob, best)
    assert best.sum(axis=1).tolist() == [1, 3]


def all_allocations(prob: ps.SearchProblem) -> np.ndarray:
    """Every valid allocation of a small problem."""
    rows = [
        np.array(c)
        for c in itertools.product(*(range(int(c) + 1) for c in prob.capacity))
        if sum(c) <= prob.max_replicas.max()
    ]
    out = []
    for combo in itertools.product(rows, repeat=prob.jobs):
        state = np.stack(combo)
        try:
            valid(prob, state)
        except AssertionError:
            continue
        out.append(state)
    return np.stack(out)


@pytest.mark.parametrize("fairness", [-1.0, 0.0, 1.0])
def test_search_finds_the_best_allocation_of_small_problems(fairness: float) -> None:
    # three jobs, two nodes of two GPUs: the best power mean, found by trying them all
    table = concave(3, 4, [0.9, 0.5, 0.7], spread_cost=0.6)
    base = np.array([[2, 0], [0, 0], [0, 2]])
    prob = problem(table, [2, 2], [4, 2, 4], base=base, factor=[0.5, 1.0, 0.9], fairness=fairness)
    candidates = all_allocations(prob)
    brute = float(ps.values(prob, candidates).max())
    best = ps.search(prob, base[None], np.random.default_rng(0), 40, 40)
    valid(prob, best)
    assert float(ps.values(prob, best[None])[0]) == pytest.approx(brute)


def test_values_power_mean_and_restart_factor() -> None:
    table = concave(2, 2, [1.0, 1.0], spread_cost=1.0)
    base = np.array([[1, 0], [0, 1]])
    prob = problem(table, [1, 1], [2, 2], base=base, factor=[0.5, 0.5])
    kept = ps.values(prob, base[None])[0]
    assert kept == pytest.approx(1.0 + ps.EPSILON)  # harmonic mean of 1 and 1
    swapped = ps.values(prob, base[::-1][None])[0]
    assert swapped == pytest.approx(0.5 + ps.EPSILON)  # both restarted: factor 0.5 each
    starved = ps.values(prob, np.array([[[1, 1], [0, 0]]]))[0]
    # harmonic mean of (2 * 0.5 + eps) and eps: the job left out dominates
    assert starved == pytest.approx(2 / (1 / (1 + ps.EPSILON) + 1 / ps.EPSILON))


def test_search_is_deterministic_for_a_seed() -> None:
    table = concave(4, 8, [0.9, 0.6, 0.8, 0.4], spread_cost=0.7)
    prob = problem(table, [4, 4], [8, 8, 4, 2])
    one = ps.search(prob, prob.base[None], np.random.default_rng(7), 30, 20)
    two = ps.search(prob, prob.base[None], np.random.default_rng(7), 30, 20)
    assert (one == two).all()


@settings(max_examples=30, deadline=None)
@given(jobs=st.integers(1, 5), nodes=st.integers(1, 4), seed=st.integers(0, 1000))
def test_search_keeps_jobs_on_the_nodes_they_are_allowed(jobs: int, nodes: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    capacity = rng.integers(0, 5, size=nodes).tolist()
    total = max(sum(capacity), 1)
    most = rng.integers(1, total + 1, size=jobs).tolist()
    allowed = rng.random((jobs, nodes)) < 0.5
    prob = dataclasses.replace(
        problem(concave(jobs, total, [0.8] * jobs, 0.8), capacity, most), allowed=allowed
    )
    best = ps.search(prob, prob.base[None], np.random.default_rng(seed), 20, 15)
    valid(prob, best)
    assert not best[~allowed].any()
    noisy = rng.integers(0, 6, size=(10, jobs, nodes))
    for state in ps.repair(prob, noisy, np.random.default_rng(seed)):
        assert not state[~allowed].any()


def test_search_of_a_cluster_without_nodes_keeps_the_current_allocation() -> None:
    prob = problem(np.zeros((2, 2, 1)), [], [0, 0])
    best = ps.search(prob, prob.base[None], np.random.default_rng(0), 10, 10)
    assert best.shape == (2, 0)


# -- the policy --------------------------------------------------------------------------


def status(job_id: str, gpus: int = 1, submit: float = 0.0, **kw: Any) -> JobStatus:
    names = ("preemptible", "max_gpus", "gpu_milli", "gpu_types", "gpu_memory")
    req_kw = {k: kw.pop(k) for k in list(kw) if k in names}
    request = JobRequest(id=job_id, submit_time=submit, gpus=gpus, seq=int(submit), **req_kw)
    return JobStatus(request=request, **kw)


def measured(replicas: int, nodes: int, local: int, step: float, sync: float) -> dict[str, float]:
    return {
        **LIMITS,
        "adaptive": 1.0,
        "progress": 0.2,
        "step_time": step,
        "sync_time": sync,
        "local_bsz": float(local),
        "accum_steps": 0.0,
        "batch_size": float(local * replicas),
        "num_replicas": float(replicas),
        "num_nodes": float(nodes),
        "grad_sqr": 1.0,
        "grad_var": 40.0,
    }


def small_policy(**kw: Any) -> PolluxPolicy:
    return PolluxPolicy(population=30, generations=30, **kw)


def test_a_new_job_starts_on_one_gpu_at_its_smallest_batch() -> None:
    cluster = Cluster.homogeneous(2, 4)
    new = status("new", gpus=4, submit=0.0, observed={**LIMITS, "adaptive": 1.0})
    plan = small_policy().schedule(ClusterView(time=60.0, cluster=cluster, pending=(new,)))
    (start,) = plan.starts
    assert start.allocation.num_gpus == 1
    assert start.adaptive
    assert start.batch_size == 128  # max(init_batch, 1 x min_local_bsz)


def test_a_measured_job_grows_to_at_most_twice_its_replicas() -> None:
    cluster = Cluster.homogeneous(4, 4)
    alloc = Allocation.whole_gpus([(0, 0), (0, 1)])
    seen = measured(2, 1, 128, step=0.30, sync=0.02)
    run = status("a", gpus=2, observed=seen, allocation=alloc, last_start=0.0)
    plan = small_policy().schedule(ClusterView(time=3600.0, cluster=cluster, running=(run,)))
    (resize,) = plan.resizes
    assert resize.allocation.num_gpus == 4  # alone, scaling well: twice the 2 measured
    assert resize.batch_size is not None and resize.batch_size >= 128
    assert plan.marks["a"][dm.MAXR] == 2.0  # the measurement is remembered


def test_a_huge_growth_factor_caps_at_the_cluster() -> None:
    """``growth`` has no upper bound: a job measured on 2 GPUs may then get every GPU, and
    a value as large as a float holds neither overflows nor grows past the cluster."""
    cluster = Cluster.homogeneous(4, 4)
    alloc = Allocation.whole_gpus([(0, 0), (0, 1)])
    seen = measured(2, 1, 128, step=0.30, sync=0.02)
    run = status("a", gpus=2, observed=seen, allocation=alloc, last_start=0.0)
    view = ClusterView(time=3600.0, cluster=cluster, running=(run,))
    plan = small_policy(growth=1e308).schedule(view)
    (resize,) = plan.resizes
    assert 4 < resize.allocation.num_gpus <= 16  # past twice the measured 2


def test_a_rigid_job_gets_its_gpus_or_waits() -> None:
    cluster = Cluster.homogeneous(2, 4)
    big = status("big", gpus=6, submit=0.0)
    huge = status("huge", gpus=9, submit=1.0)
    plan = small_policy().schedule(ClusterView(time=60.0, cluster=cluster, pending=(big, huge)))
    assert [(s.job_id, s.allocation.num_gpus) for s in plan.starts] == [("big", 6)]
    assert plan.starts[0].batch_size is None
    assert plan.waiting == {"huge": beyond_reach(9, 8)}  # 9 GPUs asked of 8
    alone = small_policy().schedule(ClusterView(time=60.0, cluster=cluster, pending=(huge,)))
    assert not alone.starts  # more GPUs than the cluster has: never started on fewer


def test_jobs_share_the_cluster_and_moves_cost_young_jobs_more() -> None:
    cluster = Cluster.homogeneous(2, 4)
    seen = measured(8, 2, 64, step=0.4, sync=0.1)
    alloc = Allocation.whole_gpus([(n, g) for n in range(2) for g in range(4)])
    old = status("old", gpus=8, observed=seen, allocation=alloc, last_start=0.0)
    new = status("new", gpus=1, submit=3590.0, observed={**LIMITS, "adaptive": 1.0})
    plan = small_policy().schedule(
        ClusterView(time=3600.0, cluster=cluster, running=(old,), pending=(new,))
    )
    # the fair mean does not leave the new job out: the old one gives up a GPU
    assert [s.job_id for s in plan.starts] == ["new"]
    assert [r.job_id for r in plan.resizes] == ["old"]
    assert plan.resizes[0].allocation.num_gpus == 7
    assert not plan.preempts
    assert plan.marks["old"][RESTARTS] == 1.0  # counted, as Pollux counts its restarts
    assert RESTARTS not in plan.marks.get("new", {})  # a first start is not a restart
    alloc2 = Allocation.whole_gpus([(1, 2), (1, 3)])
    # two jobs on 6 and 2 GPUs: the fair mean splits them 4 and 4, unless they were moved
    # so often in their hour that a move's restart factor is 0
    six = Allocation.whole_gpus([(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1)])
    for restarts, sizes in ((0.0, [("a", 4), ("b", 4)]), (119.0, [])):
        a = status("a", gpus=6, observed=measured(6, 2, 64, 0.3, 0.05), allocation=six)
        b = status("b", gpus=2, observed=measured(2, 1, 64, 0.3, 0.02), allocation=alloc2)
        running = tuple(
            dataclasses.replace(j, last_start=0.0, marks={RESTARTS: restarts}) for j in (a, b)
        )
        view = ClusterView(time=3600.0, cluster=cluster, running=running)
        plan = small_policy().schedule(view)
        assert sorted((r.job_id, r.allocation.num_gpus) for r in plan.resizes) == sizes


def test_fixed_and_shared_jobs() -> None:
    cluster = Cluster.homogeneous(1, 4)
    alloc = Allocation.whole_gpus([(0, 0), (0, 1)])
    fixed = status("fixed", gpus=2, preemptible=False, allocation=alloc, last_start=0.0)
    part = status("part", gpus=1, submit=1.0, gpu_milli=500)
    plan = small_policy().schedule(
        ClusterView(time=60.0, cluster=cluster, running=(fixed,), pending=(part,))
    )
    assert not plan.resizes and not plan.preempts  # the non-preemptible job stays
    (start,) = plan.starts
    assert start.job_id == "part" and start.allocation.gpu_milli == 500
    assert not {(s.node, s.gpu) for s in start.allocation.shares} & {(0, 0), (0, 1)}


def test_the_policy_is_deterministic_and_registered() -> None:
    cluster = Cluster.homogeneous(4, 4)
    pending = tuple(
        status(f"j{i}", gpus=1, submit=float(i), observed={**LIMITS, "adaptive": 1.0})
        for i in range(6)
    )
    view = ClusterView(time=600.0, cluster=cluster, pending=pending)
    one = make_policy("pollux", population=20, generations=10).schedule(view)
    two = make_policy("pollux", population=20, generations=10).schedule(view)
    assert one == two
    assert sorted(s.job_id for s in one.starts) == [f"j{i}" for i in range(6)]


@pytest.mark.parametrize(
    ("option", "value", "span"),
    [("fairness", 2.0, r"\(-inf, 1\]"), ("growth", 0.5, r"\[1, inf\)"), ("seed", -1, r"\[0")],
)
def test_options_out_of_range(option: str, value: float, span: str) -> None:
    with pytest.raises(ConfigError, match=rf"pollux policy: {option} must be in {span}"):
        PolluxPolicy(**{option: value})


def test_jobs_get_gpus_only_of_the_types_and_memory_they_ask_for() -> None:
    """Whole-GPU jobs naming GPU types or memory per GPU, rigid or sized by the search, get
    GPUs only on the nodes whose GPUs match, and wait when those are taken."""
    v100, a100 = GPU_TYPES["V100-32GB"], GPU_TYPES["A100-80GB"]
    cluster = Cluster((Node("n0", 4, v100), Node("n1", 4, a100)))
    a100_only = frozenset({"A100-80GB"})
    typed = status("typed", gpus=2, submit=0.0, gpu_types=a100_only)
    big = status("bigmem", gpus=2, submit=1.0, gpu_memory=60 * GiB)

    def nodes(plan: Plan) -> dict[str, set[int]]:
        return {s.job_id: {x.node for x in s.allocation.shares} for s in plan.starts}

    plan = small_policy().schedule(ClusterView(time=100.0, cluster=cluster, pending=(typed, big)))
    assert nodes(plan) == {"typed": {1}, "bigmem": {1}}
    # the A100s taken: a sized A100 job waits, an unconstrained one gets the V100s
    sized = status("sized", gpus=1, submit=2.0, gpu_types=a100_only, observed={**LIMITS})
    plain = status("plain", gpus=4, submit=3.0)
    view = ClusterView(time=100.0, cluster=cluster, pending=(typed, big, sized, plain))
    placed = nodes(small_policy().schedule(view))
    assert placed["plain"] == {0}
    assert all(placed[j] == {1} for j in placed if j != "plain") and len(placed) == 3
    # a measured A100 job does not grow onto the V100s, however well it scales
    alloc = Allocation.whole_gpus([(1, 0), (1, 1)], a100.memory)
    seen = measured(2, 1, 128, step=0.30, sync=0.0)
    run = status("a", gpus=2, observed=seen, allocation=alloc, last_start=0.0, gpu_types=a100_only)
    plan = small_policy().schedule(ClusterView(time=3600.0, cluster=cluster, running=(run,)))
    (resize,) = plan.resizes
    assert {x.node for x in resize.allocation.shares} == {1}
    assert resize.allocation.num_gpus == 4  # it grows on the A100s


def test_an_empty_cluster_leaves_every_job_waiting() -> None:
    pending = (status("a", gpus=1), status("b", gpus=2, observed={**LIMITS}))
    plan = small_policy().schedule(ClusterView(time=0.0, cluster=Cluster(()), pending=pending))
    assert plan.starts == () and plan.preempts == () and plan.resizes == ()
    assert plan.waiting == {"a": beyond_reach(1, 0), "b": beyond_reach(1, 0)}


# -- elastic jobs: never below their minimum --------------------------------------------


def elastic_gpus(plan: Plan, job_id: str) -> list[int]:
    """The GPU counts ``plan`` starts or resizes ``job_id`` on."""
    moves = [*plan.starts, *plan.resizes]
    return [m.allocation.num_gpus for m in moves if m.job_id == job_id]


def test_a_new_elastic_job_starts_on_at_least_its_minimum() -> None:
    """``gpus: 2..8``: a job not measured yet starts on its minimum, not Pollux's one GPU."""
    cluster = Cluster.homogeneous(2, 4)
    new = status("e", gpus=2, max_gpus=8, observed={**LIMITS, "adaptive": 1.0})
    plan = small_policy().schedule(ClusterView(time=60.0, cluster=cluster, pending=(new,)))
    assert elastic_gpus(plan, "e") == [2]
    assert plan.starts[0].batch_size == 128  # max(init_batch, 2 x min_local_bsz)


def test_an_elastic_job_waits_when_fewer_gpus_than_its_minimum_are_free() -> None:
    cluster = Cluster.homogeneous(1, 4)
    held = Allocation.whole_gpus([(0, 0), (0, 1), (0, 2)])
    fixed = status("fixed", gpus=3, preemptible=False, allocation=held, last_start=0.0)
    new = status("e", gpus=2, max_gpus=8, submit=1.0, observed={**LIMITS, "adaptive": 1.0})
    view = ClusterView(time=60.0, cluster=cluster, running=(fixed,), pending=(new,))
    plan = small_policy().schedule(view)
    assert not plan.starts and plan.waiting == {"e": beyond_reach(2, 1)}
    # a batch that fills fewer GPUs than its minimum (64 / 32 = 2 < 4): it waits too
    few = {**LIMITS, "adaptive": 1.0, "max_batch": 64.0}
    big = status("big", gpus=4, max_gpus=8, observed=few)
    plan = small_policy().schedule(ClusterView(time=60.0, cluster=cluster, pending=(big,)))
    assert not plan.starts and plan.waiting == {"big": NO_GPUS}


def test_a_running_elastic_job_is_never_resized_below_its_minimum() -> None:
    """Crowded by new jobs, the fair mean would leave each job one GPU; the elastic job
    (``gpus: 2..8``, running on 2) keeps at least 2 or gives all of them up."""
    cluster = Cluster.homogeneous(1, 4)
    alloc = Allocation.whole_gpus([(0, 0), (0, 1)])
    seen = measured(2, 1, 128, step=0.30, sync=0.02)
    run = status("e", gpus=2, max_gpus=8, observed=seen, allocation=alloc, last_start=0.0)
    pending = tuple(
        status(f"n{i}", gpus=1, submit=3000.0 + i, observed={**LIMITS, "adaptive": 1.0})
        for i in range(3)
    )
    for seed in range(4):
        view = ClusterView(time=3600.0, cluster=cluster, running=(run,), pending=pending)
        plan = small_policy(seed=seed).schedule(view)
        assert all(n >= 2 for n in elastic_gpus(plan, "e")), plan
        starts = sum(s.allocation.num_gpus for s in plan.starts)
        assert starts >= 2  # the others are not all left waiting
