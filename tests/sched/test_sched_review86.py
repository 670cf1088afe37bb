"""danlu.sched: what a ClusterView and a JobRequest refuse (a job listed twice,
a pending job holding GPUs, a running share past its node's GPUs, a clock that is not a
number, a share of nothing), a policy's placement checked when it is built, and the old
import paths of the modules split out of ``policies/base.py`` and ``quota.py``."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pytest

from danlu.core.cluster import Allocation, Cluster, GpuShare
from danlu.core.errors import ConfigError, UnknownNameError
from danlu.sched.placement.gang import STRATEGIES
from danlu.sched.policies.danlu import DanluPolicy
from danlu.sched.policies.fair_share import FairSharePolicy
from danlu.sched.policies.fifo import FifoPolicy
from danlu.sched.policies.optimus import OptimusPolicy
from danlu.sched.policies.pollux import PolluxPolicy
from danlu.sched.policies.priority import PriorityPolicy
from danlu.sched.policies.sjf import SjfPolicy
from danlu.sched.policies.tiresias import TiresiasPolicy
from danlu.sched.policies.value_density import ValueDensityPolicy
from danlu.sched.registry import default_registry, make_policy
from danlu.sched.view import ClusterView, JobRequest, JobStatus

POLICIES = default_registry().names()
CLASSES: dict[str, Any] = {
    "danlu": DanluPolicy,
    "fair-share": FairSharePolicy,
    "fifo": FifoPolicy,
    "optimus": OptimusPolicy,
    "pollux": PolluxPolicy,
    "priority": PriorityPolicy,
    "sjf": SjfPolicy,
    "tiresias": TiresiasPolicy,
    "value-density": ValueDensityPolicy,
}
"""The built-in policies' classes, by registry name (built directly, not by the registry)."""


def _request(job_id: str, gpus: int = 1, seq: int = 0, **kw: Any) -> JobRequest:
    return JobRequest(id=job_id, submit_time=float(seq), gpus=gpus, seq=seq, **kw)


def _running(job_id: str, gpus: list[tuple[int, int]], seq: int = 0) -> JobStatus:
    request = _request(job_id, len(gpus), seq)
    return JobStatus(request, Allocation.whole_gpus(gpus), last_start=0.0)


# -- one job, listed once ------------------------------------------------------------------


def test_a_job_pending_twice_is_refused_naming_it() -> None:
    """Every policy started it twice (two Starts for one job)."""
    cluster = Cluster.homogeneous(2, 4)
    first, again = JobStatus(_request("a", seq=0)), JobStatus(_request("a", seq=1))
    with pytest.raises(ConfigError, match=r"job 'a' is listed twice in pending"):
        ClusterView(10.0, cluster, pending=(first, again))


def test_a_job_running_and_pending_is_refused_naming_it() -> None:
    """Every policy started the running job again, on other GPUs."""
    cluster = Cluster.homogeneous(2, 4)
    running = _running("a", [(0, 0)])
    with pytest.raises(ConfigError, match=r"job 'a' is listed in running and pending"):
        ClusterView(10.0, cluster, running=(running,), pending=(JobStatus(_request("a", seq=1)),))


def test_a_job_running_twice_is_refused() -> None:
    cluster = Cluster.homogeneous(2, 4)
    with pytest.raises(ConfigError, match=r"job 'a' is listed twice in running"):
        ClusterView(0.0, cluster, running=(_running("a", [(0, 0)]), _running("a", [(1, 0)])))


@pytest.mark.parametrize("name", POLICIES)
def test_distinct_jobs_each_start_once(name: str) -> None:
    """The check refuses no valid view: distinct ids are started once each."""
    cluster = Cluster.homogeneous(2, 4)
    pending = tuple(JobStatus(_request(f"j{i}", seq=i)) for i in range(3))
    plan = make_policy(name).schedule(ClusterView(10.0, cluster, pending=pending))
    started = [start.job_id for start in plan.starts]
    assert sorted(started) == ["j0", "j1", "j2"]


