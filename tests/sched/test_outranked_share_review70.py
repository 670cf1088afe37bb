"""A share waiting below higher-ranked jobs says the part of a GPU it needs
(``0.5 GPU``), not a count rounded down to ``0 GPUs``."""

from __future__ import annotations

import pytest

from danlu.core.cluster import GPU_TYPES, Allocation, Cluster, GpuShare, Node
from danlu.core.units import GiB
from danlu.sched.policies.priority import PriorityPolicy
from danlu.sched.view import ClusterView, JobRequest, JobStatus


@pytest.mark.parametrize(("milli", "said"), [(500, "0.5 GPU"), (625, "0.625 GPU")])
def test_an_outranked_share_says_its_part_of_a_gpu(milli: int, said: str) -> None:
    cluster = Cluster((Node("a", 1, GPU_TYPES["A100-80GB"]),))
    above = JobRequest("R", 0.0, 1, priority=10, seq=0, gpu_milli=1000 - 400)
    below = JobRequest("L", 0.0, 1, priority=0, seq=1, gpu_milli=400)
    running = (
        JobStatus(above, Allocation((GpuShare(0, 0, 600, 48 * GiB),)), last_start=0.0),
        JobStatus(below, Allocation((GpuShare(0, 0, 400, 32 * GiB),)), last_start=0.0),
    )
    # ranked between them, it needs more than the 0.4 GPU the job above leaves
    waiting = JobStatus(JobRequest("W", 0.0, 1, priority=1, seq=2, gpu_milli=milli))
    plan = PriorityPolicy().schedule(
        ClusterView(100.0, cluster, running=running, pending=(waiting,))
    )
    assert plan.starts == ()
    assert plan.reason("W") == f"outranked: needs {said} of capacity held by higher-ranked jobs"
