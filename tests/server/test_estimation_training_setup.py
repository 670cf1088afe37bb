"""The submission-time memory estimate traces the job in the training setup its spec names
(``training.precision``, ``training.optimizer``, ``training.activation_checkpointing``): it
assumed fp32, adamw and no activation checkpointing whatever the job said, so a bf16 job
with checkpointing got the micro-batch limit (and ``gpu_memory: auto`` share) of an fp32 one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import live_server, spec

from danlu.core.cluster import Cluster, Node, gpu_type
from danlu.core.spec import parse_spec
from danlu.core.units import GiB
from danlu.estimate.memory import predict
from danlu.server.routes.estimation import resolve_memory, resolve_micro_batch_limit

CLUSTER = Cluster((Node("n0", 4, gpu_type("H100")),), name="t")
GPT2 = "danlu.estimate.zoo:gpt2_tiny"


def _spec(gpus: str = "1..4", gpu_memory: Any = None, **training: Any) -> Any:
    hints = {"global_batch_size": 64, "max_batch_size": 4096, "model": GPT2, **training}
    resources: dict[str, Any] = {"gpus": gpus}
    if gpu_memory is not None:
        resources["gpu_memory"] = gpu_memory
    return parse_spec({"name": "j", "command": ["true"], "resources": resources, "training": hints})


def test_bf16_with_checkpointing_gets_a_larger_micro_batch_limit_than_fp32() -> None:
    # traced for real (on the CPU, as for an H100): gpt2_tiny in a 1 GiB share fits ~65 a
    # GPU in fp32 with adamw, ~130 in bf16 with its activations recomputed
    fp32 = resolve_micro_batch_limit(_spec(), CLUSTER, 300.0, gpu_memory=1 * GiB)
    lean = _spec(precision="bf16", activation_checkpointing=True)
    smaller = resolve_micro_batch_limit(lean, CLUSTER, 300.0, gpu_memory=1 * GiB)
    assert fp32 is not None and smaller is not None
    assert smaller > fp32 * 1.5


def _recorded(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The trace requests made, each refused at once (no subprocess): the estimate then
    falls back to whole GPUs, which is not what is checked here."""
    seen: list[Any] = []

    def refused(req: Any, progress: Any = None, timeout_s: float = 0, workers: Any = None) -> Any:
        seen.append(req)
        raise RuntimeError("not traced in this test")

    monkeypatch.setattr(predict, "trace", refused)
    return seen


SETUP = {"precision": "BF16", "optimizer": "SGD-Momentum", "activation_checkpointing": True}
"""A training setup, as a user may spell it (stored as bf16 and sgd-momentum)."""


@pytest.mark.parametrize(
    ("gpus", "gpu_memory"),
    [("1..4", "auto"), ("1..4", None), ("2", "auto")],
    ids=["elastic-auto", "elastic-limit-only", "rigid-auto"],
)
def test_every_trace_of_the_submission_uses_the_spec_s_training_setup(
    monkeypatch: pytest.MonkeyPatch, gpus: str, gpu_memory: Any
) -> None:
    """Each path to a trace: the one trace for both a share and a limit, the limit alone,
    the ``auto`` share alone."""
    seen = _recorded(monkeypatch)
    resolve_memory(_spec(gpus, gpu_memory, **SETUP), CLUSTER, 60.0)
    assert seen, "no trace requested"
    for req in seen:
        assert (req.precision, req.optimizer, req.checkpointing) == ("bf16", "sgd-momentum", True)
    seen.clear()
    resolve_memory(_spec(gpus, gpu_memory), CLUSTER, 60.0)  # the defaults: as before
    assert seen
    for req in seen:
        assert (req.precision, req.optimizer, req.checkpointing) == ("fp32", "adamw", False)


@pytest.mark.parametrize(
    ("training", "says"),
    [
        ({"optimizer": "NoSuchOptimizer"}, "training.optimizer: unknown optimizer"),
        (
            {"model": "danlu.estimate.zoo:mlp_small", "activation_checkpointing": True},
            "training.activation_checkpointing: danlu.estimate.zoo:mlp_small has neither",
        ),
    ],
    ids=["optimizer-torch-lacks", "checkpointing-the-model-lacks"],
)
def test_a_setup_the_tracer_refuses_is_told_by_its_spec_field(
    training: dict[str, Any], says: str
) -> None:
    """A setup the spec takes but the trace cannot build (an optimizer name that reads as a
    torch.optim class torch lacks; checkpointing a model without a switch for it): whole
    GPUs, the reason naming the spec's field (the tracer's was ``--optimizer``)."""
    estimate, limit = resolve_memory(_spec("2", "auto", **training), CLUSTER, 300.0)
    assert estimate.gpu_memory is None and limit is None
    assert estimate.note is not None
    assert f"memory estimate failed ({says}" in estimate.note


def test_a_micro_batch_limit_that_could_not_be_estimated_is_told(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An elastic job with its own ``gpu_memory`` is traced for its micro-batch limit
    alone: a trace that failed (now also for a setup the tracer refuses) left the limit
    unset without a word in the job's pending reason."""
    from danlu.server.routes.estimation import submission_notes

    seen = _recorded(monkeypatch)
    job = _spec("1..4", 4 * GiB)
    estimate, limit = resolve_memory(job, CLUSTER, 60.0)
    assert seen and limit is None
    assert estimate.gpu_memory == 4 * GiB  # the share stands: it was given
    told = "micro-batch limit estimate failed (not traced in this test): none set"
    assert any(told in note for note in submission_notes(job, estimate))
    seen.clear()
    monkeypatch.undo()
    monkeypatch.setattr(predict, "trace", lambda *a, **k: seen.append(a) or [])
    rigid = _spec("2", 4 * GiB)  # no limit to estimate: nothing traced, nothing told
    estimate, limit = resolve_memory(rigid, CLUSTER, 60.0)
    assert not seen and limit is None and submission_notes(rigid, estimate) == []


def test_a_sweep_s_trials_are_estimated_in_the_trial_spec_s_setup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``POST /jobs`` and ``POST /sweeps`` alike trace in the spec's setup, and store it."""
    seen = _recorded(monkeypatch)
    training = {"global_batch_size": 8, "model": GPT2, **SETUP}
    trial = spec("t", "pass", resources={"gpus": 1, "gpu_memory": "auto"}, training=training)
    with live_server(tmp_path, fake_gpus="1x80GiB", start_loops=False) as live:
        client = live.client()
        job = client.post("/jobs", json=trial)
        assert job.status_code == 201, job.text
        stored = job.json()["spec"]["training"]
        assert (stored["precision"], stored["optimizer"]) == ("bf16", "sgd-momentum")
        assert stored["activation_checkpointing"] is True
        body = {
            "name": "lr",
            "trial": trial,
            "parameters": {"lr": {"values": [0.1, 0.01]}},
            "method": "grid",
        }
        sweep = client.post("/sweeps", json=body)
        assert sweep.status_code == 201, sweep.text
    assert len(seen) == 2  # one for the job, one for every trial of the sweep
    for req in seen:
        assert (req.precision, req.optimizer, req.checkpointing) == ("bf16", "sgd-momentum", True)
