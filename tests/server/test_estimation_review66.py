"""The submission-time estimates: an ``auto`` job's micro-batch limit against
the batch it was charged for, the charge on a cluster of several GPU types, and a model
without trainable parameters."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from danlu.core.cluster import Cluster, Node, gpu_type
from danlu.core.spec import parse_spec
from danlu.estimate.memory import GPUS, TraceRequest, gpu_for_memory, replay, trace
from danlu.server.routes.estimation import _auto_batch, _gpu_spec, resolve_memory

pytest.importorskip("torch")

H100 = Cluster((Node("n0", 4, gpu_type("H100")),), name="t")
MIXED = Cluster((Node("a", 8, gpu_type("A100-40GB")), Node("h", 8, gpu_type("H200"))), name="mixed")


def _auto(gpus: str, model: str, **extra: Any) -> Any:
    """A ``gpu_memory: auto`` job of ``model`` on ``gpus`` (``extra``: more resources)."""
    return parse_spec(
        {
            "name": "j",
            "command": ["true"],
            "resources": {"gpus": gpus, "gpu_memory": "auto", **extra},
            "training": {"model": model, "global_batch_size": 64},
        }
    )


def test_an_auto_job_s_micro_batch_limit_holds_the_batch_it_was_charged_for() -> None:
    """2..4 GPUs, global batch 64: charged the exact peak at 32 a GPU, the limit came out
    below 32 (the 5 % spare was kept off that very peak), so a launch on 2 GPUs capped the
    split below the batch the share was sized for."""
    spec = _auto("2..4", "danlu.estimate.zoo:gpt2_tiny")
    estimate, micro = resolve_memory(spec, H100, 120.0)
    assert _auto_batch(spec) == 32
    assert estimate.gpu_memory is not None
    assert micro is not None and micro >= 32


def test_the_auto_charge_is_the_largest_peak_over_the_gpus_a_job_may_get() -> None:
    """On A100-40GB + H200 nodes the charge was the A100's peak (430 MiB of CUDA context),
    though the job may land on an H200 (750.8 MiB of context, a larger cuBLAS workspace)."""
    model = "danlu.estimate.zoo:mlp_small"
    anywhere = _auto("1", model)
    assert _gpu_spec(anywhere, MIXED).name == "a100-40gb"  # the capacity check: the smallest
    a100 = gpu_for_memory("A100-40GB", gpu_type("A100-40GB").memory)
    (traced,) = trace(TraceRequest(model, (64,)))
    on_a100 = replay(traced, a100).peak_device_bytes
    on_h200 = replay(traced, GPUS["h200"]).peak_device_bytes
    assert on_h200 > on_a100
    estimate, _ = resolve_memory(anywhere, MIXED, 120.0)
    assert estimate.gpu_memory == on_h200
    only_a100, _ = resolve_memory(_auto("1", model, gpu_type=["A100-40GB"]), MIXED, 120.0)
    assert only_a100.gpu_memory == on_a100  # it never lands on the H200


def test_a_model_without_trainable_parameters_names_training_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The note blamed ``--optimizer`` (a flag of the command line, not of a job spec)."""
    (tmp_path / "review66_server_models.py").write_text(
        "import torch\n"
        "from torch import nn\n\n\n"
        "class NoParams(nn.Module):\n"
        "    def forward(self, x):\n"
        "        return torch.relu(x)\n\n\n"
        "def noparams():\n"
        "    return NoParams(), (lambda b: torch.randn(b, 16, requires_grad=True)), (\n"
        "        lambda m, x: m(x).sum()\n"
        "    )\n"
    )
    monkeypatch.chdir(tmp_path)
    spec = _auto("1", "review66_server_models:noparams")
    estimate, micro = resolve_memory(spec, H100, 120.0, modules=("review66_server_models",))
    assert (estimate.gpu_memory, micro) == (None, None)
    note = estimate.note or ""
    assert "training.model" in note and "no trainable parameters" in note, note
    assert "--optimizer" not in note and "MODEL_REF" not in note
