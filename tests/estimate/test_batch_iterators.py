"""A ``make_batch`` that returns an iterator (a generator function that yields the batch,
``iter([...])``, a dict holding a generator) is refused on ``MODEL_REF`` saying what to
return: the trace gives the one batch to ``loss_fn`` at every pass (warm-up, measured step),
so the first pass used it up and the trace failed with a bare ``StopIteration`` or with the
model refusing a ``generator`` as its input."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from danlu.core.errors import SpecError
from danlu.estimate.memory.trace_result import StepTrace, TraceRequest

torch = pytest.importorskip("torch")

MODULE = "batch_iterator_models"
FACTORIES = textwrap.dedent(
    """
    import torch
    from torch import nn


    def yields():
        def make_batch(b):
            yield torch.randn(b, 8)

        return nn.Linear(8, 2), make_batch, lambda model, batch: model(batch).mean()


    def one_shot():
        def make_batch(b):
            return iter([torch.randn(b, 8)])

        return nn.Linear(8, 2), make_batch, lambda model, batch: model(next(batch)).mean()


    def held_in_dict():
        def make_batch(b):
            return {"x": (torch.randn(b, 8) for _ in range(1))}

        def loss_fn(model, batch):
            return sum(model(x).mean() for x in batch["x"])

        return nn.Linear(8, 2), make_batch, loss_fn


    def in_a_list():
        def make_batch(b):
            return [torch.randn(b, 8)]

        return nn.Linear(8, 2), make_batch, lambda model, batch: model(batch[0]).mean()
    """
)

Tracer = Callable[[TraceRequest], list[StepTrace]]


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The factories' module, in a folder of its own (removed from ``sys.path`` after)."""
    folder = tmp_path_factory.mktemp("batch_iterators")
    (folder / f"{MODULE}.py").write_text(FACTORIES)
    yield folder
    while str(folder) in sys.path:
        sys.path.remove(str(folder))
    sys.modules.pop(MODULE, None)


@pytest.mark.parametrize(
    ("factory", "kind", "held"),
    [
        ("yields", "generator", False),
        ("one_shot", "list_iterator", False),
        ("held_in_dict", "generator", True),
    ],
)
def test_an_iterator_batch_is_refused_saying_what_to_return(
    models_dir: Path, trace_in_process: Tracer, factory: str, kind: str, held: bool
) -> None:
    req = TraceRequest(f"{MODULE}:{factory}", (2,), sys_path=(str(models_dir),))
    with pytest.raises(SpecError) as info:
        trace_in_process(req)
    assert info.value.field == "MODEL_REF"
    message = str(info.value)
    assert f"make_batch(b) returned {'a batch holding ' if held else ''}a {kind}" in message
    assert "return the batch itself" in message


def test_a_batch_in_a_list_still_traces(models_dir: Path, trace_in_process: Tracer) -> None:
    (step,) = trace_in_process(
        TraceRequest(f"{MODULE}:in_a_list", (2,), sys_path=(str(models_dir),))
    )
    assert step.breakdown["activations"] >= 2 * 8 * 4  # the batch's tensor is counted


def test_checked_batch_passes_containers_and_refuses_iterators() -> None:
    from danlu.estimate.memory.steps import checked_batch

    batch = {"x": torch.zeros(2), "y": [torch.zeros(2), (torch.zeros(1), "text")]}
    assert checked_batch(batch, "m:f") is batch
    with pytest.raises(SpecError, match="a batch holding a map"):
        checked_batch((torch.zeros(2), map(abs, [1])), "m:f")
