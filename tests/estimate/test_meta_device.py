"""A model built on the ``meta`` device with a batch on ``cpu`` (or the reverse) failed inside
torch with a device mismatch naming neither; both on ``meta`` trace as on ``cpu``."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from danlu.core.errors import SpecError
from danlu.estimate.memory import TraceRequest, trace

pytest.importorskip("torch")

MODULE = textwrap.dedent(
    """
    import torch
    from torch import nn


    def _entry(model_device, batch_device):
        with torch.device(model_device):
            model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))

        def make_batch(b):
            x = torch.randn(b, 64, device=batch_device)
            return x, torch.randint(0, 10, (b,), device=batch_device)

        def loss_fn(m, batch):
            return nn.functional.cross_entropy(m(batch[0]), batch[1])

        return model, make_batch, loss_fn


    def model_on_meta():
        return _entry("meta", "cpu")


    def batch_on_meta():
        return _entry("cpu", "meta")


    def all_on_meta():
        return _entry("meta", "meta")


    def all_on_cpu():
        return _entry("cpu", "cpu")
    """
)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("meta_models")
    (path / "meta_models.py").write_text(MODULE)
    return path


def _request(folder: Path, factory: str) -> TraceRequest:
    return TraceRequest(f"meta_models:{factory}", (4,), sys_path=(str(folder),))


@pytest.mark.parametrize(
    ("factory", "what"),
    [("model_on_meta", "its model"), ("batch_on_meta", "make_batch's tensors")],
)
def test_meta_mixed_with_cpu_is_refused_naming_the_meta_side(
    folder: Path, factory: str, what: str
) -> None:
    with pytest.raises(SpecError) as caught:
        trace(_request(folder, factory))
    assert caught.value.field == "MODEL_REF"
    assert f"puts {what} on the meta device, and other tensors on cpu" in str(caught.value)


def test_a_model_and_batch_both_on_meta_trace_as_on_cpu(folder: Path) -> None:
    [meta] = trace(_request(folder, "all_on_meta"))
    [cpu] = trace(_request(folder, "all_on_cpu"))
    assert meta.peak_logical_bytes == cpu.peak_logical_bytes > 0
    assert meta.breakdown == cpu.breakdown