def test_a_pending_job_holding_an_allocation_is_refused() -> None:
    """The view's usage left its GPUs out: danlu planned a Resize of a job that was not
    running, the queue policies started it on other GPUs."""
    cluster = Cluster.homogeneous(1, 2)
    holding = JobStatus(_request("p"), Allocation.whole_gpus([(0, 1)]))
    with pytest.raises(ConfigError, match=r"pending: job 'p' holds an allocation \(0:1\)"):
        ClusterView(0.0, cluster, pending=(holding,))


# -- running shares on GPUs the cluster has ------------------------------------------------


def test_a_running_gpu_past_its_nodes_count_is_refused_naming_job_node_and_index() -> None:
    """GPU 4 of a 4-GPU node 0 was counted as GPU 0 of node 1 (flat numbering): a job
    placed there next was put on a GPU already in use."""
    cluster = Cluster.homogeneous(2, 4)
    job = _running("r", [(0, 4)])
    with pytest.raises(ConfigError, match=r"job 'r' holds GPU 4 of node 0 .*GPUs 0 to 3"):
        ClusterView(0.0, cluster, running=(job,))


@pytest.mark.parametrize(
    ("node", "gpu", "words"),
    [
        (0, -1, r"GPU -1 of node 0 .*GPUs 0 to 3"),  # read as the previous node's last GPU
        (-1, 0, r"node -1, which is not a node index.*0 to 1"),  # read as the last node
        (2, 0, r"node 2, which is not a node index.*0 to 1"),  # a bare IndexError
        (True, 0, r"node True, which is not a node index"),
        (0, 1.0, r"GPU 1.0 of node 0"),
    ],
)
def test_a_running_share_off_the_cluster_is_refused(node: Any, gpu: Any, words: str) -> None:
    cluster = Cluster.homogeneous(2, 4)
    job = JobStatus(_request("r"), Allocation((GpuShare(node, gpu),)), last_start=0.0)
    with pytest.raises(ConfigError, match=words):
        ClusterView(0.0, cluster, running=(job,))


def test_a_share_past_the_gpus_is_refused_with_usage_given_too() -> None:
    """An adapter that passes its own usage arrays gets the same check."""
    cluster = Cluster.homogeneous(2, 4)
    used = np.zeros(8, dtype=np.int64)
    with pytest.raises(ConfigError, match=r"job 'r' holds GPU 5 of node 1"):
        ClusterView(
            0.0,
            cluster,
            running=(_running("r", [(1, 5)]),),
            used_milli=used,
            used_memory=used.copy(),
        )


def test_numpy_indices_in_range_are_counted_as_given() -> None:
    cluster = Cluster(Cluster.homogeneous(1, 2).nodes + Cluster.homogeneous(1, 4).nodes)
    share = GpuShare(np.int64(1), np.int64(3))  # type: ignore[arg-type]
    view = ClusterView(0.0, cluster, running=(JobStatus(_request("r"), Allocation((share,))),))
    milli, _ = view.usage()
    assert milli.tolist() == [0, 0, 0, 0, 0, 1000]


def test_a_node_without_gpus_is_named_so() -> None:
    cluster = Cluster(Cluster.homogeneous(1, 0).nodes + Cluster.homogeneous(1, 2).nodes)
    with pytest.raises(ConfigError, match=r"GPU 0 of node 0 .*which has no GPUs"):
        ClusterView(0.0, cluster, running=(_running("r", [(0, 0)]),))


# -- the clock -----------------------------------------------------------------------------


@pytest.mark.parametrize("time", [math.nan, math.inf, -math.inf])
def test_a_clock_that_is_not_a_finite_number_is_refused(time: float) -> None:
    """Pollux seeded its search with a bare ValueError (NaN) or OverflowError; tiresias
    asked for its next round at -inf."""
    with pytest.raises(ConfigError, match=r"ClusterView.time: .*finite"):
        ClusterView(time, Cluster.homogeneous(1, 2))


def test_a_clock_before_zero_is_still_a_clock() -> None:
    view = ClusterView(-5.0, Cluster.homogeneous(1, 2), pending=(JobStatus(_request("a")),))
    assert [s.job_id for s in make_policy("fifo").schedule(view).starts] == ["a"]


# -- a request's share of each GPU ---------------------------------------------------------


