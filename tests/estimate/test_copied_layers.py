"""A model that deep-copies a layer as it is built is traced.

``nn.TransformerEncoder`` clones its layer ``num_layers`` times with ``copy.deepcopy``, and so
do an EMA or teacher copy of a network. Under the tracer's ``FakeTensorMode`` a copied fake
tensor belonged to a new fake mode of its own (the mode is in the tensor's ``__dict__``,
which ``Tensor.__deepcopy__`` deep-copies), and the first op mixing it with the model's other
tensors failed the trace with torch's "AssertionError: Mixing fake modes NYI": no
``nn.TransformerEncoder`` model could be estimated (``examples/train_gpt.py``'s neither).
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from danlu.estimate.memory.trace_result import StepTrace, TraceRequest

torch = pytest.importorskip("torch")

MODULE = "copied_layer_models"
FACTORIES = textwrap.dedent(
    """
    import copy

    import torch
    from torch import nn

    WIDTH, SEQ = 16, 8


    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            layer = nn.TransformerEncoderLayer(
                WIDTH, 2, 2 * WIDTH, dropout=0.0, batch_first=True
            )
            self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.head = nn.Linear(WIDTH, 4)

        def forward(self, x):
            return self.head(self.encoder(x).mean(dim=1))


    class Student(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(WIDTH, 4)
            self.teacher = copy.deepcopy(self.net).requires_grad_(False)

        def forward(self, x):
            return self.net(x.mean(dim=1)) + self.teacher(x.mean(dim=1))


    def _classifier(model):
        def make_batch(b):
            return torch.randn(b, SEQ, WIDTH), torch.randint(0, 4, (b,))

        def loss_fn(model, batch):
            return nn.functional.cross_entropy(model(batch[0]), batch[1])

        return model, make_batch, loss_fn


    def encoder():
        return _classifier(Encoder())


    def student():
        return _classifier(Student())
    """
)

Tracer = Callable[[TraceRequest], list[StepTrace]]


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The factories' module, in a folder of its own (removed from ``sys.path`` after)."""
    folder = tmp_path_factory.mktemp("copied_layers")
    (folder / f"{MODULE}.py").write_text(FACTORIES)
    yield folder
    while str(folder) in sys.path:
        sys.path.remove(str(folder))
    sys.modules.pop(MODULE, None)


def _parameter_bytes(factory: str, folder: Path) -> int:
    """The bytes of the model's parameters, built for real."""
    sys.path.insert(0, str(folder))
    try:
        module = __import__(MODULE)
        model = getattr(module, factory)()[0]
    finally:
        sys.path.remove(str(folder))
    return sum(p.numel() * p.element_size() for p in model.parameters())


@pytest.mark.parametrize("factory", ["encoder", "student"])
def test_a_model_copying_a_layer_is_traced(
    models_dir: Path, trace_in_process: Tracer, factory: str
) -> None:
    req = TraceRequest(f"{MODULE}:{factory}", (2, 4), sys_path=(str(models_dir),))
    two, four = trace_in_process(req)
    assert two.breakdown["parameters"] == _parameter_bytes(factory, models_dir)
    assert four.phase_peaks["passes"] > two.phase_peaks["passes"]


def test_the_frozen_copy_gets_no_optimizer_state(
    models_dir: Path, trace_in_process: Tracer
) -> None:
    req = TraceRequest(f"{MODULE}:student", (2,), sys_path=(str(models_dir),))
    (traced,) = trace_in_process(req)
    assert traced.breakdown["optimizer_state"] == 2 * (16 * 4 + 4) * 4  # adamw: 2 moments
