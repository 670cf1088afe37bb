"""Scheduling fixes: ``optimus`` and ``danlu`` preempt no running job for a job
they then cannot place (a GPU type the cluster lacks, a closed node, too little GPU
memory), and a job asking for no GPU neither crashes the ``fgd`` and ``danlu`` placements
nor gets a misleading waiting reason from the two sizing policies."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from danlu.core.cluster import Allocation, Cluster, GpuShare, Node, gpu_type
from danlu.sched.placement.packing_memo import PackingMemo, shape_key, share_shape, typical_of
from danlu.sched.policies.base import NO_GPU_ASKED
from danlu.sched.policies.optimus import OptimusPolicy
from danlu.sched.registry import default_registry, make_policy
from danlu.sched.view import ClusterView, JobRequest, JobStatus, Plan

GiB = 1024**3


def _cluster(*nodes: tuple[int, str]) -> Cluster:
    """Nodes of ``(GPUs, GPU type)``, in that order."""
    return Cluster(
        tuple(Node(f"n{i}", gpus, gpu_type(kind)) for i, (gpus, kind) in enumerate(nodes))
    )


def _running(
    job_id: str, gpus: list[tuple[int, int]], *, seq: int, submit: float, **request: Any
) -> JobStatus:
    """A running whole-GPU job on ``gpus`` ((node, GPU) pairs)."""
    req = JobRequest(job_id, submit_time=submit, gpus=len(gpus), seq=seq, **request)
    return JobStatus(req, Allocation.whole_gpus(gpus), last_start=submit, run_time=0.0)


def _pending(job_id: str, gpus: int, *, seq: int, submit: float, **request: Any) -> JobStatus:
    return JobStatus(JobRequest(job_id, submit_time=submit, gpus=gpus, seq=seq, **request))


def _ids(plan: Plan) -> tuple[list[str], list[str], list[str]]:
    """The ids the plan starts, preempts and resizes."""
    return (
        [s.job_id for s in plan.starts],
        [p.job_id for p in plan.preempts],
        [r.job_id for r in plan.resizes],
    )


# -- 1. optimus: no preemption for a job that cannot be placed -----------------------------
def _optimus_views() -> dict[str, ClusterView]:
    """A running 4-GPU job and an earlier waiting job that cannot go anywhere."""
    t4 = Cluster.homogeneous(1, 4, gpu="T4")
    run = _running("run", [(0, g) for g in range(4)], seq=2, submit=10.0)
    h100 = _pending("want", 4, seq=1, submit=0.0, gpu_types=frozenset({"H100"}))
    # too much memory per GPU for a T4 (16 GB); two GPUs, so not a share
    big = _pending("want", 2, seq=1, submit=0.0, gpu_memory=40 * GiB)
    # its only node (an A100 one) is closed to new work
    two = _cluster((2, "A100-40GB"), (4, "T4"))
    run_t4 = _running("run", [(1, g) for g in range(4)], seq=2, submit=10.0)
    a100 = _pending("want", 1, seq=1, submit=0.0, gpu_types=frozenset({"A100-40GB"}))
    return {
        "type": ClusterView(1000.0, t4, running=(run,), pending=(h100,)),
        "memory": ClusterView(1000.0, t4, running=(run,), pending=(big,)),
        "closed": ClusterView(
            1000.0, two, running=(run_t4,), pending=(a100,), closed_nodes=frozenset({0})
        ),
    }


@pytest.mark.parametrize("case", ["type", "memory", "closed"])
@pytest.mark.parametrize("placement", ["worst-fit", "best-fit", "fgd"])
def test_optimus_preempts_no_job_for_one_it_cannot_place(case: str, placement: str) -> None:
    view = _optimus_views()[case]
    policy = OptimusPolicy(placement=placement)
    for _ in range(3):  # every round, not only the first
        plan = policy.schedule(view)
        assert _ids(plan) == ([], [], [])
        assert "want" in plan.waiting and "run" not in plan.waiting


def test_optimus_gives_the_gpus_to_a_later_job_that_can_use_them() -> None:
    """The first job in line may use only the two H100s: the split gives the six free GPUs'
    budget to the job behind it, which fits the T4s, instead of idling them all."""
    cluster = _cluster((2, "H100"), (4, "T4"))
    first = _pending("h100", 4, seq=1, submit=0.0, gpu_types=frozenset({"H100"}))
    second = _pending("any", 4, seq=2, submit=1.0)
    plan = OptimusPolicy().schedule(ClusterView(100.0, cluster, pending=(first, second)))
    assert _ids(plan) == (["any"], [], [])
    assert "only 2" in (plan.reason("h100") or "")  # says how many GPUs it may use


def test_optimus_keeps_a_job_the_split_gave_none_when_its_gpus_stay_idle() -> None:
    """Two waiting jobs may each use both H100s, so the split gives each two GPUs and none
    to the running job behind them; only one of the two fits, and the running job's T4s
    go to nobody: it keeps running."""
    cluster = _cluster((2, "H100"), (2, "T4"))
    first = _pending("a", 2, seq=1, submit=0.0, gpu_types=frozenset({"H100"}))
    second = _pending("b", 2, seq=2, submit=1.0, gpu_types=frozenset({"H100"}))
    run = _running("run", [(1, 0), (1, 1)], seq=3, submit=10.0)
    view = ClusterView(1000.0, cluster, running=(run,), pending=(first, second))
    plan = OptimusPolicy().schedule(view)
    assert _ids(plan) == (["a"], [], [])
    assert "b" in plan.waiting and "run" not in plan.waiting


# -- 2. danlu: victims whose GPUs nothing took are kept -----------------------------------
def test_danlu_preempts_no_job_for_one_of_a_type_the_cluster_lacks() -> None:
    cluster = Cluster.homogeneous(1, 8, gpu="T4")
    run = JobStatus(
        JobRequest("run", 1900.0, gpus=7, seq=1, priority=3, expected_duration=5000.0),
        Allocation.whole_gpus([(0, g) for g in range(1, 8)]),
        run_time=2800.0,
        last_start=4300.0,
    )
    want = _pending("want", 8, seq=2, submit=2300.0, priority=3, gpu_types=frozenset({"H100"}))
    policy = make_policy("danlu")
    for _ in range(3):
        plan = policy.schedule(ClusterView(10000.0, cluster, running=(run,), pending=(want,)))
        assert _ids(plan) == ([], [], [])
        assert "run" not in plan.marks or "danlu.stopped" not in plan.marks["run"]


@pytest.mark.parametrize("placement", ["topology", "fgd", "danlu", "worst-fit"])
def test_danlu_keeps_a_victim_of_a_move_too_wide_for_its_memory(placement: str) -> None:
    """(Shrunk from a fuzzed view.) A waiting elastic job asks for 5..8 GPUs of 40 GB on a
    node of four; the walk makes room for it by preempting the running elastic job, and
    the move then fails: the victim keeps running."""
    cluster = Cluster.homogeneous(1, 4, gpu="A100-40GB")
    share = JobStatus(
        JobRequest("r0", 8073.7, gpu_milli=500, gpu_memory=10 * GiB, priority=3, seq=1),
        Allocation((GpuShare(0, 2, 500, 10 * GiB),)),
        attained_service=52736.4,
        run_time=3045.2,
        last_start=467.4,
        progress=0.03,
    )
    fixed = JobStatus(
        JobRequest("r1", 3127.6, gpus=2, priority=1, preemptible=False, seq=2),
        Allocation.whole_gpus([(0, 3), (0, 1)], 40 * GiB),
        attained_service=58315.8,
        run_time=91.8,
        last_start=2243.2,
        progress=0.69,
    )
    elastic = JobStatus(
        JobRequest("r2", 4547.9, gpus=1, max_gpus=3, priority=2, seq=3, expected_duration=100.0),
        Allocation.whole_gpus([(0, 0)], 40 * GiB),
        attained_service=65567.2,
        run_time=2589.4,
        last_start=2010.0,
        progress=0.21,
    )
    wide = JobStatus(
        JobRequest("p3", 5325.0, gpus=5, max_gpus=8, gpu_memory=40 * GiB, priority=3, seq=7),
        attained_service=100.0,
    )
    # a share that starts beside the first running one in the fuzzed view
    tiny = JobStatus(
        JobRequest("p4", 2720.4, gpu_milli=100, priority=1, seq=8, expected_duration=100.0)
    )
    view = ClusterView(10000.0, cluster, running=(share, fixed, elastic), pending=(wide, tiny))
    plan = make_policy("danlu", placement=placement).schedule(view)
    assert "r2" not in _ids(plan)[1]


def test_danlu_keeps_a_victim_no_share_can_use() -> None:
    """(Shrunk from a fuzzed view.) The only waiting job is a share whose memory no T4
    holds; the running whole-GPU job is not preempted for it."""
    cluster = Cluster.homogeneous(1, 2, gpu="T4")
    small = JobStatus(
        JobRequest("r0", 4835.1, gpu_milli=250, gpu_memory=4 * GiB, priority=2, seq=1),
        Allocation((GpuShare(0, 0, 250, 4 * GiB),)),
        run_time=3194.4,
        last_start=8994.9,
    )
    elastic = JobStatus(
        JobRequest("r1", 1306.3, gpus=1, max_gpus=3, priority=1, seq=2, expected_duration=100.0),
        Allocation.whole_gpus([(0, 1)]),
        run_time=3916.1,
        last_start=5468.7,
    )
    share = JobStatus(
        JobRequest("p0", 1282.3, gpu_milli=500, gpu_memory=20 * GiB, priority=2, seq=3),
        attained_service=100.0,
    )
    view = ClusterView(
        10000.0, cluster, running=(small, elastic), pending=(share,), draining=frozenset({"r0"})
    )
    plan = make_policy("danlu", placement="fgd").schedule(view)
    assert _ids(plan)[1] == []


# -- 3. jobs asking for no GPU -------------------------------------------------------------
def test_the_shape_of_a_request_for_no_gpu_is_a_cpu_only_one() -> None:
    shape = share_shape(JobRequest("cpu", 0.0, gpus=0))
    assert (shape.num_gpu, shape.gpu_milli) == (0, 0)


def test_requests_for_no_gpu_are_no_typical_pods() -> None:
    """A job asking for no GPU never takes one, so it does not weigh in the fragmentation
    measure (FGD would count every free GPU as a fragment for it)."""
    cpu, one = JobRequest("cpu", 0.0, gpus=0), JobRequest("one", 0.0, gpus=1)
    counts = Counter({shape_key(cpu): 5, shape_key(one): 1})
    typical = typical_of(counts, {shape_key(cpu): cpu, shape_key(one): one})
    assert list(typical.num_gpu) == [1]
    only_cpu = ClusterView(0.0, Cluster.homogeneous(1, 4), pending=(JobStatus(cpu),))
    assert PackingMemo().typical(only_cpu) is None


@pytest.mark.parametrize("placement", ["best-fit", "fgd", "danlu"])
@pytest.mark.parametrize("name", sorted(default_registry().names()))
def test_a_job_asking_for_no_gpu_crashes_no_policy(name: str, placement: str) -> None:
    cluster = Cluster.homogeneous(1, 4)
    view = ClusterView(
        0.0,
        cluster,
        pending=(
            _pending("cpu", 0, seq=1, submit=0.0),
            _pending("share", 1, seq=2, submit=0.0, gpu_milli=500),
        ),
    )
    plan = make_policy(name, placement=placement).schedule(view)
    assert "cpu" not in _ids(plan)[0]
    assert plan.reason("cpu")


@pytest.mark.parametrize("placement", ["best-fit", "fgd", "danlu"])
@pytest.mark.parametrize(("name", "reason"), [("optimus", NO_GPU_ASKED), ("danlu", NO_GPU_ASKED)])
def test_the_sizing_policies_say_a_job_asks_for_no_gpu(
    name: str, reason: str, placement: str
) -> None:
    cluster = Cluster.homogeneous(1, 4)
    run = _running("run", [(0, g) for g in range(4)], seq=3, submit=5.0)
    for running in ((), (run,)):
        view = ClusterView(
            10.0, cluster, running=running, pending=(_pending("cpu", 0, seq=1, submit=0.0),)
        )
        plan = make_policy(name, placement=placement).schedule(view)
        assert plan.reason("cpu") == reason
        assert _ids(plan)[:2] == ([], [])  # nothing starts, nothing is preempted for it
