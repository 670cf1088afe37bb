"""``danlu estimate``: the ``--batch-size`` trace in the fit, ``--gpu-memory``
above the GPU, models without trainable parameters, relative model references."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from danlu.cli.main import app
from danlu.core.errors import SpecError
from danlu.estimate.memory import TraceRequest
from danlu.estimate.memory.tracer import validate

pytest.importorskip("torch")

USER_MODELS = '''"""Models a training step cannot update (written by these tests)."""
import torch
from torch import nn


class NoParams(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def noparams():
    return NoParams(), (lambda b: torch.randn(b, 16, requires_grad=True)), (
        lambda m, x: m(x).sum()
    )


class BufOnly(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.ones(64, 64))

    def forward(self, x):
        return x @ self.scale


def buffers_only():
    return BufOnly(), (lambda b: torch.randn(b, 64, requires_grad=True)), (
        lambda m, x: m(x).sum()
    )
'''


def test_the_traced_batch_size_counts_for_sweep_and_max_batch() -> None:
    """``-b 1000 --sweep 8,1000 --max-batch`` traced b=1000 and said it fits, then refused
    the sweep row of 1000 as "more than 32x the largest traced batch (4)" and stopped the
    search at 128: the fit was built from --fit-points alone."""
    res = CliRunner().invoke(
        app,
        [
            "estimate",
            "danlu.estimate.zoo:mlp_small",
            "--batch-size",
            "1000",
            "--sweep",
            "8,1000",
            "--max-batch",
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["fits"] is True
    assert 1000 in out["fit"]["points"]
    row = {r["batch_size"]: r for r in out["sweep"]}[1000]
    assert "error" not in row, row
    for key in ("peak_logical_bytes", "peak_reserved_bytes", "peak_device_bytes"):
        assert row[key] == out[key]  # traced: the exact values
    assert row["fits"] is True
    assert "max_batch_error" not in out
    assert out["max_batch"] is not None and out["max_batch"] >= 1000


OVER_CAPACITY = ["estimate", "danlu.estimate.zoo:mlp_small", "-b", "4", "--gpu-memory", "200GiB"]


def test_gpu_memory_above_the_gpu_s_capacity_is_capped_there() -> None:
    """``--gpu-memory 200GiB`` on an h100 (79.2 GiB) said "fits within 200.0GiB": the limit
    is a share of one GPU, capped at its capacity with a note (the README's ``80GiB`` on an
    h100 still runs)."""
    res = CliRunner().invoke(app, OVER_CAPACITY)
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())  # rich wraps the note at the terminal's width
    assert "note: --gpu-memory 200GiB" in text and "capacity of 79.2GiB" in text
    assert "200.0GiB (--gpu-memory)" not in text
    assert "fits within 79.2GiB (capacity) on h100" in text
    out = CliRunner().invoke(
        app,
        [*OVER_CAPACITY, "--json"],
    )
    assert out.exit_code == 0, out.output
    got = json.loads(out.stdout)
    assert got["limit_source"] == "capacity" and got["limit_bytes"] == got["capacity_bytes"]


@pytest.mark.parametrize(
    ("factory", "optimizer"),
    [("noparams", "adamw"), ("buffers_only", "sgd")],
    ids=["no-parameters", "buffers-only"],
)
def test_a_model_without_trainable_parameters_is_named_as_such(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, factory: str, optimizer: str
) -> None:
    """The error blamed the optimizer ("--optimizer: torch.optim.AdamW cannot be built with
    its defaults: optimizer got an empty parameter list")."""
    (tmp_path / "review66_models.py").write_text(USER_MODELS)
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(
        app,
        ["estimate", f"review66_models:{factory}", "-b", "2", "--optimizer", optimizer],
    )
    assert res.exit_code == 2, res.output
    assert "MODEL_REF" in res.output and "no trainable parameters" in res.output
    assert "--optimizer" not in res.output


@pytest.mark.parametrize(
    "ref",
    ["./usermodels.py:mlp", ".zoo:gpt2_tiny", "danlu..zoo:f"],
    ids=["file-path", "relative-import", "empty-part"],
)
def test_a_relative_or_file_model_reference_is_a_clean_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ref: str
) -> None:
    """``./usermodels.py:mlp`` passed validation and failed in the tracer with a traceback
    ("the 'package' argument is required to perform a relative import")."""
    (tmp_path / "usermodels.py").write_text(USER_MODELS)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SpecError) as caught:
        validate(TraceRequest(ref, (2,)))
    assert caught.value.field == "MODEL_REF"
    assert "cannot import" in caught.value.message and "module path" in caught.value.message
    res = CliRunner().invoke(app, ["estimate", ref, "-b", "2"])
    assert res.exit_code == 2, res.output
    assert "MODEL_REF: cannot import" in res.output and "Traceback" not in res.output


@pytest.mark.parametrize(
    "ref", [".zoo:gpt2_tiny", "./usermodels.py:mlp"], ids=["relative-import", "file-path"]
)
def test_load_factory_refuses_a_relative_reference_with_a_spec_error(ref: str) -> None:
    """The worker's own import (which a request past :func:`validate` reaches) raised
    ``TypeError`` for ``.zoo``: only ``ImportError`` was turned into a ``SpecError``."""
    from danlu.estimate.memory.steps import load_factory

    with pytest.raises(SpecError) as caught:
        load_factory(ref)
    assert caught.value.field == "MODEL_REF" and "cannot import" in caught.value.message