@pytest.mark.parametrize("milli", [0, -500, 1001])
def test_a_gpu_share_outside_1_to_1000_milli_is_refused(milli: int) -> None:
    """0 or less was placed as a share of nothing: any number of such jobs started on one
    GPU (negative milli-GPU and memory); more than 1000 read as a whole GPU."""
    with pytest.raises(ConfigError, match=rf"JobRequest 'a': gpu_milli .*1 to 1000, got {milli}"):
        _request("a", gpu_milli=milli)


def test_negative_gpu_memory_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"JobRequest 'a': gpu_memory .*0 or more, got -5"):
        _request("a", gpu_memory=-5)


def test_a_request_for_no_gpu_may_name_no_share() -> None:
    """The simulator reads a CPU-only pod as ``gpus=0, gpu_milli=0`` (then leaves it out)."""
    assert _request("cpu", gpus=0, gpu_milli=0).gpu_milli == 0


@pytest.mark.parametrize("duration", [math.nan, -60.0])
def test_an_expected_duration_that_is_nan_or_negative_is_refused(duration: float) -> None:
    """value-density read NaN as 1 s left and started that job first; sjf ranked a
    negative estimate the shortest of all."""
    with pytest.raises(ConfigError, match=r"JobRequest 'b': expected_duration .*0 or more"):
        _request("b", expected_duration=duration)


@pytest.mark.parametrize("duration", [None, math.inf])
def test_an_unknown_or_endless_duration_still_ranks_last(duration: float | None) -> None:
    # (an estimate of 0 s is known, the shortest: tests/sched/test_queue_edge_inputs.py)
    cluster = Cluster.homogeneous(1, 1)
    other = JobStatus(_request("other", seq=0, expected_duration=duration))  # first in
    known = JobStatus(_request("known", seq=1, expected_duration=60.0))
    for name in ("sjf", "value-density"):
        plan = make_policy(name).schedule(ClusterView(0.0, cluster, pending=(other, known)))
        assert [s.job_id for s in plan.starts] == ["known"]


# -- placement checked when a policy is built ----------------------------------------------


@pytest.mark.parametrize("name", POLICIES)
def test_a_policy_built_directly_refuses_an_unknown_placement(name: str) -> None:
    """Built without the registry, a policy took any placement and raised at its first
    round; now it raises the registry's error when built."""
    factory = CLASSES[name]
    with pytest.raises(UnknownNameError) as built:
        factory(placement="best_fit")
    with pytest.raises(UnknownNameError) as registered:
        make_policy(name, placement="best_fit")
    assert str(built.value) == str(registered.value)
    assert "unknown placement 'best_fit'" in str(built.value)


@pytest.mark.parametrize("name", POLICIES)
def test_a_policy_built_directly_refuses_a_placement_that_is_no_string(name: str) -> None:
    factory = CLASSES[name]
    with pytest.raises(ConfigError, match=r"option 'placement' must be a string"):
        factory(placement=3)


@pytest.mark.parametrize("name", POLICIES)
def test_every_placement_strategy_still_builds(name: str) -> None:
    assert sorted(CLASSES) == POLICIES
    for strategy in STRATEGIES:
        policy = make_policy(name, placement=strategy)
        assert dataclasses.is_dataclass(policy)


# -- the split modules keep their old import paths -----------------------------------------


def test_names_split_out_of_base_and_quota_import_from_their_old_modules() -> None:
    import danlu.sched.policies.base as base
    import danlu.sched.quota as quota
    from danlu.sched import quota_check, quota_limits
    from danlu.sched.policies import queue_round, ranked_round, waiting

    assert base.queue_round is queue_round.queue_round
    assert base.queue_pass is queue_round.queue_pass
    assert base.ranked_round is ranked_round.ranked_round
    assert base.why_not is waiting.why_not
    assert base.NO_GPU_ASKED is waiting.NO_GPU_ASKED
    for name in base.__all__:
        assert hasattr(base, name), name
    assert quota.Quotas is quota_limits.Quotas
    assert quota.within_quota_sizes is quota_limits.within_quota_sizes
    for name in quota.__all__:
        assert hasattr(quota, name), name
    assert quota_check.checked.__module__ == "danlu.sched.quota_check"
