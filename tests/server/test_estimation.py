"""Submission-time estimates from danlu.estimate's memory model: the micro-batch limit of an
elastic job (traced for real, in a subprocess, outside any transaction)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from danlu.core.cluster import Cluster, GpuType, Node, gpu_type
from danlu.core.spec import parse_spec
from danlu.core.units import GiB, format_bytes
from danlu.estimate.memory import GPUS, StepTrace, TraceRequest, predict
from danlu.server.routes.estimation import (
    resolve_memory,
    resolve_micro_batch_limit,
    untraceable,
)

CLUSTER = Cluster((Node("n0", 4, gpu_type("H100")),), name="t")


Trace = Callable[..., list[StepTrace]]
"""``predict.trace``: (request, progress, timeout_s, workers) -> a trace per batch size."""


@pytest.fixture(autouse=True, scope="module")
def one_trace_per_request() -> Iterator[Trace]:
    """Trace each distinct request once in this module (a subprocess each, 5-10 s), and give
    later asks for it a copy of that trace: the tests here check what the server asks the
    tracer for and what it makes of the answer, and several ask for the same trace. Each
    ask is still a call of ``predict.trace`` (counted by :func:`_counting` and
    :func:`_requests`); a trace that fails is not kept. Gives the real ``predict.trace``,
    for a test that compares with a trace of its own."""
    real: Trace = predict.trace
    traced: dict[TraceRequest, list[StepTrace]] = {}

    def once(
        req: TraceRequest, progress: Any = None, timeout_s: float = 60.0, workers: Any = None
    ) -> list[StepTrace]:
        if req not in traced:
            traced[req] = real(req, progress, timeout_s, workers)
        return copy.deepcopy(traced[req])

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(predict, "trace", once)
        yield real


def _spec(gpus: str = "1..4", **training: Any) -> Any:
    hints = {"global_batch_size": 64, "max_batch_size": 4096, **training}
    return parse_spec(
        {"name": "j", "command": ["true"], "resources": {"gpus": gpus}, "training": hints}
    )


def test_an_elastic_job_s_micro_batch_limit_fits_its_memory_share(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = _requests(monkeypatch)
    spec = _spec(model="danlu.estimate.zoo:resnet_tiny")
    # resnet_tiny on an H100 (CUDA context included): ~586 MiB at batch 1, ~686 MiB at 128,
    # ~978 MiB at 512; 1 GiB less 5 % fits a few hundred samples
    limit = resolve_micro_batch_limit(spec, CLUSTER, 120.0, gpu_memory=1 * GiB)
    assert limit is not None and 128 < limit < 512
    # with DDP's buckets: an elastic 1..4 job may grow to more than one GPU
    assert [r.data_parallel for r in seen] == [True]


def test_no_limit_for_other_jobs_or_a_failing_model() -> None:
    assert resolve_micro_batch_limit(_spec(), CLUSTER, 120.0) is None  # no training.model
    rigid = _spec(gpus="2", model="danlu.estimate.zoo:resnet_tiny")
    assert resolve_micro_batch_limit(rigid, CLUSTER, 120.0) is None
    broken = _spec(model="danlu.estimate.zoo:no_such_factory")
    assert resolve_micro_batch_limit(broken, CLUSTER, 120.0) is None


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, ...]]:
    calls: list[tuple[int, ...]] = []
    real = predict.trace

    def counted(
        req: Any, progress: Any = None, timeout_s: float = 60.0, workers: Any = None
    ) -> Any:
        calls.append(tuple(req.batch_sizes))
        return real(req, progress, timeout_s, workers)

    monkeypatch.setattr(predict, "trace", counted)
    return calls


def test_auto_memory_and_the_micro_batch_limit_come_from_one_trace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = _counting(monkeypatch)
    spec = parse_spec(
        {
            "name": "j",
            "command": ["true"],
            "resources": {"gpus": "1..4", "gpu_memory": "auto"},
            "training": {"global_batch_size": 64, "model": "danlu.estimate.zoo:resnet_tiny"},
        }
    )
    estimate, micro = resolve_memory(spec, CLUSTER, 120.0)
    assert calls == [(2, 8, 32, 64)]  # one subprocess, the job's batch among the sizes
    assert estimate.gpu_memory is not None and 500 * 2**20 < estimate.gpu_memory < 1 * GiB
    # the share is the peak at batch 64: the limit holds that batch (never below it)
    assert micro == 64
    assert estimate.family == "cnn-small"  # read off the same trace


def test_an_auto_family_comes_from_the_trace_the_job_needs_anyway(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = _counting(monkeypatch)
    elastic = _spec(model="danlu.estimate.zoo:gpt2_tiny", family="auto")
    estimate, micro = resolve_memory(elastic, CLUSTER, 120.0)
    assert calls == [(2, 8, 32)]  # the micro-batch limit's trace only
    assert estimate.family == "transformer" and estimate.gpu_memory is None and micro


def test_an_auto_family_alone_costs_one_trace_and_no_family_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = _counting(monkeypatch)
    rigid = _spec(gpus="2", model="danlu.estimate.zoo:resnet_tiny", family="auto")
    estimate, micro = resolve_memory(rigid, CLUSTER, 120.0)
    # at the batch gpu_memory: auto would trace: 64 split over the job's 2 GPUs
    assert calls == [(32,)]
    assert estimate.family == "cnn-small" and estimate.gpu_memory is None and micro is None
    named = _spec(gpus="2", model="danlu.estimate.zoo:resnet_tiny", family="cnn-large")
    assert resolve_memory(named, CLUSTER, 120.0)[0].family is None
    mlp = _spec(gpus="2", model="danlu.estimate.zoo:mlp_small", family="auto")
    assert resolve_memory(mlp, CLUSTER, 120.0)[0].family is None  # traced, nothing recognised
    assert calls == [(32,), (32,)]


@pytest.mark.parametrize("model", ["http.server:test", "os:getcwd", "danlu.estimate:zoo"])
def test_only_factories_in_the_listed_packages_are_traced(
    monkeypatch: pytest.MonkeyPatch, model: str
) -> None:
    """The submitter names the factory the server imports and calls: outside
    ``DANLU_TRACE_MODULES`` nothing is traced (``http.server:test`` served the server's
    working directory on port 8000 before), and the job falls back to whole GPUs, saying why."""
    calls = _counting(monkeypatch)
    auto = parse_spec(
        {
            "name": "j",
            "command": ["true"],
            "resources": {"gpus": "1..4", "gpu_memory": "auto"},
            "training": {"global_batch_size": 64, "model": model, "family": "auto"},
        }
    )
    estimate, micro = resolve_memory(auto, CLUSTER, 120.0)
    assert calls == [] and (estimate.gpu_memory, micro, estimate.family) == (None, None, None)
    assert estimate.note is not None and "DANLU_TRACE_MODULES" in estimate.note
    assert resolve_micro_batch_limit(_spec(model=model), CLUSTER, 120.0) is None
    sized = _spec(model=model).model_copy(
        update={"resources": _spec(model=model).resources.model_copy(update={"gpu_memory": GiB})}
    )
    assert resolve_memory(sized, CLUSTER, 120.0)[0].gpu_memory == GiB  # an explicit size stands
    assert calls == []
    module = model.partition(":")[0]
    assert untraceable(model, (module,)) == "" and untraceable(model, ()) != ""
    assert untraceable("danlu.estimate.zoo:gpt2_tiny", ("danlu.estimate",)) == ""
    assert untraceable("danlu.estimatex:f", ("danlu.estimate",)) != ""
    # only a public name the module defines: not a path through what it imported
    for reach in ("danlu.estimate.zoo:torch.os.fork", "danlu.estimate.zoo:_private"):
        assert "public name" in untraceable(reach, ("danlu.estimate.zoo",))


def _requests(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Record the trace requests (and trace them)."""
    seen: list[Any] = []
    real = predict.trace

    def recorded(
        req: Any, progress: Any = None, timeout_s: float = 60.0, workers: Any = None
    ) -> Any:
        seen.append(req)
        return real(req, progress, timeout_s, workers)

    monkeypatch.setattr(predict, "trace", recorded)
    return seen


