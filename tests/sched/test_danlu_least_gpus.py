"""The ``danlu`` policy's reason for a waiting job that has reported measurements yet can
get no option: the GPUs it needs are more than those it may use, or than its batch limits
allow. It waited as "shorter-ranked jobs hold the GPUs" on an idle cluster (the reason
counted such a job's least GPUs as 1 unless it had a throughput model and asked a range)."""

from __future__ import annotations

from typing import Any

import pytest

from danlu.core.cluster import GPU_TYPES, Cluster, Node
from danlu.sched.policies import danlu_model as dm
from danlu.sched.registry import make_policy
from danlu.sched.view import ClusterView, JobRequest, JobStatus

# node 0: 4 x A100-40GB, node 1: 2 x H100
MIXED = Cluster((Node("a", 4, GPU_TYPES["A100-40GB"]), Node("b", 2, GPU_TYPES["H100"])))
LIMITS = {"init_batch": 64.0, "max_batch": 4096.0, "min_local_bsz": 32.0, "max_local_bsz": 256.0}
MEASURED = {
    **LIMITS,
    "progress": 0.3,
    "step_time": 0.1,
    "sync_time": 0.01,
    "local_bsz": 64.0,
    "accum_steps": 0.0,
    "batch_size": 256.0,
    "num_replicas": 4.0,
    "num_nodes": 1.0,
    "grad_sqr": 1.0,
    "grad_var": 4.0,
}


def _reason(observed: dict[str, float], closed: frozenset[int], **request: Any) -> str | None:
    job = JobStatus(
        JobRequest(id="x", submit_time=0.0, **request),
        observed=observed,
        marks=dm.remembered({}, observed),
    )
    view = ClusterView(1000.0, MIXED, pending=(job,), closed_nodes=closed)
    plan = make_policy("danlu").schedule(view)
    assert not plan.starts  # the decision: it waits
    return plan.reason("x")


@pytest.mark.parametrize(
    "observed",
    [
        {"progress": 0.3},  # rigid (no batch limits), reported its progress
        dict(LIMITS),  # elastic, never measured: starts at its request (one node at most)
    ],
    ids=["rigid-reported", "elastic-unmeasured"],
)
def test_a_reporting_job_wider_than_the_open_gpus_says_how_many_it_may_use(
    observed: dict[str, float],
) -> None:
    # node 0 closed: 2 GPUs are open on an idle cluster, the job asks for 4
    reason = _reason(observed, frozenset({0}), gpus=4)
    assert reason is not None and reason.startswith("needs 4 GPUs but may use only 2"), reason


def test_a_measured_range_still_says_how_many_it_may_use() -> None:
    reason = _reason(MEASURED, frozenset({0}), gpus=4, max_gpus=8)
    assert reason is not None and reason.startswith("needs 4 GPUs but may use only 2"), reason


def test_a_measured_job_whose_batch_limits_forbid_its_least_gpus_says_so() -> None:
    # max_batch 64 at a least micro-batch of 32: at most 2 GPUs, and it asks for 4..8
    seen = {**MEASURED, "max_batch": 64.0, "init_batch": 64.0, "batch_size": 64.0}
    reason = _reason(seen, frozenset(), gpus=4, max_gpus=8)
    assert reason is not None
    assert reason.startswith("needs 4 GPUs but its batch limits allow at most 2"), reason
    assert "max_batch 64 / min_local_bsz 32" in reason
