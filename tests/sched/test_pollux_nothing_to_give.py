"""The ``pollux`` search skips its generations when no job may get a replica: the result is
the empty allocation either way, and the search cost a stuck simulation one whole search per
waiting job the policy cannot size (each asked about alone)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from danlu.sched.policies import pollux_search as ps


def _problem(seed: int, jobs: int, nodes: int, most: np.ndarray) -> ps.SearchProblem:
    rng = np.random.default_rng(seed)
    capacity = rng.integers(0, 5, size=nodes)
    base = rng.integers(0, 3, size=(jobs, nodes))  # running jobs the search would preempt
    return ps.SearchProblem(
        speedup=rng.uniform(0.0, 2.0, size=(jobs, 2, int(capacity.sum()) + 4)),
        max_replicas=most,
        capacity=capacity,
        base=base,
        restart_factor=rng.uniform(0.0, 1.0, size=jobs),
        gang=rng.random(jobs) < 0.5,
        allowed=rng.random((jobs, nodes)) < 0.7 if seed % 2 else None,
        min_replicas=rng.integers(0, 3, size=jobs),
    )


@settings(max_examples=25, deadline=None)
@given(jobs=st.integers(1, 5), nodes=st.integers(1, 4), seed=st.integers(0, 10_000))
def test_a_search_with_nothing_to_give_returns_what_the_whole_search_returns(
    jobs: int, nodes: int, seed: int
) -> None:
    prob = _problem(seed, jobs, nodes, np.zeros(jobs, dtype=np.int64))
    assert ps.nothing_to_give(prob)
    quick = ps.search(prob, prob.base[None], np.random.default_rng(seed), 12, 8)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ps, "nothing_to_give", lambda problem: False)
        whole = ps.search(prob, prob.base[None], np.random.default_rng(seed), 12, 8)
    assert quick.dtype == whole.dtype and np.array_equal(quick, whole)
    assert not whole.any()


def test_a_search_with_nothing_to_give_runs_no_generation() -> None:
    prob = _problem(3, 4, 3, np.zeros(4, dtype=np.int64))
    rng = np.random.default_rng(7)
    drawn_before = rng.bit_generator.state
    best = ps.search(prob, prob.base[None], rng, 100, 100)
    assert not best.any() and best.shape == prob.base.shape
    assert rng.bit_generator.state == drawn_before  # no repair, no generation drew from it


def test_a_job_that_may_get_replicas_or_a_negative_capacity_is_searched() -> None:
    some = _problem(5, 3, 2, np.array([0, 2, 0], dtype=np.int64))
    assert not ps.nothing_to_give(some)
    owed = ps.SearchProblem(
        speedup=np.zeros((1, 2, 3)),
        max_replicas=np.zeros(1, dtype=np.int64),
        capacity=np.array([-1, 2], dtype=np.int64),  # a node that lost GPUs its jobs hold
        base=np.zeros((1, 2), dtype=np.int64),
        restart_factor=np.ones(1),
        gang=np.zeros(1, dtype=bool),
    )
    assert not ps.nothing_to_give(owed)