@pytest.mark.parametrize("kind", [GpuType("generic", GiB), GpuType("H100", GiB)])
def test_the_micro_batch_limit_fits_the_node_s_gpu_memory(kind: GpuType) -> None:
    """A node's GPU type the memory model lacks was planned as an 80 GB A100 (and a known
    type at the table's capacity, whatever the node's memory): resnet_tiny took the search's
    cap, 1024 samples, on a 1 GiB GPU."""
    small = Cluster((Node("n0", 4, kind),), name="t")
    spec = _spec(model="danlu.estimate.zoo:resnet_tiny")
    limit = resolve_micro_batch_limit(spec, small, 120.0)
    # resnet_tiny: ~586 MiB at batch 1 on an H100 (CUDA context included), ~0.8 MiB a sample
    assert limit is not None and 32 < limit < 1024
    if kind.name == "H100":
        assert resolve_micro_batch_limit(spec, CLUSTER, 120.0) == 1024  # 80 GB: the cap


def test_the_gpu_planned_for_is_the_smallest_a_job_may_get() -> None:
    from danlu.server.routes.estimation import _gpu_spec

    cluster = Cluster(
        (
            Node("big", 4, gpu_type("H100")),
            Node("none", 0, GpuType("tiny", 1 << 30)),  # no GPUs: never planned for
            Node("l40s", 4, GpuType("NVIDIA L40S", 46068 << 20)),
            Node("a100", 4, GpuType("A100-40GB", 40 * GiB)),
        ),
        name="t",
    )
    anywhere = _gpu_spec(_spec(), cluster)
    assert (anywhere.name, anywhere.capacity_bytes) == (
        "a100-40gb",
        GPUS["a100-40gb"].capacity_bytes,
    )
    only_l40s = _spec().model_copy(
        update={"resources": _spec().resources.model_copy(update={"gpu_type": ["NVIDIA L40S"]})}
    )
    l40s = _gpu_spec(only_l40s, cluster)
    assert l40s.capacity_bytes == 46068 << 20  # the node's memory, not a bigger card's
    assert l40s.context_bytes >= max(g.context_bytes for g in GPUS.values())
    only_h100 = _spec().model_copy(
        update={"resources": _spec().resources.model_copy(update={"gpu_type": ["H100"]})}
    )
    assert _gpu_spec(only_h100, cluster) == GPUS["h100"]


