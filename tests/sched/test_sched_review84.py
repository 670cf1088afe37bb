"""danlu.sched: closed indices of a view, fair-share reclaim past a project's
first waiting job."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from danlu.core.cluster import GPU_TYPES, Allocation, Cluster, Node
from danlu.core.errors import ConfigError
from danlu.sched.policies.fair_share import FairSharePolicy
from danlu.sched.policies.fifo import FifoPolicy
from danlu.sched.quota import Quota, QuotaPolicy, Quotas
from danlu.sched.registry import PolicyRegistry
from danlu.sched.view import ClusterView, JobRequest, JobStatus


def _request(job_id: str, gpus: int = 1, seq: int = 0, **kw: Any) -> JobRequest:
    return JobRequest(id=job_id, submit_time=float(seq), gpus=gpus, seq=seq, **kw)


@pytest.mark.parametrize("nodes", [{-1}, {2}, {True}, {0.5}])
def test_a_closed_node_index_outside_the_cluster_is_refused(nodes: set[object]) -> None:
    cluster = Cluster.homogeneous(2, 4)
    with pytest.raises(ConfigError, match=r"closed_nodes.*0 to 1"):
        ClusterView(0.0, cluster, closed_nodes=frozenset(nodes))  # type: ignore[arg-type]


@pytest.mark.parametrize("gpus", [{-1}, {8}, {False}])
def test_a_closed_gpu_index_outside_the_cluster_is_refused(gpus: set[object]) -> None:
    cluster = Cluster.homogeneous(2, 4)
    with pytest.raises(ConfigError, match=r"closed_gpus.*0 to 7"):
        ClusterView(0.0, cluster, closed_gpus=frozenset(gpus))  # type: ignore[arg-type]


def test_closed_indices_at_the_bounds_still_close_those_gpus() -> None:
    cluster = Cluster.homogeneous(2, 4)
    job = JobStatus(_request("j", 1), Allocation.whole_gpus([(1, 3)]))
    view = ClusterView(
        0.0, cluster, running=(job,), closed_nodes=frozenset({0}), closed_gpus=frozenset({7})
    )
    opened = view.open_gpus()
    assert opened is not None
    assert opened.tolist() == [False] * 4 + [True] * 3 + [False]
    assert view.running[0].request.preemptible is False


def _project_job(job_id: str, project: str, seq: int, gpus: int = 1) -> JobStatus:
    return JobStatus(_request(job_id, gpus, seq, project=project))


def _team_a_on(cluster: Cluster) -> tuple[JobStatus, ...]:
    """Project a holding every GPU of ``cluster`` with 1-GPU jobs that ran long enough."""
    return tuple(
        JobStatus(
            _request(f"a{g}", 1, g, project="a"),
            Allocation.whole_gpus([(0, g)]),
            last_start=0.0,
        )
        for g in range(cluster.total_gpus)
    )


def test_reclaim_passes_a_first_job_past_its_projects_share_for_the_next() -> None:
    """b's first waiting job wants the whole cluster, past b's fair half: reclaim only ever
    tried it, so b's 1-GPU job behind it waited until a's jobs ended."""
    cluster = Cluster.homogeneous(1, 8)
    pending = (_project_job("big", "b", 10, gpus=8), _project_job("small", "b", 11))
    view = ClusterView(1000.0, cluster, running=_team_a_on(cluster), pending=pending)
    plan = FairSharePolicy(reclaim=True, min_run=300.0).schedule(view)
    assert [s.job_id for s in plan.starts] == ["small"]
    assert len(plan.preempts) == 1 and plan.preempts[0].job_id.startswith("a")
    # without backfill the big job holds b's line, as it holds the queue
    strict = FairSharePolicy(reclaim=True, min_run=300.0, backfill=False).schedule(view)
    assert strict.starts == () and strict.preempts == ()


def test_reclaim_passes_a_first_job_of_a_gpu_type_no_victim_frees() -> None:
    cluster = Cluster.homogeneous(1, 4)
    pending = (
        JobStatus(_request("h100", 1, 10, project="b", gpu_types=frozenset({"no-such-gpu"}))),
        _project_job("any", "b", 11),
    )
    view = ClusterView(1000.0, cluster, running=_team_a_on(cluster), pending=pending)
    plan = FairSharePolicy(reclaim=True, min_run=300.0).schedule(view)
    assert [s.job_id for s in plan.starts] == ["any"]
    assert len(plan.preempts) == 1


def _fifo_maker(backfill: bool = True, *, placement: str = "best-fit") -> FifoPolicy:
    return FifoPolicy(placement=placement, backfill=backfill)


def test_an_option_a_factory_function_lacks_is_refused_naming_its_options() -> None:
    registry = PolicyRegistry()
    registry.register("mine", _fifo_maker)
    with pytest.raises(ConfigError, match=r"policy 'mine' has no option 'bogus'; options: "):
        registry.create("mine", bogus=1)
    with pytest.raises(ConfigError, match=r"'placement' must be a string"):
        registry.create("mine", placement=["best-fit"])
    built = registry.create("mine", backfill=False, placement="worst-fit")
    assert isinstance(built, FifoPolicy) and built.backfill is False


def test_a_factory_taking_any_keyword_gets_every_option() -> None:
    seen: dict[str, object] = {}

    def anything(**options: object) -> FifoPolicy:
        seen.update(options)
        return FifoPolicy()

    registry = PolicyRegistry()
    registry.register("any", anything)
    registry.create("any", knob=3)
    assert seen == {"knob": 3}


def test_a_quota_drop_keeps_a_start_waiting_on_a_draining_jobs_gpus() -> None:
    """Under a quota, when one start of a plan is dropped the rest are checked against the
    GPUs they land on: a start placed on a draining job's GPUs (to run once it exits) was
    counted as over-allocating them and dropped, 'its GPUs stay with a job whose growth a
    quota stopped', though no growth was stopped."""
    cluster = Cluster.homogeneous(1, 4)
    draining = JobStatus(
        _request("d", 2, 0, project="o"), Allocation.whole_gpus([(0, 0), (0, 1)]), last_start=0.0
    )
    pending = (
        JobStatus(_request("p1", 1, 1, project="p")),
        JobStatus(_request("p2", 1, 2, project="p")),
        JobStatus(_request("w", 2, 3, project="o")),
    )
    view = ClusterView(
        10.0, cluster, running=(draining,), pending=pending, draining=frozenset({"d"})
    )
    quotas = Quotas({"p": Quota("project 'p'", 1.0)})
    plan = QuotaPolicy(FifoPolicy(backfill=True), quotas).schedule(view)
    placed = {s.job_id: sorted(g.gpu for g in s.allocation.shares) for s in plan.starts}
    assert placed == {"p1": [2], "w": [0, 1]}
    assert plan.waiting["p2"].startswith("waiting for quota: project 'p' GPU quota")
    assert "w" not in plan.waiting and plan.preempts == ()


