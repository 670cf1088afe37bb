"""Submission-time estimates from danlu.estimate's memory model: the micro-batch limit of an
elastic job (traced for real, in a subprocess, outside any transaction)."""

from __future__ import annotations

from typing import Any

import pytest

from danlu.core.cluster import Cluster, Node, gpu_type
from danlu.core.spec import parse_spec
from danlu.core.units import GiB
from danlu.estimate.memory import predict
from danlu.server.routes.estimation import (
    resolve_memory,
    resolve_micro_batch_limit,
    untraceable,
)

CLUSTER = Cluster((Node("n0", 4, gpu_type("H100")),), name="t")


def _spec(gpus: str = "1..4", **training: Any) -> Any:
    hints = {"global_batch_size": 64, "max_batch_size": 4096, **training}
    return parse_spec(
        {"name": "j", "command": ["true"], "resources": {"gpus": gpus}, "training": hints}
    )


def test_an_elastic_job_s_micro_batch_limit_fits_its_memory_share() -> None:
    spec = _spec(model="danlu.estimate.zoo:resnet_tiny")
    # resnet_tiny on an H100 (CUDA context included): ~586 MiB at batch 1, ~686 MiB at 128,
    # ~978 MiB at 512; 1 GiB less 5 % fits a few hundred samples
    limit = resolve_micro_batch_limit(spec, CLUSTER, 120.0, gpu_memory=1 * GiB)
    assert limit is not None and 128 < limit < 512


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
    # the share is the peak at batch 64, so the limit keeps 5 % of it spare: below 64
    assert micro is not None and 1 <= micro < 64
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
    assert calls == [(64,)]  # at the batch gpu_memory: auto would trace
    assert estimate.family == "cnn-small" and estimate.gpu_memory is None and micro is None
    named = _spec(gpus="2", model="danlu.estimate.zoo:resnet_tiny", family="cnn-large")
    assert resolve_memory(named, CLUSTER, 120.0)[0].family is None
    mlp = _spec(gpus="2", model="danlu.estimate.zoo:mlp_small", family="auto")
    assert resolve_memory(mlp, CLUSTER, 120.0)[0].family is None  # traced, nothing recognised
    assert calls == [(64,), (64,)]


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