def test_a_job_on_more_than_one_gpu_is_estimated_with_ddp_s_buckets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """danlu.train runs such a job under DDP, whose gradient buckets (one more gradient-sized
    buffer per GPU) the estimate left out."""
    seen = _requests(monkeypatch)

    def auto(gpus: str) -> Any:
        return parse_spec(
            {
                "name": "j",
                "command": ["true"],
                "resources": {"gpus": gpus, "gpu_memory": "auto"},
                "training": {"global_batch_size": 16, "model": "danlu.estimate.zoo:mlp_small"},
            }
        )

    one, _ = resolve_memory(auto("1"), CLUSTER, 120.0)
    two, _ = resolve_memory(auto("2"), CLUSTER, 120.0)
    assert [r.data_parallel for r in seen] == [False, True]
    assert one.gpu_memory is not None and two.gpu_memory is not None
    assert two.gpu_memory > one.gpu_memory
    # an elastic 1..4 job's micro-batch limit traced with DDP's buckets: the first test's


def _auto(gpus: str, model: str = "danlu.estimate.zoo:gpt2_tiny", **training: Any) -> Any:
    """A ``gpu_memory: auto`` job of ``model`` on ``gpus``."""
    return parse_spec(
        {
            "name": "j",
            "command": ["true"],
            "resources": {"gpus": gpus, "gpu_memory": "auto"},
            "training": {"model": model, **training},
        }
    )


