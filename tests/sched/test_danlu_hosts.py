"""The sharing rule's caches: where each family's running jobs sit (kept across rounds), the
free map's shortlist of GPUs with compute left, and the danlu policy's plans with its caches
against a fresh policy every round."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np

from danlu.core.cluster import Allocation, Cluster, GpuShare
from danlu.core.spec import MODEL_FAMILIES
from danlu.sched.placement.gang import FreeMap
from danlu.sched.policies.danlu import DanluPolicy
from danlu.sched.policies.danlu_hosts import FamilyHosts
from danlu.sched.view import ClusterView, JobRequest, JobStatus, Plan

GiB = 1 << 30


def share(job_id: str, family: str, node: int, gpu: int, gib: int = 10) -> JobStatus:
    request = JobRequest(id=job_id, submit_time=0.0, gpus=1, gpu_memory=gib * GiB, family=family)
    alloc = Allocation((GpuShare(node, gpu, 100, gib * GiB),))
    return JobStatus(request=request, allocation=alloc, last_start=0.0)


def fresh_masks(
    cluster: Cluster, running: list[JobStatus], **kwargs: object
) -> dict[str, list[bool]]:
    hosts = FamilyHosts()
    hosts.update(cluster, running)
    return {f: m.tolist() for f, m in hosts.masks(**kwargs).items()}  # type: ignore[arg-type]


def test_counts_kept_across_rounds_match_a_fresh_count() -> None:
    cluster = Cluster.homogeneous(3, 4)
    rng = random.Random(3)
    kept = FamilyHosts()
    running: list[JobStatus] = []
    families = ["", *MODEL_FAMILIES[:3]]
    for round_ in range(30):
        # some jobs finish, some move (a new status object for the same job), some arrive
        running = [j for j in running if rng.random() > 0.2]
        moved = {j.id for j in running if rng.random() < 0.1}
        running = [
            replace(j, allocation=Allocation((GpuShare(rng.randrange(3), rng.randrange(4)),)))
            if j.id in moved
            else j
            for j in running
        ]
        running += [
            share(f"j{round_}-{i}", rng.choice(families), rng.randrange(3), rng.randrange(4))
            for i in range(rng.randrange(4))
        ]
        kept.update(cluster, running)
        want = fresh_masks(cluster, running, leaving=(), placed=())
        got = {f: m.tolist() for f, m in kept.masks((), ()).items()}
        assert got == want, round_


def test_masks_leave_out_leaving_jobs_and_add_placed_ones() -> None:
    cluster = Cluster.homogeneous(1, 4)
    a, b = share("a", "lstm", 0, 0), share("b", "lstm", 0, 1)
    hosts = FamilyHosts()
    hosts.update(cluster, [a, b])
    placed = [("gan", Allocation((GpuShare(0, 3, 100, GiB),)))]
    masks = hosts.masks([a], placed)
    assert masks["lstm"].tolist() == [False, True, False, False]
    assert masks["gan"].tolist() == [False, False, False, True]
    # nothing of the round's plan stays in the counts
    after = hosts.masks((), ())
    assert set(after) == {"lstm"}
    assert after["lstm"].tolist() == [True, True, False, False]
    # a family whose last job leaves is no key
    assert "lstm" not in hosts.masks([a, b], ())


def test_another_cluster_starts_the_counts_afresh() -> None:
    hosts = FamilyHosts()
    hosts.update(Cluster.homogeneous(1, 2), [share("a", "lstm", 0, 1)])
    bigger = Cluster.homogeneous(2, 2)
    hosts.update(bigger, [share("b", "gan", 1, 0)])
    masks = hosts.masks((), ())
    assert set(masks) == {"gan"}
    assert masks["gan"].tolist() == [False, False, True, False]


def test_a_release_opens_gpus_to_shares_again() -> None:
    cluster = Cluster.homogeneous(1, 2)
    free = FreeMap(ClusterView(0.0, cluster), "best-fit")
    memory = int(cluster.arrays.gpu_memory[0])
    whole = [Allocation((GpuShare(0, g, 1000, memory),)) for g in (0, 1)]
    for alloc in whole:
        free.take(alloc)
    request = JobRequest(id="s", submit_time=0.0, gpus=1, gpu_milli=300)
    assert free.place(request) is None  # full: the shortlist of GPUs with compute is empty
    free.release(whole[1])
    alloc = free.place(request)
    assert alloc is not None and alloc.shares[0].gpu == 1


def _random_round(
    rng: random.Random, view: ClusterView, plan: Plan, seq: int
) -> tuple[ClusterView, int]:
    """``view`` after ``plan``: started jobs run, preempted ones wait; a few finish and a
    few arrive. Unchanged jobs keep their status objects."""
    started = {s.job_id: s.allocation for s in plan.starts}
    resized = {r.job_id: r.allocation for r in plan.resizes}
    stopped = {p.job_id for p in plan.preempts}
    done = {j.id for j in view.running if rng.random() < 0.1}
    running = [
        replace(j, allocation=resized[j.id], last_start=view.time) if j.id in resized else j
        for j in view.running
        if j.id not in stopped and j.id not in done
    ]
    running += [
        replace(j, allocation=started[j.id], last_start=view.time)
        for j in view.pending
        if j.id in started
    ]
    pending = [j for j in view.pending if j.id not in started]
    pending += [replace(j, allocation=Allocation()) for j in view.running if j.id in stopped]
    for _ in range(rng.randrange(6)):
        pending.append(JobStatus(_request(rng, seq, view.time)))
        seq += 1
    marks = plan.marks
    running = [
        replace(j, marks={**j.marks, **marks[j.id]}) if j.id in marks else j for j in running
    ]
    pending = [
        replace(j, marks={**j.marks, **marks[j.id]}) if j.id in marks else j for j in pending
    ]
    pending.sort(key=lambda j: j.request.seq)
    later = ClusterView(view.time + 60.0, view.cluster, tuple(running), tuple(pending))
    return later, seq


def _request(rng: random.Random, seq: int, now: float) -> JobRequest:
    if rng.random() < 0.6:  # part of one GPU, by memory
        return JobRequest(
            id=f"s{seq}",
            submit_time=now,
            gpus=1,
            gpu_memory=rng.randrange(4, 40) * GiB,
            seq=seq,
            family=rng.choice(["", *MODEL_FAMILIES]),
            expected_duration=rng.uniform(100, 5000),
        )
    return JobRequest(
        id=f"w{seq}",
        submit_time=now,
        gpus=rng.choice([1, 2, 4]),
        seq=seq,
        expected_duration=rng.uniform(100, 5000),
    )


def test_a_policy_with_its_caches_plans_as_a_fresh_one_every_round() -> None:
    rng = random.Random(7)
    cluster = Cluster.homogeneous(4, 4)
    seq = 0
    pending = []
    for _ in range(60):
        pending.append(JobStatus(_request(rng, seq, 0.0)))
        seq += 1
    view = ClusterView(60.0, cluster, (), tuple(pending))
    kept = DanluPolicy()
    beside = 0
    for _ in range(25):
        plan = kept.schedule(view)
        assert plan == DanluPolicy().schedule(view)
        beside += sum(1 for s in plan.starts if s.reason.startswith("sharing a GPU with"))
        view, seq = _random_round(rng, view, plan, seq)
    assert beside >= 5  # the rounds did place shares beside other jobs
    assert np.all(view.usage()[0] <= 1000)
