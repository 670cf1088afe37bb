"""A ``gpu_fraction`` share that names no ``gpu_memory`` gets memory in proportion
to its compute share (floor of ``milli * capacity / 1000``), so it is capped like any share.

It used to take all the memory its GPU had left: the first such share on a GPU got all of
it, the second none; a share with memory 0 is an uncapped slot (:meth:`JobLaunch.slots`,
"the whole GPU"), which the executors' launch check (:func:`busy_gpus`) refused beside the
first share every pass, so the second job stayed RUNNING without a process."""

from __future__ import annotations

import pytest

from danlu.core.cluster import MILLI_PER_GPU, Allocation, Cluster, GpuShare, GpuType
from danlu.core.units import GiB
from danlu.executors.base import HeldGpus, JobLaunch, busy_gpus
from danlu.sched.placement.gang import STRATEGIES, FreeMap
from danlu.sched.quota import Quota, Usage, excess, minimum_usage, room_for, start_usage
from danlu.sched.view import ClusterView, JobRequest, JobStatus

A10 = GpuType("A10", 24 * GiB)


def _share(job_id: str, milli: int, memory: int = 0) -> JobRequest:
    """A single-GPU request for ``milli`` thousandths of a GPU (and ``memory`` bytes)."""
    return JobRequest(id=job_id, submit_time=0.0, gpus=1, gpu_milli=milli, gpu_memory=memory)


def _one_share(alloc: Allocation | None) -> GpuShare:
    assert alloc is not None
    assert len(alloc.shares) == 1
    return alloc.shares[0]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_two_fraction_shares_get_their_part_of_the_memory_and_are_capped(strategy: str) -> None:
    """The repro: two ``gpu_fraction: 0.4`` jobs on one 24 GiB GPU each get 0.4 of its
    memory, both slots are capped, and the second launches beside the first."""
    free = FreeMap(ClusterView(0.0, Cluster.homogeneous(1, 1, A10)), strategy)
    first = _one_share(free.place(_share("a", 400)))
    second = _one_share(free.place(_share("b", 400)))
    expected = 400 * A10.memory // MILLI_PER_GPU
    assert (first.gpu, first.milli, first.memory) == (0, 400, expected)
    assert (second.gpu, second.milli, second.memory) == (0, 400, expected)
    assert int(free.free_memory[0]) == A10.memory - 2 * expected
    assert int(free.free_milli[0]) == 200
    slots_a = JobLaunch.slots(Allocation((first,)))
    slots_b = JobLaunch.slots(Allocation((second,)))
    assert [s.memory for s in slots_a] == [expected]
    assert [s.memory for s in slots_b] == [expected]
    # The executors' launch check lets the second run start beside the first one.
    held = HeldGpus("a", [(0, 0)], shared=True, stopping=False)
    busy_gpus(JobLaunch("b", ("true",), gpus=slots_b), [held])


@pytest.mark.parametrize("capacity", [3001, 24 * GiB, 80 * GiB + 7], ids=str)
def test_fraction_shares_summing_to_one_gpu_never_exceed_its_memory(capacity: int) -> None:
    """Three shares of 333, 333 and 334 milli fill the GPU's compute and, rounded down,
    never take more memory than it has."""
    free = FreeMap(ClusterView(0.0, Cluster.homogeneous(1, 1, GpuType("odd", capacity))))
    shares = [
        _one_share(free.place(_share(f"s{milli}-{i}", milli)))
        for i, milli in enumerate((333, 333, 334))
    ]
    assert [s.memory for s in shares] == [
        333 * capacity // MILLI_PER_GPU,
        333 * capacity // MILLI_PER_GPU,
        334 * capacity // MILLI_PER_GPU,
    ]
    assert sum(s.memory for s in shares) <= capacity
    assert int(free.free_milli[0]) == 0 and int(free.free_memory[0]) >= 0
    assert all(s.memory > 0 for s in shares)
    assert free.place(_share("more", 1)) is None


def test_a_fraction_share_beside_a_memory_sized_one_gets_its_part() -> None:
    """Beside a share sized by memory (compute in proportion, rounded down since review 70)
    a fraction share taking the rest of the compute fits, with its part of the memory or
    what is left: less by under a milli-GPU's worth of memory."""
    free = FreeMap(ClusterView(0.0, Cluster.homogeneous(1, 1, A10)))
    sized = _one_share(free.place(_share("m", MILLI_PER_GPU, 10 * GiB)))
    fraction = _one_share(free.place(_share("f", MILLI_PER_GPU - sized.milli)))
    assert fraction.gpu == sized.gpu == 0
    part = (MILLI_PER_GPU - sized.milli) * A10.memory // MILLI_PER_GPU
    assert fraction.memory == min(part, A10.memory - sized.memory)
    assert 0 <= part - fraction.memory < A10.memory // MILLI_PER_GPU
    assert sized.memory + fraction.memory <= A10.memory


def test_a_fraction_share_never_gets_no_memory() -> None:
    """A GPU whose memory is all held (a share placed before review 69 took all the memory
    left) takes no fraction share: memory 0 would be an uncapped slot that never launches
    beside the holder. The share goes to a GPU with memory left, else waits."""
    cluster = Cluster.homogeneous(1, 2, A10)
    legacy = JobStatus(
        _share("old", 500), Allocation((GpuShare(0, 0, 500, A10.memory),)), last_start=0.0
    )
    free = FreeMap(ClusterView(10.0, cluster, running=(legacy,)))
    placed = _one_share(free.place(_share("new", 400)))
    assert (placed.gpu, placed.memory) == (1, 400 * A10.memory // MILLI_PER_GPU)
    assert free.place(_share("fills-gpu-1", 600)) is not None
    assert free.place(_share("waits", 100)) is None  # GPU 0 has compute, but no memory
    assert free.any_capacity()  # a necessary condition only: GPU 0 has compute left


def test_the_quota_counts_a_fraction_share_by_its_part_of_the_memory() -> None:
    """The quota layer counts what the placement gives: 0.4 of a 24 GiB GPU's memory, not
    all of it, so a 10 GiB memory quota lets the share start (it was counted as 24 GiB: a
    job that "can never start")."""
    cluster = Cluster.homogeneous(1, 1, A10)
    request = _share("a", 400)
    part = 400 * A10.memory // MILLI_PER_GPU
    assert request.memory_on(A10.memory) == part
    assert minimum_usage(request, cluster) == Usage(0.4, part)
    assert start_usage(request, A10.memory) == Usage(0.4, part)
    quota = Quota("project 'p'", gpu_memory=10 * GiB)
    assert excess(quota, Usage(0.0, 0), minimum_usage(request, cluster)) is None
    assert room_for(quota, Usage(0.0, 0), request, cluster) > 0
    # a share that names its memory, and a whole GPU, are counted as before
    assert _share("b", 400, 2 * GiB).memory_on(A10.memory) == 2 * GiB
    whole = JobRequest(id="c", submit_time=0.0, gpus=2)
    assert whole.memory_on(A10.memory) == A10.memory
