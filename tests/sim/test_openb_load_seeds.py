"""The packing experiment's ``load`` and seeds, checked before any pod is packed: a NaN or
infinite load packed pod copies for ever (the arrived demand never reached it), and a
negative seed came out of numpy's seeding as a bare ValueError."""

from __future__ import annotations

import math

import pytest

from danlu.core.errors import ConfigError
from danlu.sched.placement.share import ShareCluster, ShareNode, ShareRequest
from danlu.sim.openb import OpenbPod, run_allocation_experiment, run_seed

MOST_PLACED = 10_000
"""Far more pods than a load of 1 takes on the test's cluster (4): past it, the run is
packing for ever."""

NODES = [ShareNode(name="n1", cpu_milli=64_000, memory_mib=100_000, num_gpu=2, model="T4")]
PODS = [
    OpenbPod(
        "p",
        ShareRequest(cpu_milli=100, memory_mib=100, num_gpu=1, gpu_milli=500, gpu_spec=frozenset()),
    )
]


@pytest.fixture(autouse=True)
def bounded_packing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail a test whose run packs more than :data:`MOST_PLACED` pods, instead of hanging."""
    real = ShareCluster.place
    placed = [0]

    def counting(self: ShareCluster, request: ShareRequest) -> object:
        placed[0] += 1
        assert placed[0] <= MOST_PLACED, "the experiment kept packing pods: the load is never met"
        return real(self, request)

    monkeypatch.setattr(ShareCluster, "place", counting)


def test_a_valid_load_packs_to_it() -> None:
    result = run_seed(PODS, NODES, "fgd", 1.0, 0)
    assert result.allocation_ratio == 100.0
    assert result.arrived_pods == 4


@pytest.mark.parametrize("load", [math.nan, math.inf, -1.0, 0.0])
def test_a_load_that_is_no_finite_positive_number_is_refused(load: float) -> None:
    with pytest.raises(ConfigError, match=r"load \(--load\) must be a finite number above 0"):
        run_seed(PODS, NODES, "fgd", load, 0)
    with pytest.raises(ConfigError, match=r"load \(--load\) must be a finite number above 0"):
        run_allocation_experiment(PODS, NODES, "fgd", load, (0,))


def test_a_negative_seed_is_refused_before_any_seed_runs() -> None:
    with pytest.raises(ConfigError, match=r"seeds \(--seeds\) must be whole numbers >= 0; got -1"):
        run_seed(PODS, NODES, "fgd", 1.0, -1)
    with pytest.raises(ConfigError, match="got -1"):
        run_allocation_experiment(PODS, NODES, "fgd", 1.0, (3, -1))


def test_seeds_pods_and_nodes_given_as_iterators_are_read_once() -> None:
    """The checks read the seeds, pods and nodes before the run: an iterator was read empty
    by them, so the run had no seeds (a NaN mean) and no pods ("needs at least one pod")."""
    listed = run_allocation_experiment(PODS, NODES, "fgd", 1.0, (0, 1))
    result = run_allocation_experiment(iter(PODS), iter(NODES), "fgd", 1.0, iter((0, 1)))
    assert result.seeds == (0, 1) and len(result.per_seed) == 2
    assert result.allocation_ratio == listed.allocation_ratio == 100.0
    one = run_seed(iter(PODS), iter(NODES), "fgd", 1.0, 0)
    assert one.allocation_ratio == 100.0 and one.arrived_pods == 4


def test_a_seed_named_twice_is_refused_before_any_seed_runs() -> None:
    """The CLI refused ``--seeds 1,1``; from Python the seed's run counted twice in the mean."""
    import numpy as np

    with pytest.raises(ConfigError, match=r"seeds \(--seeds\): seed 3 is named twice"):
        run_allocation_experiment(PODS, NODES, "fgd", 1.0, (3, 5, np.int64(3)))
    result = run_allocation_experiment(PODS, NODES, "fgd", 1.0, (3, 5))
    assert result.seeds == (3, 5)
