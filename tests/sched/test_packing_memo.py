"""What the ``fgd`` and ``danlu`` placements keep across a policy's rounds: the job shapes
counted from the jobs that came and went, the typical pods rebuilt only past a drift, and
the packing scorer's mirror carried over to the next round."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from danlu.core.cluster import Allocation, Cluster, GpuShare
from danlu.core.errors import ConfigError
from danlu.sched.placement.frag import TypicalPods, typical_pods_counted
from danlu.sched.placement.gang import FreeMap
from danlu.sched.placement.packing_memo import PackingMemo, drift, shape_key, share_shape
from danlu.sched.registry import default_registry, make_policy
from danlu.sched.view import ClusterView, JobRequest, JobStatus

GiB = 1024**3
SHAPES: list[dict[str, Any]] = [
    {"gpu_milli": 200},
    {"gpu_milli": 300},
    {"gpu_milli": 500},
    {"gpu_memory": 40 * GiB},
    {"gpus": 1},
    {"gpus": 2},
    {"gpus": 4, "gpu_types": frozenset({"A100"})},
]


def _request(rng: random.Random, seq: int) -> JobRequest:
    return JobRequest(id=f"j{seq}", submit_time=float(seq), seq=seq, **rng.choice(SHAPES))


def _fresh_typical(view: ClusterView) -> TypicalPods:
    """The typical pods of the view's jobs, counted from scratch."""
    requests = [j.request for j in (*view.pending, *view.running)]
    one = {shape_key(r): r for r in requests}
    counts = Counter(map(shape_key, requests))
    return typical_pods_counted([(share_shape(one[k]), n) for k, n in counts.items()])


def _same(a: TypicalPods, b: TypicalPods) -> bool:
    def arrays(t: TypicalPods) -> list[list[object]]:
        return [t.cpu_milli.tolist(), t.gpu_milli.tolist(), t.num_gpu.tolist(), t.weight.tolist()]

    if arrays(a) != arrays(b) or a.specs != b.specs:
        return False
    if (a.large is None) != (b.large is None):
        return False
    return a.large is None or b.large is None or _same(a.large, b.large)


class _Rounds:
    """Successive views of one cluster: some pending jobs start (as running shares or
    whole GPUs on a free GPU), some running jobs end, new jobs arrive. Unchanged jobs keep
    their status objects, as the control plane's adapters do."""

    def __init__(self, seed: int, nodes: int = 4) -> None:
        self.rng = random.Random(seed)
        self.cluster = Cluster.homogeneous(nodes, 4)
        self.seq = 0
        self.pending = [self._new() for _ in range(30)]
        self.running: list[JobStatus] = []
        self.used: set[tuple[int, int]] = set()

    def _new(self) -> JobStatus:
        self.seq += 1
        return JobStatus(_request(self.rng, self.seq))

    def view(self) -> ClusterView:
        return ClusterView(
            float(self.seq), self.cluster, running=tuple(self.running), pending=tuple(self.pending)
        )

    def step(self) -> None:
        rng = self.rng
        for job in list(self.running):
            if rng.random() < 0.2:
                self.running.remove(job)
                for share in job.allocation.shares:
                    self.used.discard((share.node, share.gpu))
        for job in list(self.pending):
            free = [
                (n, g)
                for n in range(len(self.cluster.nodes))
                for g in range(4)
                if (n, g) not in self.used
            ]
            if job.request.gpus == 1 and free and rng.random() < 0.3:
                node, gpu = rng.choice(free)
                self.used.add((node, gpu))
                milli = min(job.request.gpu_milli, 1000)
                alloc = Allocation((GpuShare(node, gpu, milli, 0),))
                self.pending.remove(job)
                self.running.append(JobStatus(job.request, alloc))
        self.pending += [self._new() for _ in range(rng.randint(0, 4))]


@pytest.mark.parametrize("seed", range(4))
def test_the_counts_follow_the_jobs_and_drift_zero_rebuilds_as_from_scratch(seed: int) -> None:
    memo = PackingMemo(refresh_drift=0.0)
    rounds = _Rounds(seed)
    for _ in range(25):
        view = rounds.view()
        typical = memo.typical(view)
        assert typical is not None
        assert _same(typical, _fresh_typical(view))
        assert memo._counts == Counter(shape_key(j.request) for j in (*view.pending, *view.running))
        rounds.step()


def test_the_typical_pods_are_kept_until_the_shapes_drift() -> None:
    memo = PackingMemo(refresh_drift=0.1)
    rounds = _Rounds(3)
    first = memo.typical(rounds.view())
    built_from = Counter(shape_key(j.request) for j in rounds.pending)
    kept = rebuilt = 0
    for _ in range(40):
        rounds.step()
        view = rounds.view()
        now = Counter(shape_key(j.request) for j in (*view.pending, *view.running))
        typical = memo.typical(view)
        if drift(now, built_from) > 0.1:
            assert typical is not first and _same(typical, _fresh_typical(view))  # type: ignore[arg-type]
            first, built_from = typical, now
            rebuilt += 1
        else:
            assert typical is first
            kept += 1
    assert kept and rebuilt and memo.rebuilds == rebuilt + 1


