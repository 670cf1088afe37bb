"""Shares sized by memory pack a GPU whenever their memory fits.

A share that names only ``gpu_memory`` takes the GPU's compute in proportion to its memory.
That part used to be rounded UP to a milli-GPU: three shares of 8 GiB on a 24 GiB GPU took
334 milli each, 1002 > 1000, and the third waited although the memory fitted exactly (the
quota layer counted the same 0.334 GPUs, so three such shares passed a quota of one GPU).
It is now rounded down, at least 1 milli (:func:`danlu.sched.share_size.milli_for_memory`):
shares whose memory adds up to at most the GPU's always fit on its compute too, and the
placement and the quotas count the same milli-GPU through that one function."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from danlu.core.cluster import MILLI_PER_GPU, Cluster, GpuType, Node
from danlu.core.units import GiB
from danlu.sched.placement.gang import STRATEGIES, FreeMap
from danlu.sched.policies.fifo import FifoPolicy
from danlu.sched.quota import Quota, QuotaPolicy, Quotas, minimum_usage, start_usage
from danlu.sched.view import ClusterView, JobRequest, JobStatus

A10 = GpuType("A10", 24 * GiB)
H100 = GpuType("H100", 80 * GiB)


def _by_memory(job_id: str, memory: int, project: str = "default") -> JobRequest:
    """A request for part of one GPU sized by its memory alone."""
    return JobRequest(id=job_id, submit_time=0.0, gpu_memory=memory, project=project)


def _by_milli(job_id: str, milli: int) -> JobRequest:
    """A request for part of one GPU sized by its compute alone (memory in proportion)."""
    return JobRequest(id=job_id, submit_time=0.0, gpu_milli=milli)


# (GPU, memory of each share, shares): their memory adds up to at most the GPU's
PACKS = [
    (A10, 8 * GiB, 3),  # the review's repro: 334 milli each rounded up
    (A10, 6 * GiB, 4),  # 250 exactly: fitted before too
    (H100, H100.memory // 3, 3),  # 26.67 GiB: 334 each rounded up
    (H100, H100.memory // 7, 7),
    (GpuType("odd", 24 * GiB + 5), (24 * GiB + 5) // 9, 9),
]


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize(("gpu", "memory", "count"), PACKS, ids=lambda p: str(p))
def test_memory_shares_that_fit_in_memory_fit_on_one_gpu(
    strategy: str, gpu: GpuType, memory: int, count: int
) -> None:
    free = FreeMap(ClusterView(0.0, Cluster.homogeneous(1, 1, gpu)), strategy)
    placed = [free.place(_by_memory(f"s{i}", memory)) for i in range(count)]
    assert all(alloc is not None for alloc in placed)
    milli = [alloc.shares[0].milli for alloc in placed if alloc is not None]
    assert milli == [MILLI_PER_GPU * memory // gpu.memory] * count
    assert int(free.free_milli[0]) >= 0
    assert int(free.free_memory[0]) == gpu.memory - count * memory


def test_three_shares_of_8gib_start_together_under_fifo() -> None:
    """The repro through a policy: the third share starts in the same round."""
    cluster = Cluster.homogeneous(1, 1, A10)
    jobs = tuple(
        JobStatus(JobRequest(f"s{i}", float(i), seq=i, gpu_memory=8 * GiB)) for i in range(3)
    )
    plan = FifoPolicy().schedule(ClusterView(10.0, cluster, pending=jobs))
    assert sorted(start.job_id for start in plan.starts) == ["s0", "s1", "s2"]
    assert [s.allocation.gpu_milli for s in plan.starts] == [333, 333, 333]


@settings(max_examples=200, deadline=None)
@given(
    capacity=st.integers(min_value=GiB, max_value=200 * GiB),
    parts=st.lists(st.integers(min_value=1, max_value=1000), min_size=1, max_size=40),
    milli_shares=st.lists(st.integers(min_value=1, max_value=999), max_size=4),
)
def test_memory_shares_fit_wherever_their_memory_fits(
    capacity: int, parts: list[int], milli_shares: list[int]
) -> None:
    """Shares sized by milli-GPU (their part of the memory with them), then shares sized by
    memory that split what memory is left: every one of them fits on the one GPU."""
    free = FreeMap(ClusterView(0.0, Cluster.homogeneous(1, 1, GpuType("g", capacity))))
    used_milli = 0
    for i, milli in enumerate(milli_shares):
        if used_milli + milli > MILLI_PER_GPU:
            break
        assert free.place(_by_milli(f"m{i}", milli)) is not None
        used_milli += milli
    left = int(free.free_memory[0])
    # split what is left in proportion to ``parts``, rounded down (sums to at most ``left``)
    memories = [left * part // sum(parts) for part in parts]
    # each at least a thousandth of the GPU's memory (a share takes at least 1 milli-GPU)
    for i, memory in enumerate(m for m in memories if MILLI_PER_GPU * m >= capacity):
        assert free.place(_by_memory(f"s{i}", memory)) is not None, (i, memory)
    assert int(free.free_milli[0]) >= 0


@pytest.mark.parametrize(("gpu", "memory", "count"), PACKS, ids=lambda p: str(p))
def test_the_quota_layer_counts_what_the_placement_takes(
    gpu: GpuType, memory: int, count: int
) -> None:
    cluster = Cluster.homogeneous(1, 1, gpu)
    request = _by_memory("s", memory)
    alloc = FreeMap(ClusterView(0.0, cluster)).place(request)
    assert alloc is not None
    taken = alloc.gpu_milli / MILLI_PER_GPU
    assert start_usage(request, gpu.memory).gpus == taken
    assert minimum_usage(request, cluster).gpus == taken


def test_the_least_use_of_a_memory_share_is_on_the_largest_gpu() -> None:
    """On GPUs of several sizes a share sized by memory takes the least compute on the
    largest, as the placement gives it there."""
    cluster = Cluster((Node("a", 1, A10), Node("h", 1, H100)))
    request = _by_memory("s", 8 * GiB)
    assert minimum_usage(request, cluster).gpus == (MILLI_PER_GPU * 8 // 80) / MILLI_PER_GPU
    assert start_usage(request, A10.memory).gpus == 0.333


def test_three_shares_of_8gib_fit_a_quota_of_one_gpu() -> None:
    """A project's quota of one GPU holds three shares of a third of a 24 GiB GPU's memory:
    the quota counts 0.333 GPUs each, as the placement takes."""
    cluster = Cluster.homogeneous(1, 2, A10)
    jobs = tuple(
        JobStatus(JobRequest(f"s{i}", float(i), seq=i, gpu_memory=8 * GiB, project="p"))
        for i in range(3)
    )
    policy = QuotaPolicy(FifoPolicy(), Quotas(projects={"p": Quota("project 'p'", gpus=1.0)}))
    plan = policy.schedule(ClusterView(10.0, cluster, pending=jobs))
    assert sorted(start.job_id for start in plan.starts) == ["s0", "s1", "s2"]
    assert plan.reason("s2") is None


@pytest.mark.parametrize("backfill", [False, True])
def test_a_share_sized_by_compute_says_it_needs_some_memory(backfill: bool) -> None:
    """A share of 250 milli-GPU takes its part of the memory (what is left when less), so
    it waits where no memory is left though compute is: its reason says so. It said "no GPU
    has 250 milli-GPU free" beside 900 free milli-GPU."""
    cluster = Cluster.homogeneous(1, 1, H100)
    both = JobRequest("s0", 0.0, seq=0, gpu_milli=100, gpu_memory=H100.memory)
    jobs = (JobStatus(both), JobStatus(JobRequest("s1", 1.0, seq=1, gpu_milli=250)))
    plan = FifoPolicy(backfill=backfill).schedule(ClusterView(10.0, cluster, pending=jobs))
    assert [start.job_id for start in plan.starts] == ["s0"]
    assert plan.reason("s1") == "no GPU has 250 milli-GPU and some memory free"
