"""Optimizers whose ``step()`` reads a few tensor values are traced.

``torch.optim.Adafactor`` reads the norms of each parameter and of its update with
``.item()``, ``ASGD`` its ``eta`` and ``mu``. Fake tensors have no values, so the trace
failed, blaming the model: ``MODEL_REF: ... reads the values of a tensor
(DataDependentOutputException ...)``, with a fix to the model's code that did not apply.
Those values scale the update and size no tensor: the step is traced with a stand-in, and
its optimizer state is what a real step keeps. A model's own reads stay refused (in
``test_untraceable_steps``). ``SparseAdam``, which cannot step dense gradients, is refused on
``--optimizer`` naming the optimizer to estimate with, where the trace failed with torch's
error and a traceback.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from danlu.core.errors import SpecError
from danlu.estimate.memory.trace_result import StepTrace, TraceRequest

torch = pytest.importorskip("torch")

MODULE = "value_reading_optimizer_models"
FACTORIES = textwrap.dedent(
    """
    import torch
    from torch import nn


    def linear():
        def make_batch(b):
            return torch.randn(b, 16), torch.randint(0, 8, (b,))

        def loss_fn(model, batch):
            return nn.functional.cross_entropy(model(batch[0]), batch[1])

        return nn.Linear(16, 8), make_batch, loss_fn
    """
)

Tracer = Callable[[TraceRequest], list[StepTrace]]


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The factory's module, in a folder of its own (removed from ``sys.path`` after)."""
    folder = tmp_path_factory.mktemp("value_reads")
    (folder / f"{MODULE}.py").write_text(FACTORIES)
    yield folder
    while str(folder) in sys.path:
        sys.path.remove(str(folder))
    sys.modules.pop(MODULE, None)


def _real_state_bytes(optimizer: str) -> int:
    """The bytes of the state a real step of ``optimizer`` keeps on the device for
    ``nn.Linear(16, 8)``: all of it but the step counters (kept on the host on a GPU)."""
    model = torch.nn.Linear(16, 8)
    opt = getattr(torch.optim, optimizer)(model.parameters())
    model(torch.randn(4, 16)).sum().backward()
    opt.step()
    return sum(
        value.untyped_storage().nbytes()
        for state in opt.state.values()
        for key, value in state.items()
        if isinstance(value, torch.Tensor) and key != "step"
    )


@pytest.mark.parametrize("optimizer", ["Adafactor", "ASGD"])
def test_an_optimizer_reading_values_in_its_step_is_traced(
    models_dir: Path, trace_in_process: Tracer, optimizer: str
) -> None:
    req = TraceRequest(
        f"{MODULE}:linear", (2,), optimizer=optimizer.lower(), sys_path=(str(models_dir),)
    )
    (traced,) = trace_in_process(req)
    assert traced.breakdown["optimizer_state"] == _real_state_bytes(optimizer)
    assert traced.breakdown["parameters"] == (16 * 8 + 8) * 4


def test_adafactor_keeps_factored_moments_only(models_dir: Path, trace_in_process: Tracer) -> None:
    # a row and a column for the weight, a vector for the bias: far below adamw's two copies
    req = TraceRequest(f"{MODULE}:linear", (2,), optimizer="adafactor", sys_path=(str(models_dir),))
    (traced,) = trace_in_process(req)
    assert traced.breakdown["optimizer_state"] == (8 + 16 + 8) * 4


def test_sparse_adam_is_refused_on_the_optimizer(
    models_dir: Path, trace_in_process: Tracer
) -> None:
    req = TraceRequest(
        f"{MODULE}:linear", (2,), optimizer="SparseAdam", sys_path=(str(models_dir),)
    )
    with pytest.raises(SpecError) as caught:
        trace_in_process(req)
    assert caught.value.field == "--optimizer"
    assert "SparseAdam updates sparse gradients only" in caught.value.message
    assert "--optimizer adam" in caught.value.message  # the one to estimate with
