"""``sjf`` and ``value-density`` rank by GPU time (duration x GPUs): a share of one GPU
counts its part of the GPU, not a whole one."""

from __future__ import annotations

from typing import Any

import pytest

from danlu.core.cluster import GPU_TYPES, Allocation, Cluster, GpuShare, Node
from danlu.core.units import GiB
from danlu.sched.registry import make_policy
from danlu.sched.share_size import ranked_gpus
from danlu.sched.view import ClusterView, JobRequest, JobStatus

ONE_GPU = Cluster.homogeneous(1, 1)


def _job(job_id: str, seq: int, duration: float | None, **kw: Any) -> JobStatus:
    request = JobRequest(
        id=job_id, submit_time=float(seq), seq=seq, expected_duration=duration, **kw
    )
    return JobStatus(request)


@pytest.mark.parametrize("name", ["sjf", "value-density"])
def test_a_quarter_gpu_job_ranks_by_its_part_of_the_gpu(name: str) -> None:
    # 1,000 s on a quarter GPU is 250 GPU-seconds, less than a whole GPU's 600 s
    whole = _job("whole", 0, 600.0)
    share = _job("share", 1, 1000.0, gpu_milli=250)
    plan = make_policy(name).schedule(ClusterView(10.0, ONE_GPU, pending=(whole, share)))
    assert [s.job_id for s in plan.starts] == ["share"]


@pytest.mark.parametrize("name", ["sjf", "value-density"])
def test_whole_gpu_jobs_rank_as_before(name: str) -> None:
    # 2 GPUs x 300 s (600) against 1 GPU x 500 s: the 1-GPU job first
    cluster = Cluster.homogeneous(1, 2)
    wide, narrow = _job("wide", 0, 300.0, gpus=2), _job("narrow", 1, 500.0)
    plan = make_policy(name).schedule(ClusterView(10.0, cluster, pending=(wide, narrow)))
    assert [s.job_id for s in plan.starts] == ["narrow"]


def test_ranked_gpus() -> None:
    assert ranked_gpus(_job("w", 0, None, gpus=3)) == 3.0
    assert ranked_gpus(_job("s", 0, None, gpu_milli=300)) == 0.3
    # sized by memory alone: a whole GPU while it waits, its placed part once it runs
    by_memory = _job("m", 0, None, gpu_memory=10 * GiB)
    assert ranked_gpus(by_memory) == 1.0
    running = JobStatus(by_memory.request, Allocation((GpuShare(0, 0, 250, 10 * GiB),)))
    assert ranked_gpus(running) == 0.25
    assert ranked_gpus(_job("none", 0, None, gpus=0, gpu_milli=0)) == 1.0


def test_a_share_sized_by_memory_ranks_by_its_part_of_the_largest_gpu() -> None:
    big = Cluster((Node("a", 1, GPU_TYPES["A100-80GB"]),))
    assert ranked_gpus(_job("m", 0, None, gpu_memory=20 * GiB), big) == 0.25


@pytest.mark.parametrize("name", ["sjf", "value-density"])
def test_the_cached_order_follows_the_clusters_gpu_sizes(name: str) -> None:
    # 20 GiB for 1,000 s: a quarter of an 80 GiB GPU (250 GPU-seconds, before the 600 s
    # whole-GPU job), five sixths of a 24 GiB one (833: after it); one policy, one queue
    whole = _job("whole", 0, 600.0)
    share = _job("share", 1, 1000.0, gpu_memory=20 * GiB)
    policy = make_policy(name)
    firsts = []
    for gpu in ("A100-80GB", "A10", "A100-80GB"):
        cluster = Cluster((Node("a", 1, GPU_TYPES[gpu]),))
        plan = policy.schedule(ClusterView(10.0, cluster, pending=(whole, share)))
        firsts.append(plan.starts[0].job_id)
    assert firsts == ["share", "whole", "share"]
