"""danlu.sched: odd but valid inputs to the quota layer, the policies and their
options."""

from __future__ import annotations

import pytest

from danlu.core.cluster import GPU_TYPES, Allocation, Cluster, GpuShare, Node, gpu_type
from danlu.core.units import GiB
from danlu.sched.placement.drain import DrainingFree
from danlu.sched.placement.gang import FreeMap
from danlu.sched.quota import Quota, QuotaPolicy, Quotas
from danlu.sched.registry import make_policy
from danlu.sched.view import ClusterView, JobRequest, JobStatus


def _job(job_id: str, seq: int, gpus: int, **kw: object) -> JobStatus:
    request = JobRequest(job_id, float(seq), gpus=gpus, seq=seq, **kw)  # type: ignore[arg-type]
    return JobStatus(request)


def test_a_plan_past_a_quota_never_starts_an_elastic_job_below_its_least() -> None:
    """The quota cuts the elastic job's range 4..8 to 4..4 (what the quota leaves); the
    queue starts it and a 1-GPU job of the same project, 5 GPUs past the quota of 4, so the
    policy is asked again within shares of it. The cut copy read as rigid there, and was
    offered 1..3 GPUs: it started on 1 GPU although it asked for at least 4."""
    cluster = Cluster.homogeneous(1, 8)
    elastic = _job("elastic", 0, 4, max_gpus=8, project="p")
    small = _job("small", 1, 1, project="p")
    quotas = Quotas({"p": Quota("project 'p'", 4.0)})
    policy = QuotaPolicy(make_policy("fifo", backfill=True), quotas)
    plan = policy.schedule(ClusterView(0.0, cluster, pending=(elastic, small)))
    started = {s.job_id: s.allocation.num_gpus for s in plan.starts}
    assert started == {"elastic": 4}
    assert "quota" in (plan.reason("small") or "")


_LIMITS = {"init_batch": 128.0, "max_batch": 4096.0, "min_local_bsz": 32.0, "max_local_bsz": 256.0}


def _measured(replicas: int, local: int) -> dict[str, float]:
    """What a running adaptive job reports at ``replicas`` GPUs of ``local`` samples each."""
    return {
        **_LIMITS,
        "adaptive": 1.0,
        "progress": 0.2,
        "step_time": 0.5,
        "sync_time": 0.02,
        "local_bsz": float(local),
        "accum_steps": 0.0,
        "batch_size": float(local * replicas),
        "num_replicas": float(replicas),
        "num_nodes": 1.0,
        "grad_sqr": 1.0,
        "grad_var": 40.0,
    }


@pytest.mark.parametrize("fairness", [-1.0, -1000.0, -1e308, 1e-300, -1e-300])
def test_pollux_starts_waiting_jobs_on_idle_gpus_at_any_fairness(fairness: float) -> None:
    """Pollux's power mean of speed-ups, ``mean(s**p) ** (1/p)``: below p = -100 the
    speed-up of a job left out (1e-3) raised to p overflowed, every candidate that left a
    job out was worth 0, and near p = 0 ``s**p`` rounded to 1 and every candidate was worth
    1: either way the search kept the current allocation, and three waiting jobs stayed
    waiting beside 6 idle GPUs."""
    cluster = Cluster.homogeneous(2, 4)
    held = Allocation.whole_gpus([(0, 0), (0, 1)])
    running = JobStatus(
        JobRequest("run", 0.0, gpus=2, seq=0), held, last_start=0.0, observed=_measured(2, 64)
    )
    waiting = tuple(
        JobStatus(JobRequest(f"w{i}", 1.0, gpus=1, seq=i + 1), observed=dict(_LIMITS))
        for i in range(3)
    )
    policy = make_policy("pollux", fairness=fairness)
    plan = policy.schedule(ClusterView(1000.0, cluster, running=(running,), pending=waiting))
    assert sorted(s.job_id for s in plan.starts) == ["w0", "w1", "w2"]


