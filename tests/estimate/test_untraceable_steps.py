"""Steps the tracer cannot trace fail with an error naming the field and the fix, where
torch's error came alone.

* A model with batch normalisation over features (``BatchNorm1d`` on ``(batch,
  features)``) cannot train on one sample: a trace at batch 1, which ``danlu estimate``'s
  default ``--fit-points 1,2,4`` includes, failed with "Expected more than 1 value per
  channel". It is an error on ``--batch-size`` saying to trace from 2; from 2 on the model
  traces as any other (with a buffer and a dict output, as such models have).
* A step that reads a tensor's values (``.item()``, a selection by a boolean mask) cannot
  run on fake tensors: it failed with ``DataDependentOutputException:
  aten._local_scalar_dense.default`` or ``DynamicOutputShapeException: aten.nonzero``.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from danlu.core.errors import SpecError
from danlu.estimate.memory.trace_result import StepTrace, TraceRequest

pytest.importorskip("torch")

MODULE = "lone_sample_models"
FACTORIES = textwrap.dedent(
    """
    import torch
    from torch import nn


    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.hidden = nn.Linear(16, 32)
            self.norm = nn.BatchNorm1d(32)
            self.out = nn.Linear(32, 4)
            self.register_buffer("scale", torch.ones(32))

        def forward(self, x):
            hidden = torch.relu(self.norm(self.hidden(x)) * self.scale)
            return {"logits": self.out(hidden), "note": "not a tensor"}


    def batch_norm():
        def make_batch(b):
            return torch.randn(b, 16), torch.randint(0, 4, (b,))

        def loss_fn(model, batch):
            return nn.functional.cross_entropy(model(batch[0])["logits"], batch[1])

        return Classifier(), make_batch, loss_fn


    def _classifier(loss_fn):
        def make_batch(b):
            return torch.randn(b, 16), torch.randint(0, 4, (b,))

        return nn.Linear(16, 4), make_batch, loss_fn


    def reads_item():
        def loss_fn(model, batch):
            loss = nn.functional.cross_entropy(model(batch[0]), batch[1])
            return loss if loss.item() < 1e9 else loss * 0

        return _classifier(loss_fn)


    def masked_selection():
        def loss_fn(model, batch):
            logits, labels = model(batch[0]), batch[1]
            keep = labels != 0
            return nn.functional.cross_entropy(logits[keep], labels[keep])

        return _classifier(loss_fn)
    """
)

Tracer = Callable[[TraceRequest], list[StepTrace]]


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The factories' module, in a folder of its own (removed from ``sys.path`` after)."""
    folder = tmp_path_factory.mktemp("lone_sample")
    (folder / f"{MODULE}.py").write_text(FACTORIES)
    yield folder
    while str(folder) in sys.path:
        sys.path.remove(str(folder))
    sys.modules.pop(MODULE, None)


def test_a_batch_of_one_is_a_clear_batch_size_error(
    models_dir: Path, trace_in_process: Tracer
) -> None:
    req = TraceRequest(f"{MODULE}:batch_norm", (1, 2, 4), sys_path=(str(models_dir),))
    with pytest.raises(SpecError) as caught:
        trace_in_process(req)
    assert caught.value.field == "--batch-size"
    message = caught.value.message
    assert f"{MODULE}:batch_norm cannot train on a batch of 1" in message
    assert "--fit-points 2,4,8" in message  # the fix


def test_from_two_samples_it_traces(models_dir: Path, trace_in_process: Tracer) -> None:
    req = TraceRequest(f"{MODULE}:batch_norm", (2, 4), sys_path=(str(models_dir),))
    two, four = trace_in_process(req)
    assert four.peak_logical_bytes > two.peak_logical_bytes
    # weights, biases, the norm's affine parameters and running statistics, and the buffer
    weights = 16 * 32 + 32 + 2 * 32 + 32 * 4 + 4
    buffers = 2 * 32 * 4 + 8 + 32 * 4
    assert two.breakdown["parameters"] == weights * 4 + buffers


@pytest.mark.parametrize(
    ("factory", "torch_error"),
    [
        ("reads_item", "DataDependentOutputException"),
        ("masked_selection", "DynamicOutputShapeException"),
    ],
)
def test_a_step_reading_tensor_values_is_a_clear_model_ref_error(
    models_dir: Path, trace_in_process: Tracer, factory: str, torch_error: str
) -> None:
    req = TraceRequest(f"{MODULE}:{factory}", (2,), sys_path=(str(models_dir),))
    with pytest.raises(SpecError) as caught:
        trace_in_process(req)
    assert caught.value.field == "MODEL_REF"
    message = caught.value.message
    assert f"{MODULE}:{factory} reads the values of a tensor ({torch_error}" in message
    assert "torch.where" in message  # the fix