def test_drift_is_the_total_variation_distance() -> None:
    a: Counter[tuple[bool, int, int, frozenset[str]]] = Counter({(True, 200, 1, frozenset()): 3})
    b: Counter[tuple[bool, int, int, frozenset[str]]] = a + Counter(
        {(False, 1000, 2, frozenset()): 1}
    )
    assert drift(a, a) == 0.0
    assert drift(a, b) == pytest.approx(0.25)
    assert drift(a, Counter()) == 1.0


@pytest.mark.parametrize("strategy", ["danlu", "fgd"])
def test_rounds_placed_with_the_memo_are_those_placed_afresh(strategy: str) -> None:
    """With drift 0 the typical pods in effect are the view's own, so the mirror carried
    over from earlier rounds (its kept scores, the scorer's per-node caches) chooses the
    GPUs a new one chooses, round after round."""
    memo = PackingMemo(refresh_drift=0.0)
    rounds = _Rounds(11, nodes=6)
    mirrors = set()
    for _ in range(20):
        view = rounds.view()
        placed = []
        for free in (FreeMap(view, strategy, memo), FreeMap(view, strategy)):
            shares = [j for j in view.pending if j.request.shares_gpu]
            placed.append([free.place(j.request) for j in shares])
            if free._mirror is not None and free._memo is memo:
                mirrors.add(id(free._mirror))
        assert placed[0] == placed[1]
        rounds.step()
    if strategy == "danlu":
        assert 1 <= len(mirrors) < 20  # a mirror served several rounds


def test_a_mirror_lasts_while_the_typical_pods_do() -> None:
    memo = PackingMemo(refresh_drift=1.0)  # never rebuilt
    rounds = _Rounds(5)
    mirrors = []
    for _ in range(5):
        free = FreeMap(rounds.view(), "danlu", memo)
        assert free.place(JobRequest(id="x", submit_time=0.0, gpu_milli=250)) is not None
        mirrors.append(free._mirror)
        rounds.step()
    assert all(m is mirrors[0] for m in mirrors) and memo.rebuilds == 1
    # another cluster starts it afresh
    other = ClusterView(0.0, Cluster.homogeneous(2, 4), pending=tuple(rounds.pending))
    free = FreeMap(other, "danlu", memo)
    assert free.place(JobRequest(id="y", submit_time=0.0, gpu_milli=250)) is not None
    assert free._mirror is not mirrors[0] and memo.rebuilds == 2


def test_a_view_without_jobs_places_by_the_request_alone() -> None:
    memo = PackingMemo()
    view = ClusterView(0.0, Cluster.homogeneous(1, 4))
    free = FreeMap(view, "danlu", memo)
    alloc = free.place(JobRequest(id="z", submit_time=0.0, gpu_milli=300))
    assert alloc is not None and free._typical is not None
    assert free._typical.gpu_milli.tolist() == [300]
    assert memo.typical(view) is None


@pytest.mark.parametrize("bad", [-0.1, 1.5])
def test_refresh_drift_must_be_a_fraction(bad: float) -> None:
    with pytest.raises(ConfigError, match="refresh_drift"):
        PackingMemo(bad)


def test_memory_sized_shares_count_as_half_a_gpu() -> None:
    shape = share_shape(JobRequest(id="m", submit_time=0.0, gpu_memory=10 * GiB))
    assert (shape.gpu_milli, shape.num_gpu) == (500, 1)
    whole = share_shape(JobRequest(id="w", submit_time=0.0, gpus=4, gpu_types=frozenset({"A"})))
    assert (whole.gpu_milli, whole.num_gpu, whole.gpu_spec) == (1000, 4, frozenset({"a"}))


def _policies_with_placement() -> list[str]:
    registry = default_registry()
    return [
        name
        for name in registry.names()
        if hasattr(registry.create(name), "placement")
        and hasattr(registry.create(name), "_packing")
    ]


def test_every_policy_with_a_placement_keeps_a_memo() -> None:
    """Each built-in policy whose ``placement`` can be ``danlu`` keeps one memo across its
    rounds (those without: none)."""
    registry = default_registry()
    with_placement = [n for n in registry.names() if hasattr(registry.create(n), "placement")]
    assert with_placement and set(with_placement) == set(_policies_with_placement())


@pytest.mark.parametrize("name", _policies_with_placement())
def test_a_policy_places_shares_with_its_memo_round_after_round(name: str) -> None:
    """Shares arriving on a cluster with room, the plan's starts carried out each round:
    the policy counts the jobs with its memo and, with drift 1, builds the typical pods
    once over the rounds and keeps one mirror."""
    policy = make_policy(name, placement="danlu")
    memo = policy._packing  # type: ignore[attr-defined]
    memo.refresh_drift = 1.0
    cluster = Cluster.homogeneous(3, 4)
    pending: dict[str, JobStatus] = {}
    running: list[JobStatus] = []
    mirrors = set()
    for step in range(6):
        for k in range(3):
            job_id = f"s{step}-{k}"
            milli = (150, 250, 400)[k]
            pending[job_id] = JobStatus(
                JobRequest(id=job_id, submit_time=float(step), seq=3 * step + k, gpu_milli=milli)
            )
        view = ClusterView(
            float(step), cluster, running=tuple(running), pending=tuple(pending.values())
        )
        plan = policy.schedule(view)
        for start in plan.starts:
            running.append(JobStatus(pending.pop(start.job_id).request, start.allocation))
        if memo._mirror is not None:
            mirrors.add(id(memo._mirror))
    assert len(running) >= 9
    assert memo.rebuilds == 1 and len(mirrors) == 1