def test_a_start_dropped_for_a_quota_says_what_it_asks_itself() -> None:
    """The second of two 1-GPU starts of a project with a quota of 1 GPU was told '0 in use
    + 2 asked > 1': the GPUs its project's earlier start of the round takes were counted as
    asked by it, not as in use."""
    cluster = Cluster.homogeneous(1, 4)
    pending = (
        JobStatus(_request("p1", 1, 1, project="p")),
        JobStatus(_request("p2", 1, 2, project="p")),
    )
    quotas = Quotas({"p": Quota("project 'p'", 1.0)})
    plan = QuotaPolicy(FifoPolicy(), quotas).schedule(ClusterView(0.0, cluster, pending=pending))
    assert [s.job_id for s in plan.starts] == ["p1"]
    assert plan.waiting["p2"] == (
        "waiting for quota: project 'p' GPU quota: 1 in use + 1 asked > 1"
    )
    assert "w" not in plan.waiting and plan.preempts == ()


def test_reclaim_tries_each_shape_of_a_projects_waiting_jobs_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Passing jobs that cannot be made room for costs one try per shape the placement
    reads (GPUs, share, memory, types), not one per job of a long queue."""
    # the only T4 is held by a job that may not be preempted: no victim frees one (a GPU
    # type the cluster lacks would be no try at all: such a job could never start)
    cluster = Cluster((Node("n0", 4), Node("n1", 1, GPU_TYPES["T4"])))
    typed = frozenset({"T4"})
    typed_jobs = [
        JobStatus(
            _request(f"t{i}", 1, 10 + i, project="b", gpu_types=typed, expected_duration=60.0 + i)
        )
        for i in range(50)
    ]
    pending = (*typed_jobs, _project_job("any", "b", 100))
    on_t4 = JobStatus(
        _request("c0", 1, 5, project="c", preemptible=False),
        Allocation.whole_gpus([(1, 0)]),
        last_start=0.0,
    )
    tries: list[str] = []
    make_room = FairSharePolicy._make_room

    def counted(job: JobStatus, *args: Any) -> object:
        tries.append(job.id)
        return make_room(job, *args)

    monkeypatch.setattr(FairSharePolicy, "_make_room", staticmethod(counted))
    running = (*_team_a_on(Cluster.homogeneous(1, 4)), on_t4)
    view = ClusterView(1000.0, cluster, running=running, pending=pending)
    plan = FairSharePolicy(reclaim=True, min_run=300.0).schedule(view)
    assert [s.job_id for s in plan.starts] == ["any"]
    assert tries == ["t0", "any"]


@pytest.mark.parametrize("length", [1, 7, 9])
def test_usage_arrays_of_another_length_than_the_clusters_gpus_are_refused(length: int) -> None:
    """A length-1 array was broadcast over every GPU by the placement (each GPU read as
    that usage); other lengths were a bare ValueError in the first placement."""
    cluster = Cluster.homogeneous(2, 4)
    usage = np.full(length, 500, dtype=np.int64)
    memory = np.zeros(8, dtype=np.int64)
    with pytest.raises(ConfigError, match=r"used_milli: one entry per GPU .*\(8,"):
        ClusterView(0.0, cluster, used_milli=usage, used_memory=memory)
    with pytest.raises(ConfigError, match=r"used_memory: one entry per GPU"):
        ClusterView(0.0, cluster, used_milli=memory.copy(), used_memory=usage)


def test_usage_arrays_of_one_entry_per_gpu_are_taken_as_given() -> None:
    cluster = Cluster.homogeneous(2, 4)
    milli = np.array([1000, 0, 0, 0, 500, 0, 0, 0], dtype=np.int64)
    view = ClusterView(0.0, cluster, used_milli=milli, used_memory=np.zeros(8, dtype=np.int64))
    assert view.usage()[0].tolist() == milli.tolist()
    empty = Cluster(())
    none = np.zeros(0, dtype=np.int64)
    assert ClusterView(0.0, empty, used_milli=none, used_memory=none.copy()).usage()[0].size == 0


def test_a_factory_that_is_not_callable_is_refused_when_registered() -> None:
    registry = PolicyRegistry()
    with pytest.raises(ConfigError, match=r"policy 'mine': the factory must be a callable"):
        registry.register("mine", FifoPolicy())  # type: ignore[arg-type]
    assert registry.names() == []
