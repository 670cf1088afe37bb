"""Models as a researcher brings them, traced or refused on ``MODEL_REF`` with the fix:

- a forward taking keyword arguments only, fed a dict batch of ``input_ids``,
  ``attention_mask`` and ``labels``, returning a dataclass with a ``.loss`` (a Hugging Face
  ``ModelOutput``'s shape): traced, each parameter counted once (its head is tied to its
  embedding); a ``loss_fn`` returning the output itself is refused saying that its
  ``.loss`` holds the loss (the refusal said only "return the mean loss as a scalar
  tensor");
- buffers larger than the parameters: held, with no gradient or optimizer state;
- a model that moves itself to ``cuda`` in ``__init__``, a factory calling ``.cuda()``, a
  ``make_batch`` building its tensors on ``cuda``: refused on ``MODEL_REF`` saying to return
  them on the CPU (on a torch without CUDA the trace failed with torch's bare "PyTorch is not
  linked with support for cuda devices" and the program's traceback); moving to ``cpu`` is
  traced as before.
"""

from __future__ import annotations

import re
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from danlu.core.errors import SpecError
from danlu.estimate.memory.trace_result import StepTrace, TraceRequest

torch = pytest.importorskip("torch")

MODULE = "user_model_outputs"
FACTORIES = textwrap.dedent(
    """
    import dataclasses

    import torch
    from torch import nn

    VOCAB, WIDTH = 100, 16


    @dataclasses.dataclass
    class Output:
        loss: torch.Tensor
        logits: torch.Tensor


    class LM(nn.Module):
        def __init__(self, buffer=False, device=None):
            super().__init__()
            self.emb = nn.Embedding(VOCAB, WIDTH)
            self.head = nn.Linear(WIDTH, VOCAB, bias=False)
            self.head.weight = self.emb.weight
            if buffer:
                self.register_buffer("table", torch.zeros(1000, 1000))
            if device:
                self.to(device)

        def forward(self, *, input_ids, attention_mask, labels):
            h = self.emb(input_ids) * attention_mask.unsqueeze(-1)
            logits = self.head(h)
            loss = nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())
            return Output(loss, logits)


    def _batch(b, device="cpu"):
        return {
            "input_ids": torch.randint(0, VOCAB, (b, 8), device=device),
            "attention_mask": torch.ones(b, 8, device=device),
            "labels": torch.randint(0, VOCAB, (b, 8), device=device),
        }


    def _loss(model, batch):
        return model(**batch).loss


    def keywords():
        return LM(), _batch, _loss


    def output_returned():
        return LM(), _batch, lambda model, batch: model(**batch)


    def big_buffer():
        return LM(buffer=True), _batch, _loss


    def moves_to_cpu():
        return LM(device="cpu"), _batch, _loss


    def moves_to_cuda_in_init():
        return LM(device="cuda"), _batch, _loss


    def cuda_in_factory():
        return LM().cuda(), _batch, _loss


    def batch_on_cuda():
        return LM(), lambda b: _batch(b, "cuda"), _loss
    """
)
PARAMETERS = 100 * 16
"""The parameters of ``LM``: the embedding, which the head shares."""

Tracer = Callable[[TraceRequest], list[StepTrace]]


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The factories' module, in a folder of its own (removed from ``sys.path`` after)."""
    folder = tmp_path_factory.mktemp("user_model_outputs")
    (folder / f"{MODULE}.py").write_text(FACTORIES)
    yield folder
    while str(folder) in sys.path:
        sys.path.remove(str(folder))
    sys.modules.pop(MODULE, None)


def _traced(tracer: Tracer, folder: Path, factory: str) -> StepTrace:
    return tracer(TraceRequest(f"{MODULE}:{factory}", (4,), sys_path=(str(folder),)))[0]


def test_a_keyword_only_forward_with_an_output_s_loss_is_traced(
    models_dir: Path, trace_in_process: Tracer
) -> None:
    tr = _traced(trace_in_process, models_dir, "keywords")
    assert tr.breakdown["parameters"] == 4 * PARAMETERS  # the tied head counted once
    assert tr.breakdown["optimizer_state"] == 2 * 4 * PARAMETERS  # adamw: two moments
    assert tr.warnings == []


def test_an_output_returned_as_the_loss_is_told_where_its_loss_is(
    models_dir: Path, trace_in_process: Tracer
) -> None:
    with pytest.raises(SpecError, match=r"loss_fn returned a Output.*its \.loss holds one") as e:
        _traced(trace_in_process, models_dir, "output_returned")
    assert e.value.field == "MODEL_REF"


@pytest.mark.parametrize(
    ("returned", "hint"),
    [
        (lambda loss: {"loss": loss, "aux": 1}, r"its \['loss'\] holds one"),
        (lambda loss: (loss, {"accuracy": 1.0}), r"its item 0 is one value.*\(out\[0\]\)"),
        (lambda loss: (torch.ones(2, 3), loss), r"its item 1 is one value.*\(out\[1\]\)"),
        (lambda loss: 0.5, ""),
    ],
    ids=["dict", "tuple", "logits-first", "number"],
)
def test_a_container_holding_the_loss_says_where(returned: Any, hint: str) -> None:
    from danlu.estimate.memory.steps import train_step

    model = torch.nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def loss_fn(m: Any, batch: Any) -> Any:
        return returned(m(batch).sum())

    with pytest.raises(SpecError) as e:
        train_step(model, opt, torch.ones(2, 4), loss_fn, "fp32", 1, lambda _: None)
    said = str(e.value)
    assert "mean loss as a scalar tensor" in said
    assert ("holds one" in said or "is one value" in said) == bool(hint)
    if hint:
        assert re.search(hint, said), said


def test_buffers_larger_than_the_parameters_are_held_without_optimizer_state(
    models_dir: Path, trace_in_process: Tracer
) -> None:
    plain = _traced(trace_in_process, models_dir, "keywords")
    buffered = _traced(trace_in_process, models_dir, "big_buffer")
    # the buffer's 4 MB are held with the weights (the "parameters" row: the model's state)
    assert buffered.breakdown["parameters"] == plain.breakdown["parameters"] + 4 * 1000 * 1000
    assert buffered.breakdown["optimizer_state"] == plain.breakdown["optimizer_state"]
    assert buffered.peak_logical_bytes == plain.peak_logical_bytes + 4 * 1000 * 1000


def test_a_model_moved_to_the_cpu_traces_as_built_there(
    models_dir: Path, trace_in_process: Tracer
) -> None:
    moved = _traced(trace_in_process, models_dir, "moves_to_cpu")
    built = _traced(trace_in_process, models_dir, "keywords")
    assert (moved.peak_logical_bytes, moved.breakdown) == (
        built.peak_logical_bytes,
        built.breakdown,
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU takes the tensors: nothing to refuse")
@pytest.mark.parametrize("factory", ["moves_to_cuda_in_init", "cuda_in_factory", "batch_on_cuda"])
def test_tensors_put_on_cuda_are_refused_with_the_fix(
    models_dir: Path, trace_in_process: Tracer, factory: str
) -> None:
    with pytest.raises(SpecError) as e:
        _traced(trace_in_process, models_dir, factory)
    assert e.value.field == "MODEL_REF"
    said = str(e.value)
    assert f"{MODULE}:{factory} puts tensors on a CUDA device" in said
    assert "return them on the CPU" in said and "danlu.train moves" in said