@pytest.mark.parametrize("policy", ["priority", "tiresias", "value-density"])
@pytest.mark.parametrize("queued", [4, 16])
def test_a_ranked_round_starts_a_job_on_gpus_only_it_can_use(policy: str, queued: int) -> None:
    """The A100s are held by higher-ranked running jobs and ``queued`` higher-ranked jobs
    wait for them; the V100s are idle but for a low-ranked running job. The jobs admitted
    but left unplaced (no A100 is free) give their capacity back only for the admission
    tries there are (4): past them (16 queued), they held it, and the low-ranked waiting
    job was "outranked" beside three idle V100s it alone could use (with 4 queued, it
    started)."""
    a100, v100 = gpu_type("a100"), gpu_type("v100")
    cluster = Cluster((Node("a", 4, a100), Node("v", 4, v100)))
    on_a100 = frozenset({a100.name})
    running = [
        JobStatus(
            JobRequest(f"a{i}", float(i), priority=5, gpu_types=on_a100, seq=i),
            Allocation.whole_gpus([(0, i)]),
            last_start=10.0,
        )
        for i in range(4)
    ]
    low = JobRequest("low-running", 5.0, priority=0, seq=5)
    running.append(
        JobStatus(low, Allocation.whole_gpus([(1, 0)]), last_start=10.0, attained_service=1e6)
    )
    pending = [
        JobStatus(JobRequest(f"w{i}", 20.0 + i, priority=5, gpu_types=on_a100, seq=10 + i))
        for i in range(queued)
    ]
    pending.append(JobStatus(JobRequest("low", 100.0, priority=0, seq=100)))
    options = {"thresholds": (1000.0,)} if policy == "tiresias" else {}
    view = ClusterView(200.0, cluster, running=tuple(running), pending=tuple(pending))
    plan = make_policy(policy, **options).schedule(view)
    assert [s.job_id for s in plan.starts] == ["low"]
    assert {(share.node, share.gpu) for share in plan.starts[0].allocation.shares} <= {
        (1, 1),
        (1, 2),
        (1, 3),
    }
    assert plan.preempts == ()
    assert plan.reason("low") is None
    assert all(plan.reason(job.id) for job in pending[:-1])


@pytest.mark.parametrize("policy", ["priority", "value-density"])
def test_a_share_sized_by_memory_is_admitted_for_its_part_of_a_gpu(policy: str) -> None:
    """A share of 20 GiB of an 80 GiB GPU takes 250 milli-GPU where it is placed; the
    ranked round's admission charged it its ``gpu_milli`` of 1000, a whole GPU, so it
    waited "outranked: needs 1 GPU" while a share of lower priority held the 400 milli-GPU
    whose preemption gives it room."""
    cluster = Cluster((Node("a", 1, GPU_TYPES["A100-80GB"]),))
    above = JobRequest("above", 0.0, 1, priority=10, seq=0, gpu_milli=500)
    below = JobRequest("below", 0.0, 1, priority=0, seq=1, gpu_milli=400)
    running = (
        JobStatus(above, Allocation((GpuShare(0, 0, 500, 40 * GiB),)), last_start=0.0),
        JobStatus(below, Allocation((GpuShare(0, 0, 400, 32 * GiB),)), last_start=0.0),
    )
    share = JobStatus(JobRequest("share", 0.0, 1, priority=1, seq=2, gpu_memory=20 * GiB))
    view = ClusterView(100.0, cluster, running=running, pending=(share,))
    plan = make_policy(policy).schedule(view)
    assert [(s.job_id, s.allocation.gpu_milli) for s in plan.starts] == [("share", 250)]
    assert [p.job_id for p in plan.preempts] == ["below"]


def test_an_outranked_share_sized_by_memory_says_its_part_of_the_largest_gpu() -> None:
    """Outranked, the share says the least part of a GPU it needs (on the largest GPU of
    its types), not 1 GPU."""
    cluster = Cluster((Node("a", 1, GPU_TYPES["A100-80GB"]),))
    above = JobRequest("above", 0.0, 1, priority=10, seq=0, gpu_milli=900)
    below = JobRequest("below", 0.0, 1, priority=0, seq=1, gpu_milli=100)
    running = (
        JobStatus(above, Allocation((GpuShare(0, 0, 900, 72 * GiB),)), last_start=0.0),
        JobStatus(below, Allocation((GpuShare(0, 0, 100, 8 * GiB),)), last_start=0.0),
    )
    share = JobStatus(JobRequest("share", 0.0, 1, priority=1, seq=2, gpu_memory=20 * GiB))
    plan = make_policy("priority").schedule(
        ClusterView(100.0, cluster, running=running, pending=(share,))
    )
    assert plan.starts == () and plan.preempts == ()
    assert plan.reason("share") == (
        "outranked: needs 0.25 GPU of capacity held by higher-ranked jobs"
    )


