"""A waiting job limited to some GPUs (by type or memory) preempts a lower-ranked job on those
GPUs under the ranked policies.

The rank order alone chose the victims across the whole cluster: with two preemptible
priority-0 jobs, the older one on the only H100, a priority-10 job limited to the H100 had the
newer job (on a V100) chosen as its victim, could not be placed on the V100, and waited for
ever while the priority-0 job kept the H100. It now preempts a lower-ranked job on a GPU it
can use, the lowest-ranked first, and only when that lets it start.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from danlu.core.cluster import GPU_TYPES, Allocation, Cluster, GpuShare, Node
from danlu.core.units import GiB
from danlu.sched.placement.gang import FreeMap
from danlu.sched.policies.priority import PriorityPolicy
from danlu.sched.policies.tiresias import TiresiasPolicy
from danlu.sched.policies.value_density import ValueDensityPolicy
from danlu.sched.view import ClusterView, JobRequest, JobStatus, Plan

H100, V100, A100 = GPU_TYPES["H100"], GPU_TYPES["V100-32GB"], GPU_TYPES["A100-80GB"]
A100_40 = GPU_TYPES["A100-40GB"]

POLICIES: dict[str, Callable[[], object]] = {
    "priority": PriorityPolicy,
    "value-density": ValueDensityPolicy,
}


def _running(
    job_id: str, seq: int, gpus: list[tuple[int, int]], priority: int = 0, **asked: object
) -> JobStatus:
    request = JobRequest(
        job_id,
        float(seq),
        len(gpus),
        priority=priority,
        seq=seq,
        expected_duration=3600.0,
        **asked,  # type: ignore[arg-type]
    )
    return JobStatus(request, Allocation.whole_gpus(gpus), last_start=float(seq))


def _high(seq: int = 10, priority: int = 10, **asked: object) -> JobStatus:
    request = JobRequest(
        "high",
        float(seq),
        priority=priority,
        seq=seq,
        expected_duration=3600.0,
        **asked,  # type: ignore[arg-type]
    )
    return JobStatus(request)


def _plan(policy: str, cluster: Cluster, running: list[JobStatus], pending: JobStatus) -> Plan:
    view = ClusterView(100.0, cluster, running=tuple(running), pending=(pending,))
    return POLICIES[policy]().schedule(view)  # type: ignore[attr-defined, no-any-return]


def _gpus_of(plan: Plan, job_id: str) -> list[tuple[int, int]]:
    return [
        (share.node, share.gpu)
        for start in plan.starts
        if start.job_id == job_id
        for share in start.allocation.shares
    ]


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_a_job_limited_to_a_type_preempts_the_lower_job_on_that_type(policy: str) -> None:
    # the reviewer's server repro: the older low job holds the only H100, the newer (which
    # the rank order makes the victim) holds the V100
    cluster = Cluster((Node("h", 1, H100), Node("v", 1, V100)))
    running = [_running("old", 0, [(0, 0)]), _running("new", 1, [(1, 0)])]
    plan = _plan(policy, cluster, running, _high(gpu_types=frozenset({"H100"})))
    assert [p.job_id for p in plan.preempts] == ["old"]
    assert _gpus_of(plan, "high") == [(0, 0)]


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_the_reversed_inventory_still_preempts_the_job_on_the_type(policy: str) -> None:
    cluster = Cluster((Node("v", 1, V100), Node("h", 1, H100)))
    running = [_running("old", 0, [(0, 0)]), _running("new", 1, [(1, 0)])]
    plan = _plan(policy, cluster, running, _high(gpu_types=frozenset({"H100"})))
    assert [p.job_id for p in plan.preempts] == ["new"]
    assert _gpus_of(plan, "high") == [(1, 0)]


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_the_lowest_ranked_job_on_the_type_is_the_victim(policy: str) -> None:
    cluster = Cluster((Node("h", 2, H100), Node("v", 1, V100)))
    running = [
        _running("low", 0, [(0, 0)], priority=0),
        _running("mid", 1, [(0, 1)], priority=3),
        _running("newest", 2, [(1, 0)], priority=0),
    ]
    plan = _plan(policy, cluster, running, _high(gpu_types=frozenset({"H100"})))
    assert [p.job_id for p in plan.preempts] == ["low"]
    assert _gpus_of(plan, "high") == [(0, 0)]


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_a_job_ranked_above_it_is_never_the_victim(policy: str) -> None:
    cluster = Cluster((Node("h", 1, H100), Node("v", 1, V100)))
    running = [_running("above", 0, [(0, 0)], priority=20), _running("low", 1, [(1, 0)])]
    plan = _plan(policy, cluster, running, _high(gpu_types=frozenset({"H100"})))
    assert plan.preempts == ()
    assert plan.starts == ()
    assert plan.reason("high") is not None


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_no_preemption_that_does_not_let_it_start(policy: str) -> None:
    # two H100s: one held by a job that may not be preempted, so freeing the other is not
    # enough for a job of 2 H100s
    cluster = Cluster((Node("h", 2, H100), Node("v", 2, V100)))
    running = [
        _running("fixed", 0, [(0, 0)], preemptible=False),
        _running("low", 1, [(0, 1)]),
        _running("newer", 2, [(1, 0), (1, 1)]),
    ]
    plan = _plan(policy, cluster, running, _high(gpus=2, gpu_types=frozenset({"H100"})))
    assert plan.preempts == ()
    assert plan.starts == ()


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_a_share_sized_by_memory_preempts_on_a_gpu_with_that_memory(policy: str) -> None:
    cluster = Cluster((Node("a", 1, A100), Node("v", 1, V100)))
    running = [_running("old", 0, [(0, 0)]), _running("new", 1, [(1, 0)])]
    plan = _plan(policy, cluster, running, _high(gpu_memory=60 * GiB))
    assert [p.job_id for p in plan.preempts] == ["old"]
    assert _gpus_of(plan, "high") == [(0, 0)]


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_a_gang_with_a_memory_size_preempts_only_what_it_needs(policy: str) -> None:
    # 2 GPUs of 80 GiB: one is free, the other held by the lowest-ranked job of those on
    # 80 GiB GPUs; the job on the 40 GiB GPUs ranks lowest of all but cannot make room
    cluster = Cluster((Node("a", 3, A100), Node("s", 2, A100_40)))
    running = [
        _running("mid", 1, [(0, 0)], priority=2),
        _running("low", 2, [(0, 1)], priority=1),
        _running("lowest", 3, [(1, 0), (1, 1)], priority=0),
    ]
    plan = _plan(policy, cluster, running, _high(gpus=2, gpu_memory=80 * GiB))
    assert [p.job_id for p in plan.preempts] == ["low"]
    assert sorted(_gpus_of(plan, "high")) == [(0, 1), (0, 2)]


def test_tiresias_places_a_typed_job_it_ranks_first_on_its_type() -> None:
    # tiresias ranks by attained service: the waiting job (none yet) ranks above both
    cluster = Cluster((Node("h", 1, H100), Node("v", 1, V100)))
    running = [
        JobStatus(
            JobRequest("old", 0.0, seq=0),
            Allocation((GpuShare(0, 0, 1000, 0),)),
            attained_service=9000.0,
            last_start=0.0,
        ),
        JobStatus(
            JobRequest("new", 1.0, seq=1),
            Allocation((GpuShare(1, 0, 1000, 0),)),
            attained_service=9500.0,
            last_start=1.0,
        ),
    ]
    pending = JobStatus(JobRequest("high", 5.0, seq=2, gpu_types=frozenset({"H100"})))
    view = ClusterView(10_000.0, cluster, running=tuple(running), pending=(pending,))
    plan = TiresiasPolicy(thresholds=(3600.0,)).schedule(view)
    assert [p.job_id for p in plan.preempts] == ["old"]
    assert _gpus_of(plan, "high") == [(0, 0)]


_KINDS = (H100, V100, A100, A100_40)


def _random_view(seed: int) -> ClusterView:
    """A small cluster of mixed GPUs, full of preemptible (mostly) jobs of mixed priorities,
    with jobs waiting that name GPU types or memory sizes."""
    rng = random.Random(seed)
    nodes = tuple(
        Node(f"n{i}", rng.choice([1, 2, 4]), rng.choice(_KINDS)) for i in range(rng.randint(2, 5))
    )
    cluster = Cluster(nodes)
    free = FreeMap(ClusterView(0.0, cluster), "first-fit")
    names = sorted({kind.name for kind in _KINDS})

    def request(job_id: str, seq: int) -> JobRequest:
        types = (
            frozenset(rng.sample(names, rng.randint(1, 2))) if rng.random() < 0.5 else frozenset()
        )
        memory = rng.choice([0, 0, 40 * GiB, 80 * GiB])
        return JobRequest(
            job_id,
            float(seq),
            gpus=rng.choice([1, 1, 2, 4]),
            priority=rng.choice([0, 0, 5, 10]),
            gpu_types=types,
            gpu_memory=memory,
            seq=seq,
            expected_duration=rng.uniform(600.0, 9000.0),
            preemptible=rng.random() < 0.85,
        )

    running: list[JobStatus] = []
    for seq in range(12):
        req = request(f"r{seq}", seq)
        alloc = free.place(req)
        if alloc is not None:
            running.append(JobStatus(req, alloc, last_start=float(seq)))
    pending = tuple(JobStatus(request(f"p{seq}", seq)) for seq in range(12, 18))
    return ClusterView(100.0, cluster, running=tuple(running), pending=pending)


@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("seed", range(60))
def test_preemptions_on_mixed_gpus_are_for_higher_priority_starts_on_their_gpus(
    policy: str, seed: int
) -> None:
    view = _random_view(seed)
    plan = POLICIES[policy]().schedule(view)  # type: ignore[attr-defined]
    jobs = {job.id: job for job in (*view.running, *view.pending)}
    # the plan applies: the starts fit on what the preempted jobs leave (no GPU given twice)
    after = FreeMap(view, "first-fit")
    for preempt in plan.preempts:
        after.release(jobs[preempt.job_id].allocation)
    for start in plan.starts:
        assert after.can_take(start.allocation), start
        after.take(start.allocation)
    # each preempted job gives a GPU to a start it is preempted for
    for preempt in plan.preempts:
        victim = jobs[preempt.job_id]
        assert victim.request.preemptible
        held = {(share.node, share.gpu) for share in victim.allocation.shares}
        over = [
            jobs[start.job_id]
            for start in plan.starts
            if held & {(share.node, share.gpu) for share in start.allocation.shares}
        ]
        assert over, f"{victim.id} preempted for no start"
        if policy == "priority":  # strictly higher base priority only
            assert any(job.request.priority > victim.request.priority for job in over)