@pytest.mark.parametrize(
    ("gpus", "training", "per_gpu"),
    [
        ("1", {"global_batch_size": 64}, 64),
        ("4", {"global_batch_size": 64}, 16),
        ("3", {"global_batch_size": 64}, 22),  # rounded up, as a launch splits it
        ("2..4", {"global_batch_size": 64}, 32),  # an elastic job: at its fewest GPUs
        ("1..4", {"global_batch_size": 64}, 64),
        ("4", {"global_batch_size": 64, "min_batch_size": 8, "max_batch_size": 256}, 16),
        ("1", {"global_batch_size": 64, "min_batch_size": 8}, 64),  # it runs 64, not 8
        ("4", {"min_batch_size": 8}, 2),  # no global batch: the smallest one, split
        ("4", {}, 1),
    ],
    ids=[
        "1gpu",
        "4gpus",
        "3gpus-rounded-up",
        "elastic-2..4",
        "elastic-1..4",
        "min-max",
        "1gpu-min-and-global",
        "min-only",
        "no-batch",
    ],
)
def test_auto_memory_is_traced_at_the_batch_one_gpu_runs(
    gpus: str, training: dict[str, int], per_gpu: int
) -> None:
    """A launch gives each GPU the global batch split over the job's GPUs (``JobLaunch.
    per_gpu_batch``, ``DANLU_BATCH_SIZE``); ``gpu_memory: auto`` traced the whole global
    batch on one GPU, so a 4-GPU gpt2_124m job of batch 64 was refused (87.3 GiB per GPU)."""
    from danlu.executors.base import GpuSlot, JobLaunch
    from danlu.server.routes.estimation import _auto_batch

    spec = _auto(gpus, **training)
    assert _auto_batch(spec) == per_gpu
    fewest = tuple(GpuSlot(0, i) for i in range(spec.resources.gpus.min))
    launch = JobLaunch(
        "a1b2c3d4e5f6", ("true",), gpus=fewest, batch_size=training.get("global_batch_size")
    )
    if launch.per_gpu_batch is not None:
        assert launch.per_gpu_batch == per_gpu  # the batch each GPU runs at its fewest GPUs


def test_a_multi_gpu_auto_job_is_charged_its_per_gpu_batch_under_ddp(
    monkeypatch: pytest.MonkeyPatch, one_trace_per_request: Trace
) -> None:
    """4 GPUs, global batch 64: the share is the peak of batch 16 with DDP's buckets, the
    same bytes a direct estimate of one such GPU gives, well below the whole batch's."""
    from danlu.estimate.memory import estimate_memory

    seen = _requests(monkeypatch)
    four, _ = resolve_memory(_auto("4", global_batch_size=64), CLUSTER, 120.0)
    assert [(r.batch_sizes, r.data_parallel) for r in seen] == [((16,), True)]
    one, _ = resolve_memory(_auto("1", global_batch_size=64), CLUSTER, 120.0)
    assert [(r.batch_sizes, r.data_parallel) for r in seen[1:]] == [((64,), False)]
    monkeypatch.setattr(predict, "trace", one_trace_per_request)  # a subprocess of its own
    direct = estimate_memory(
        TraceRequest("danlu.estimate.zoo:gpt2_tiny", (16,), data_parallel=True), GPUS["h100"]
    )[0]
    assert four.gpu_memory == direct.peak_device_bytes
    assert one.gpu_memory is not None and four.gpu_memory is not None
    assert four.gpu_memory < one.gpu_memory  # a quarter of the activations, plus the buckets


def test_an_elastic_auto_job_is_charged_at_its_fewest_gpus(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its share must hold at every GPU count it may run at: the largest per-GPU batch is at
    the fewest GPUs (2 of 2..4: 32 of 64); traced with the micro-batch sizes, in one
    subprocess, with DDP's buckets (it runs on more than one GPU)."""
    seen = _requests(monkeypatch)
    estimate, micro = resolve_memory(_auto("2..4", global_batch_size=64), CLUSTER, 120.0)
    assert [(r.batch_sizes, r.data_parallel) for r in seen] == [((2, 8, 32), True)]
    assert estimate.gpu_memory is not None and micro == 32  # the batch it is charged for


def test_the_note_of_an_estimated_memory_reads_as_a_size() -> None:
    spec = parse_spec(
        {
            "name": "j",
            "command": ["true"],
            "resources": {"gpus": 1, "gpu_memory": "auto"},
            "training": {"global_batch_size": 8, "model": "danlu.estimate.zoo:resnet_tiny"},
        }
    )
    estimate, _ = resolve_memory(spec, CLUSTER, 120.0)
    peak = estimate.gpu_memory
    assert peak is not None
    # the size as a person reads it first, then its exact bytes (it gave the bytes alone)
    assert estimate.note == f"gpu_memory estimated at {format_bytes(peak)} ({peak} bytes) per GPU"
    assert "MiB (" in estimate.note
