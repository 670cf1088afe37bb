"""The ``optimus`` baseline: its marginal-gain split is the best split of GPUs for remaining
times that fall less with every GPU (checked against all splits of small problems), and the
policy turns views into plans as the Pollux study's Optimus did (least GPUs first in
submission order, growth by remaining time saved, unchanged counts kept in place, the
job's own batch, deterministic)."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from danlu.core.cluster import Allocation, Cluster
from danlu.core.errors import ConfigError, UnknownNameError
from danlu.sched.policies import danlu_model as dm
from danlu.sched.policies.optimus import NO_GPUS, OptimusPolicy, SplitJob, split_gpus
from danlu.sched.policies.work_estimate import WORK
from danlu.sched.registry import make_policy
from danlu.sched.view import ClusterView, JobRequest, JobStatus

LIMITS = {"init_batch": 128.0, "max_batch": 4096.0, "min_local_bsz": 32.0, "max_local_bsz": 256.0}


@dataclass(frozen=True)
class Curve(SplitJob):
    """A job whose remaining time on ``n`` GPUs is ``work / n ** power`` (convex, falling)."""

    power: float = 1.0

    def seconds(self, gpus: int, gpus_per_node: int) -> float:
        return self.left / gpus**self.power if gpus > 0 else math.inf


ANY_MODEL = dm.JobModel(1, 1, 1, 1, 0.0, 0.0, {}, 0.0, 0.0, 1)
"""A model for the split to see (a job without one gains nothing); ``Curve`` ignores it."""


def curve(least: int, most: int, work: float, power: float) -> SplitJob:
    return Curve(JobStatus(JobRequest("x", 0.0)), least, most, ANY_MODEL, 0, work, power)


@settings(max_examples=40, deadline=None)
@given(
    gpus=st.integers(0, 8),
    shapes=st.lists(
        st.tuples(st.integers(1, 3), st.integers(0, 5), st.floats(10, 1000), st.floats(0.2, 1)),
        min_size=1,
        max_size=3,
    ),
)
def test_the_split_minimises_the_total_remaining_time(
    gpus: int, shapes: list[tuple[int, int, float, float]]
) -> None:
    jobs = [curve(least, least + extra, work, power) for least, extra, work, power in shapes]
    counts = split_gpus(jobs, gpus, 4)
    assert sum(counts) <= gpus
    for job, n in zip(jobs, counts, strict=True):
        assert n == 0 or job.least <= n <= job.most
    # the least GPUs go in submission order while they last
    left = gpus
    for job, n in zip(jobs, counts, strict=True):
        if job.least <= left:
            assert n >= job.least
            left -= job.least
        else:
            assert n == 0

    def total(split: tuple[int, ...]) -> float:
        return sum(j.seconds(n, 4) for j, n in zip(jobs, split, strict=True) if n)

    # among the jobs admitted, no other split of the GPUs left is better
    ranges = [
        range(j.least, j.most + 1) if n else range(1) for j, n in zip(jobs, counts, strict=True)
    ]
    best = min(total(split) for split in itertools.product(*ranges) if sum(split) <= gpus)
    assert total(tuple(counts)) == pytest.approx(best)


def test_a_job_whose_least_does_not_fit_leaves_the_gpus_to_later_ones() -> None:
    jobs = [curve(3, 3, 100.0, 1.0), curve(4, 4, 100.0, 1.0), curve(1, 4, 100.0, 1.0)]
    assert split_gpus(jobs, 6, 4) == [3, 0, 3]


# -- the policy --------------------------------------------------------------------------


def status(job_id: str, gpus: int = 1, submit: float = 0.0, **kw: Any) -> JobStatus:
    keys = ("preemptible", "max_gpus", "batch_size")
    req_kw = {k: kw.pop(k) for k in list(kw) if k in keys}
    request = JobRequest(id=job_id, submit_time=submit, gpus=gpus, seq=int(submit), **req_kw)
    return JobStatus(request=request, **kw)


def measured(replicas: int, local: int, step: float, progress: float) -> dict[str, float]:
    return {
        **LIMITS,
        "adaptive": 1.0,
        "progress": progress,
        "step_time": step,
        "sync_time": 0.02 if replicas > 1 else 0.0,
        "local_bsz": float(local),
        "accum_steps": 0.0,
        "batch_size": float(local * replicas),
        "num_replicas": float(replicas),
        "num_nodes": 1.0,
        "grad_sqr": 1.0,
        "grad_var": 40.0,
    }


def running(job_id: str, gpus: int, work: float, progress: float, submit: float = 0.0) -> JobStatus:
    """A job measured on ``gpus`` GPUs of node 0 at batch 256, ``work`` estimated."""
    alloc = Allocation.whole_gpus([(0, g) for g in range(gpus)])
    seen = measured(gpus, 256 // gpus, step=0.1 + 0.002 * 256 / gpus, progress=progress)
    return status(
        job_id,
        gpus=gpus,
        submit=submit,
        batch_size=256,
        observed=seen,
        allocation=alloc,
        marks={WORK: work},
    )


def test_a_new_job_starts_on_one_gpu_at_its_own_batch() -> None:
    cluster = Cluster.homogeneous(2, 4)
    new = status("new", gpus=4, observed={**LIMITS, "adaptive": 1.0})
    plan = OptimusPolicy().schedule(ClusterView(time=60.0, cluster=cluster, pending=(new,)))
    (start,) = plan.starts
    assert start.allocation.num_gpus == 1
    assert start.batch_size is None and not start.adaptive  # it keeps the batch it was tuned at


def test_a_measured_job_alone_grows_to_its_batch_s_limit() -> None:
    # batch 256 over micro-batches of at least 32: at most 8 GPUs, though 16 are idle
    cluster = Cluster.homogeneous(4, 4)
    job = running("a", 1, work=1e5, progress=0.1)
    plan = OptimusPolicy().schedule(ClusterView(time=600.0, cluster=cluster, running=(job,)))
    (resize,) = plan.resizes
    assert resize.allocation.num_gpus == 8
    assert resize.batch_size is None
    assert len(resize.allocation.nodes) == 2  # the nodes with the most idle GPUs first
    assert plan.marks["a"][dm.MAXR] == 1.0  # its measurement is remembered


def test_more_remaining_work_gets_more_gpus() -> None:
    cluster = Cluster.homogeneous(2, 4)
    short = running("short", 1, work=1e4, progress=0.5)
    long = running("long", 1, work=1e6, progress=0.1, submit=1.0)
    long = JobStatus(
        request=long.request,
        allocation=Allocation.whole_gpus([(1, 0)]),
        observed=long.observed,
        marks=long.marks,
    )
    view = ClusterView(time=600.0, cluster=cluster, running=(short, long))
    plan = OptimusPolicy().schedule(view)
    sizes = {r.job_id: r.allocation.num_gpus for r in plan.resizes}
    assert sizes.get("long", 1) > sizes.get("short", 1)
    assert sum(sizes.get(j, 1) for j in ("short", "long")) <= 8


def test_an_unchanged_count_keeps_its_gpus() -> None:
    cluster = Cluster.homogeneous(1, 4)
    a = running("a", 2, work=1e5, progress=0.1)
    b = status("b", gpus=2, submit=5.0, allocation=Allocation.whole_gpus([(0, 2), (0, 3)]))
    plan = OptimusPolicy().schedule(ClusterView(time=600.0, cluster=cluster, running=(a, b)))
    # b is rigid (no batch limits): its 2 GPUs; a keeps the other 2 in place
    assert not plan.resizes and not plan.preempts and not plan.starts


def test_a_rigid_job_gets_its_request_or_nothing() -> None:
    cluster = Cluster.homogeneous(1, 4)
    first = status("first", gpus=3, submit=0.0)
    wide = status("wide", gpus=4, submit=1.0)
    small = status("small", gpus=1, submit=2.0)
    view = ClusterView(time=60.0, cluster=cluster, pending=(first, wide, small))
    plan = OptimusPolicy().schedule(view)
    assert {s.job_id: s.allocation.num_gpus for s in plan.starts} == {"first": 3, "small": 1}
    assert plan.waiting["wide"] == NO_GPUS


def test_a_running_job_left_without_gpus_is_preempted() -> None:
    cluster = Cluster.homogeneous(1, 4)
    rigid = status("early", gpus=4, submit=0.0)
    late = running("late", 1, work=1e5, progress=0.1, submit=10.0)
    plan = OptimusPolicy().schedule(
        ClusterView(time=600.0, cluster=cluster, running=(late,), pending=(rigid,))
    )
    assert [p.job_id for p in plan.preempts] == ["late"]
    assert plan.preempts[0].reason == NO_GPUS
    (start,) = plan.starts  # on the GPUs the preemption frees, as the pollux baseline does
    assert start.job_id == "early" and start.allocation.num_gpus == 4


def test_the_plan_is_deterministic() -> None:
    cluster = Cluster.homogeneous(2, 4)
    jobs = tuple(running(f"j{i}", 1, work=1e4 * (i + 1), progress=0.2, submit=i) for i in range(3))
    jobs = tuple(
        JobStatus(
            request=j.request,
            allocation=Allocation.whole_gpus([(i // 2, i % 2)]),
            observed=j.observed,
            marks=j.marks,
        )
        for i, j in enumerate(jobs)
    )
    view = ClusterView(time=600.0, cluster=cluster, running=jobs)
    assert OptimusPolicy().schedule(view) == OptimusPolicy().schedule(view)


def test_bad_options_are_refused() -> None:
    with pytest.raises(ConfigError, match="restart_cost"):
        make_policy("optimus", restart_cost=-1)
    with pytest.raises(UnknownNameError):
        OptimusPolicy(placement="nowhere")


def test_a_running_job_without_a_model_keeps_its_gpus() -> None:
    # an elastic job started elsewhere on 4 GPUs that has not reported a step yet
    cluster = Cluster.homogeneous(2, 4)
    alloc = Allocation.whole_gpus([(0, g) for g in range(4)])
    job = status("quiet", gpus=1, observed={**LIMITS, "adaptive": 1.0}, allocation=alloc)
    plan = OptimusPolicy().schedule(ClusterView(time=60.0, cluster=cluster, running=(job,)))
    assert not plan.resizes and not plan.preempts


TIGHT = {"init_batch": 64.0, "max_batch": 64.0, "min_local_bsz": 32.0, "max_local_bsz": 32.0}
"""Batch limits under which a batch of 64 fits at most 2 GPUs (micro-batches of 32)."""
TIGHT_MARKS = {"danlu.c:16": 0.1, "danlu.c:32": 0.2}
"""Compute measured in an earlier run: enough for a model."""


def test_a_job_whose_minimum_its_batch_cannot_fill_waits() -> None:
    """An elastic job of 4..8 GPUs at batch 64 with micro-batches of at least 32 can use 2
    GPUs at most: below its minimum, so it waits and says why (as pollux and danlu leave
    it), though 8 GPUs are idle; a job behind it still starts."""
    cluster = Cluster.homogeneous(1, 8)
    job = status("e", gpus=4, max_gpus=8, batch_size=64, observed=TIGHT, marks=TIGHT_MARKS)
    other = status("r", gpus=2, submit=1.0)
    plan = OptimusPolicy().schedule(ClusterView(time=0.0, cluster=cluster, pending=(job, other)))
    assert [(s.job_id, s.allocation.num_gpus) for s in plan.starts] == [("r", 2)]
    reason = plan.reason("e") or ""
    assert "min_local_bsz" in reason and "4 GPUs" in reason


def test_a_running_job_whose_minimum_its_batch_cannot_fill_is_not_shrunk_below_it() -> None:
    """The same job already running on 4 GPUs keeps them: a resize to the 2 GPUs its batch
    allows would take it below its minimum."""
    cluster = Cluster.homogeneous(1, 8)
    alloc = Allocation.whole_gpus([(0, g) for g in range(4)])
    job = status(
        "e",
        gpus=4,
        max_gpus=8,
        batch_size=64,
        observed=TIGHT,
        marks=TIGHT_MARKS,
        allocation=alloc,
        last_start=0.0,
    )
    plan = OptimusPolicy().schedule(ClusterView(time=100.0, cluster=cluster, running=(job,)))
    assert not plan.resizes and not plan.preempts
