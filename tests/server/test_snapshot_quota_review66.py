"""The server's snapshot keeps a project quota on the project's total.

A running elastic job may grow into what the project's other jobs could give up (the
policy may move GPUs between them), and a quota the cluster cannot pass changes nothing."""

from __future__ import annotations

from typing import Any

from danlu.core.cluster import Allocation, GpuShare
from danlu.core.units import GiB
from danlu.sched.view import ClusterView, Plan, Start
from danlu.server.db import Database
from danlu.server.services import jobs, projects, record, users, view

NOW = 1_000_000.0
H100, L4 = 80 * GiB, 24 * GiB


def _elastic(name: str, project: str) -> dict[str, Any]:
    """A job that runs on 1 to 8 GPUs."""
    return {
        "name": name,
        "command": ["true"],
        "project": project,
        "resources": {"gpus": "1..8"},
        "training": {"global_batch_size": 64},
    }


def _on(node: int, memory: int, *gpus: int) -> Allocation:
    return Allocation(tuple(GpuShare(node, g, 1000, memory) for g in gpus))


def _ranges(snapshot_view: ClusterView) -> dict[str, tuple[int, int]]:
    return {
        j.id: (j.request.gpus, j.request.max_gpus)
        for j in (*snapshot_view.running, *snapshot_view.pending)
    }


def test_an_elastic_job_at_the_quota_may_grow_into_what_another_could_give_up(
    seeded: Database,
) -> None:
    """Project ``q`` holds 3 of its 3.5 GPUs in two elastic jobs (2 and 1): each may grow
    as far as the quota allows while the other shrinks to its least (1 GPU)."""
    with seeded.session() as s:
        projects.create_project(s, "q", quota_gpus=3.5, now=NOW)
        alice = users.get_user(s, "alice")
        e = jobs.submit(s, _elastic("e", "q"), alice, now=NOW).id
        f = jobs.submit(s, _elastic("f", "q"), alice, now=NOW + 1).id
        plan = Plan(starts=(Start(e, _on(0, H100, 0, 1)), Start(f, _on(0, H100, 2))))
        assert len(record.apply_plan(s, plan, NOW).started) == 2
        snap = view.build_snapshot(s, NOW + 1)
    assert _ranges(snap.view) == {e: (1, 2), f: (1, 2)}  # f: its 1 and the 1 e could give


def test_a_quota_at_the_clusters_size_cuts_no_range_and_holds_no_job_back(
    seeded: Database,
) -> None:
    """The seeded cluster has 6 GPUs: project ``big`` holds all of them, which its quota of
    6 allows, so its waiting job is handed to the policy and no range is cut."""
    with seeded.session() as s:
        projects.create_project(s, "big", quota_gpus=6, now=NOW)
        alice = users.get_user(s, "alice")
        e = jobs.submit(s, _elastic("e", "big"), alice, now=NOW).id
        f = jobs.submit(s, _elastic("f", "big"), alice, now=NOW + 1).id
        plan = Plan(starts=(Start(e, _on(0, H100, 0, 1, 2, 3)), Start(f, _on(1, L4, 0, 1))))
        assert len(record.apply_plan(s, plan, NOW).started) == 2
        waiting = jobs.submit(s, _elastic("w", "big"), alice, now=NOW + 2).id
        snap = view.build_snapshot(s, NOW + 3)
    assert snap.withheld == {}
    assert _ranges(snap.view) == {e: (1, 8), f: (1, 8), waiting: (1, 8)}
