"""Quotas on a cluster of several GPU sizes: what a start holds depends on the GPU it lands
on (a whole GPU all its memory, a share sized by memory the compute in proportion), so a
waiting job that its quota lets start on some GPUs must not be placed on others, which the
quota refuses every round (the job would never start). The simulator's quota layer and the
server's snapshot both cut such a job's GPU types to those that fit."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import user_and_nodes

from danlu.config import load_settings
from danlu.core.cluster import Cluster, Node, gpu_type
from danlu.core.state import JobState
from danlu.core.units import GiB
from danlu.executors import FakeExecutor, FakeWorld
from danlu.sched.quota import Quota, QuotaPolicy, Quotas, Usage, within_quota_sizes
from danlu.sched.registry import make_policy
from danlu.sched.view import ClusterView, JobRequest, JobStatus
from danlu.server.db import Database
from danlu.server.reconcile import Reconciler
from danlu.server.services import jobs, projects, users
from danlu.server.services.view import build_snapshot

NOW = 1_000_000.0
BIG, SMALL = gpu_type("A100-80GB"), gpu_type("A100-40GB")
NODES = (Node("big", 4, BIG), Node("small", 4, SMALL))
"""The large GPUs come first: a policy that places on the first free GPUs picks them."""
QUOTA = Quota("project 'vision'", gpu_memory=100 * GiB)
"""Two small GPUs (80 GiB) fit; two large ones (160 GiB) do not."""


def _pending(gpus: int, **fields: object) -> JobStatus:
    request = JobRequest("j1", 0.0, gpus=gpus, project="vision", seq=1, **fields)  # type: ignore[arg-type]
    return JobStatus(request)


@pytest.mark.parametrize("policy", ["fifo", "tiresias", "danlu"])
def test_the_quota_layer_starts_the_job_on_the_gpus_its_quota_leaves(policy: str) -> None:
    cluster = Cluster(NODES)
    view = ClusterView(time=0.0, cluster=cluster, pending=(_pending(2),))
    plan = QuotaPolicy(make_policy(policy), Quotas({"vision": QUOTA})).schedule(view)
    assert [s.job_id for s in plan.starts] == ["j1"], plan.waiting
    (start,) = plan.starts
    assert {share.node for share in start.allocation.shares} == {1}  # the small GPUs
    assert sum(share.memory for share in start.allocation.shares) == 80 * GiB


def test_the_cut_keeps_a_job_whose_types_all_fit_or_none_fit_as_it_is() -> None:
    cluster = Cluster(NODES)
    used = {QUOTA.holder: 0}
    fits = within_quota_sizes(_pending(2), (QUOTA,), _used(used), cluster)
    assert fits.request.gpu_types == frozenset({"A100-40GB"})
    roomy = Quota("project 'vision'", gpu_memory=400 * GiB)
    job = _pending(2)
    assert within_quota_sizes(job, (roomy,), _used(used), cluster) is job
    tight = Quota("project 'vision'", gpu_memory=60 * GiB)  # not even two small GPUs
    assert within_quota_sizes(job, (tight,), _used(used), cluster) is job
    gpus_only = Quota("project 'vision'", gpus=2)
    assert within_quota_sizes(job, (gpus_only,), _used(used), cluster) is job
    sized = _pending(1, gpu_memory=30 * GiB)  # asks for its bytes: charged those
    assert within_quota_sizes(sized, (QUOTA,), _used(used), cluster) is sized
    named = _pending(1, gpu_types=frozenset({"a100-80gb"}))  # only large GPUs: left to wait
    assert within_quota_sizes(named, (tight,), _used(used), cluster) is named
    # memory already held counts: 30 GiB in use leaves 70, one small GPU of two fits
    one = _pending(1)
    held = {QUOTA.holder: 30 * GiB}
    assert within_quota_sizes(one, (QUOTA,), _used(held), cluster).request.gpu_types == {
        "A100-40GB"
    }


def _used(memory: dict[str, int]) -> dict[str, Usage]:
    """GPU bytes held by holder, as the quota layer counts them."""
    return {holder: Usage(0.0, held) for holder, held in memory.items()}


def test_the_server_starts_the_job_on_the_small_gpus(db: Database, tmp_path: Path) -> None:
    inventory = Cluster(NODES)
    world = FakeWorld()
    executor = FakeExecutor(inventory, world)
    with db.session() as s:
        alice = user_and_nodes(s, inventory.nodes, NOW)
        projects.create_project(s, "vision", quota_gpu_memory=100 * GiB, now=NOW)
        body = {"name": "two", "command": ["true"], "project": "vision", "resources": {"gpus": 2}}
        job_id = jobs.submit(s, body, alice, now=NOW).id
    with db.session() as s:  # the snapshot hands the policy what the quota layer hands it
        snapshot = build_snapshot(s, NOW)
    (pending,) = snapshot.view.pending
    assert pending.request.gpu_types == frozenset({"A100-40GB"})
    assert _nodes_after_rounds(db, tmp_path, executor, job_id) == ["small", "small"]


SHARE_NODES = (Node("v100", 1, gpu_type("V100")), Node("a100", 1, BIG))
"""A 30 GiB share takes 0.94 of a V100 (32 GiB) and 0.38 of an A100-80GB: the tightest fit,
the V100, is first."""


@pytest.mark.parametrize("policy", ["fifo", "tiresias", "danlu"])
@pytest.mark.parametrize("holder", ["project", "user"])
def test_a_share_sized_by_memory_starts_where_its_compute_fits_the_gpu_quota(
    policy: str, holder: str
) -> None:
    cluster = Cluster(SHARE_NODES)
    request = JobRequest(
        "s1", 0.0, gpus=1, gpu_memory=30 * GiB, project="vision", user="ana", seq=1
    )
    half = Quota(f"{holder} 'x'", gpus=0.5)
    quotas = Quotas({"vision": half}) if holder == "project" else Quotas({}, {"ana": half})
    view = ClusterView(time=0.0, cluster=cluster, pending=(JobStatus(request),))
    plan = QuotaPolicy(make_policy(policy), quotas).schedule(view)
    assert [s.job_id for s in plan.starts] == ["s1"], plan.waiting
    ((share,),) = [s.allocation.shares for s in plan.starts]
    assert share.node == 1 and share.milli == 375


@pytest.mark.parametrize("holder", ["project", "user"])
def test_the_server_starts_a_share_where_its_compute_fits_the_gpu_quota(
    db: Database, tmp_path: Path, holder: str
) -> None:
    inventory = Cluster(SHARE_NODES)
    world = FakeWorld()
    executor = FakeExecutor(inventory, world)
    with db.session() as s:
        alice = user_and_nodes(s, inventory.nodes, NOW)
        quota = 0.5 if holder == "project" else None
        projects.create_project(s, "vision", quota_gpus=quota, now=NOW)
        if holder == "user":
            users.set_quota(s, "alice", 0.5)
        resources = {"gpus": 1, "gpu_memory": "30GiB"}
        body = {"name": "share", "command": ["true"], "project": "vision", "resources": resources}
        job_id = jobs.submit(s, body, alice, now=NOW).id
    assert _nodes_after_rounds(db, tmp_path, executor, job_id) == ["a100"]


def _nodes_after_rounds(
    db: Database, tmp_path: Path, executor: FakeExecutor, job_id: str
) -> list[str]:
    """The nodes of the GPUs job ``job_id`` holds after three rounds of the reconcile loop
    under fifo; it must be running by then."""
    loop = Reconciler(db, executor, load_settings(home=tmp_path), policy=make_policy("fifo"))
    try:
        for turn in range(3):
            assert loop.run_once(now=NOW + turn).errors == []
        with db.read_session() as s:
            job = jobs.get_job(s, job_id)
            assert job.state == JobState.RUNNING, job.pending_reason
            return [str(share["node"]) for share in job.allocation or []]
    finally:
        loop.stop()