@pytest.mark.parametrize("users", [False, True])
def test_fair_share_counts_a_memory_share_it_starts_as_its_part_of_a_gpu(users: bool) -> None:
    """A share of 8 GiB of an 80 GiB GPU takes 100 milli-GPU. Fair share counted its start
    as the 1000 its request reads as, so project b, holding as much as a by that count,
    took the next turn by its older job as well, and ended the round with two GPUs to a's
    tenth of one."""
    cluster = Cluster((Node("n", 3, GPU_TYPES["A100-80GB"]),))

    def job(job_id: str, seq: int, project: str, **kw: object) -> JobStatus:
        return _job(job_id, seq, 1, project=project, user=job_id, **kw)

    pending = (
        job("a-share", 0, "a", gpu_memory=8 * GiB),
        job("b1", 1, "b"),
        job("b2", 2, "b"),
        job("a2", 3, "a"),
    )
    plan = make_policy("fair-share", users=users).schedule(
        ClusterView(0.0, cluster, pending=pending)
    )
    assert [(s.job_id, s.allocation.gpu_milli) for s in plan.starts] == [
        ("a-share", 100),
        ("b1", 1000),
        ("a2", 1000),
    ]
    assert plan.reason("b2") == "needs 1 GPU, 0 free"


def test_holding_a_placement_on_draining_gpus_takes_what_placing_it_took() -> None:
    """``DrainingFree.hold`` (how a ranked round carries its starts over to a fresh map
    before it starts jobs on the GPUs left idle) takes a placement made on the GPUs being
    drained as placing it did: all of it once drained, the part free now at once."""
    cluster = Cluster.homogeneous(1, 2)
    draining = JobStatus(
        JobRequest("draining", 0.0, 1, seq=0, gpu_milli=500),
        Allocation((GpuShare(0, 0, 500, 0),)),
        last_start=0.0,
    )
    busy = JobStatus(JobRequest("busy", 0.0, 1, seq=1), Allocation.whole_gpus([(0, 1)]))
    view = ClusterView(10.0, cluster, running=(draining, busy), draining=frozenset({"draining"}))
    placed = DrainingFree(FreeMap(view), view)
    alloc = placed.place(JobRequest("wide", 0.0, 1, seq=2))
    assert alloc is not None and [(s.node, s.gpu) for s in alloc.shares] == [(0, 0)]
    held = DrainingFree(FreeMap(view), view)
    held.hold(alloc)
    assert held.soon is not None and placed.soon is not None
    assert held.now.free_milli.tolist() == placed.now.free_milli.tolist() == [0, 0]
    assert held.soon.free_milli.tolist() == placed.soon.free_milli.tolist() == [0, 0]


def test_fair_share_reclaims_for_a_memory_share_within_its_projects_share() -> None:
    """Project b holds the one GPU with ten shares of 8 GiB (100 milli-GPU each); project
    a waits with one more. a's fair share is the 100 milli-GPU its share takes, but the
    reclaim counted the share as a whole GPU, past a's share, and never made room for it."""
    cluster = Cluster((Node("n", 1, GPU_TYPES["A100-80GB"]),))
    running = tuple(
        JobStatus(
            JobRequest(f"b{i}", float(i), 1, seq=i, project="b", gpu_memory=8 * GiB),
            Allocation((GpuShare(0, 0, 100, 8 * GiB),)),
            last_start=float(i),
        )
        for i in range(10)
    )
    share = JobStatus(JobRequest("a", 50.0, 1, seq=50, project="a", gpu_memory=8 * GiB))
    policy = make_policy("fair-share", reclaim=True, min_run=0.0)
    plan = policy.schedule(ClusterView(100.0, cluster, running=running, pending=(share,)))
    assert [(s.job_id, s.allocation.gpu_milli) for s in plan.starts] == [("a", 100)]
    assert [p.job_id for p in plan.preempts] == ["b9"]  # the youngest
