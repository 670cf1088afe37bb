"""Models as users bring them, traced: frozen parts and LoRA-style adapters (gradients and
optimizer state for the trainable parameters only), tied weights (one parameter, counted
once), a forward taking keyword arguments, outputs in dicts, tuples and named tuples, a
model built on the ``meta`` device, and a ``torch.compile``'d model (traced as its eager
program, with a warning saying so: the figures were given without a word that they were
not the compiled step's). A sparse gradient (``nn.Embedding(sparse=True)``) is an error on
``MODEL_REF`` saying what to change: it failed with torch's bare "Cannot access storage of
SparseTensorImpl"."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from danlu.core.errors import SpecError
from danlu.estimate.memory.trace_result import StepTrace, TraceRequest

pytest.importorskip("torch")

MODULE = "user_model_shapes"
FACTORIES = textwrap.dedent(
    """
    import collections

    import torch
    from torch import nn


    def _batch(b):
        return torch.randn(b, 64), torch.randint(0, 10, (b,))


    def _loss(model, batch):
        return nn.functional.cross_entropy(model(batch[0]), batch[1])


    def _mlp():
        return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                             nn.Linear(256, 10))


    def full():
        return _mlp(), _batch, _loss


    def frozen():
        net = _mlp()
        for layer in (net[0], net[2]):
            for p in layer.parameters():
                p.requires_grad_(False)
        return net, _batch, _loss


    class LoRALinear(nn.Module):
        def __init__(self, base, rank=4):
            super().__init__()
            self.base = base.requires_grad_(False)
            self.a = nn.Parameter(torch.randn(rank, base.in_features) * 0.01)
            self.b = nn.Parameter(torch.zeros(base.out_features, rank))

        def forward(self, x):
            return self.base(x) + (x @ self.a.t()) @ self.b.t()


    def lora():
        net = _mlp()
        net[0], net[2] = LoRALinear(net[0]), LoRALinear(net[2])
        net[4].requires_grad_(False)
        return net, _batch, _loss


    class Tied(nn.Module):
        def __init__(self, tie):
            super().__init__()
            self.emb = nn.Embedding(500, 32)
            self.head = nn.Linear(32, 500, bias=False)
            if tie:
                self.head.weight = self.emb.weight

        def forward(self, tokens):
            return self.head(torch.relu(self.emb(tokens)))


    def _lm(tie):
        def make_batch(b):
            return torch.randint(0, 500, (b, 8)), torch.randint(0, 500, (b, 8))

        def loss_fn(model, batch):
            return nn.functional.cross_entropy(model(batch[0]).flatten(0, 1), batch[1].flatten())

        return Tied(tie), make_batch, loss_fn


    def tied():
        return _lm(True)


    def untied():
        return _lm(False)


    Out = collections.namedtuple("Out", ["logits", "aux"])


    class Keywords(nn.Module):
        def __init__(self, kind):
            super().__init__()
            self.kind = kind
            self.net = _mlp()

        def forward(self, x, *, scale=1.0, mask=None):
            y = self.net(x) * scale * mask
            if self.kind == "dict":
                return {"logits": y, "note": "not a tensor"}
            if self.kind == "tuple":
                return y, y.sum()
            return Out(y, y.sum())


    def _keywords(kind):
        def make_batch(b):
            return {"x": torch.randn(b, 64), "mask": torch.ones(b, 10)}, torch.randint(0, 10, (b,))

        def loss_fn(model, batch):
            out = model(**batch[0], scale=2.0)
            logits = out["logits"] if kind == "dict" else out[0]
            return nn.functional.cross_entropy(logits, batch[1])

        return Keywords(kind), make_batch, loss_fn


    def dict_out():
        return _keywords("dict")


    def tuple_out():
        return _keywords("tuple")


    def namedtuple_out():
        return _keywords("namedtuple")


    def on_meta():
        net = _mlp().to("meta")

        def make_batch(b):
            return torch.randn(b, 64, device="meta"), torch.randint(0, 10, (b,), device="meta")

        return net, make_batch, _loss


    def compiled():
        return torch.compile(_mlp()), _batch, _loss


    def sparse_embedding():
        def make_batch(b):
            return torch.randint(0, 100, (b, 4))

        def loss_fn(model, tokens):
            return model(tokens).pow(2).mean()

        return nn.Embedding(100, 8, sparse=True), make_batch, loss_fn


    def compiled_in_place():
        net = _mlp()
        net.compile()
        return net, _batch, _loss
    """
)
PARAMETERS = 64 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10
"""The parameters of ``_mlp``."""

Tracer = Callable[[TraceRequest], list[StepTrace]]


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The factories' module, in a folder of its own (removed from ``sys.path`` after)."""
    folder = tmp_path_factory.mktemp("user_models")
    (folder / f"{MODULE}.py").write_text(FACTORIES)
    yield folder
    while str(folder) in sys.path:
        sys.path.remove(str(folder))
    sys.modules.pop(MODULE, None)


def _traced(tracer: Tracer, folder: Path, factory: str, **options: object) -> StepTrace:
    req = TraceRequest(f"{MODULE}:{factory}", (4,), sys_path=(str(folder),), **options)  # type: ignore[arg-type]
    return tracer(req)[0]


@pytest.mark.parametrize(
    ("factory", "parameters", "trainable"),
    [
        ("full", PARAMETERS, PARAMETERS),
        ("frozen", PARAMETERS, 256 * 10 + 10),
        ("lora", PARAMETERS + 4 * (64 + 256) + 4 * (256 + 256), 4 * (64 + 256) + 4 * (256 + 256)),
    ],
)
def test_only_trainable_parameters_get_gradients_and_optimizer_state(
    models_dir: Path, trace_in_process: Tracer, factory: str, parameters: int, trainable: int
) -> None:
    tr = _traced(trace_in_process, models_dir, factory, data_parallel=True)
    assert tr.breakdown["parameters"] == 4 * parameters  # frozen ones are held all the same
    assert tr.breakdown["optimizer_state"] == 2 * 4 * trainable  # adamw: two moments
    assert tr.breakdown["ddp_buckets"] == 4 * trainable  # DDP buckets trainable ones only


def test_a_tied_weight_is_one_parameter(models_dir: Path, trace_in_process: Tracer) -> None:
    tied = _traced(trace_in_process, models_dir, "tied")
    untied = _traced(trace_in_process, models_dir, "untied")
    assert tied.breakdown["parameters"] == 4 * 500 * 32
    assert untied.breakdown["parameters"] == 2 * 4 * 500 * 32
    assert tied.breakdown["optimizer_state"] == 2 * 4 * 500 * 32
    assert sum(tied.module_parameters.values()) == 500 * 32


@pytest.mark.parametrize("factory", ["dict_out", "tuple_out", "namedtuple_out"])
def test_keyword_arguments_and_structured_outputs(
    models_dir: Path, trace_in_process: Tracer, factory: str
) -> None:
    tr = _traced(trace_in_process, models_dir, factory)
    assert tr.breakdown["parameters"] == 4 * PARAMETERS
    assert tr.breakdown["optimizer_state"] == 2 * 4 * PARAMETERS
    assert tr.warnings == []


def test_a_model_on_meta_traces_as_on_cpu(models_dir: Path, trace_in_process: Tracer) -> None:
    meta = _traced(trace_in_process, models_dir, "on_meta")
    cpu = _traced(trace_in_process, models_dir, "full")
    assert (meta.peak_logical_bytes, meta.breakdown) == (cpu.peak_logical_bytes, cpu.breakdown)


@pytest.mark.parametrize("factory", ["compiled", "compiled_in_place"])
def test_a_compiled_model_is_traced_eagerly_with_a_warning(
    models_dir: Path, trace_in_process: Tracer, factory: str
) -> None:
    from danlu.estimate.memory.user_program import compiled_warning

    compiled = _traced(trace_in_process, models_dir, factory)
    eager = _traced(trace_in_process, models_dir, "full")
    assert compiled.peak_logical_bytes == eager.peak_logical_bytes
    assert compiled.warnings == [compiled_warning(["the model"])]
    assert "torch.compile'd: the model;" in compiled.warnings[0]
    assert "eager" in compiled.warnings[0]
    assert eager.warnings == []


def test_a_sparse_gradient_is_a_clear_model_ref_error(
    models_dir: Path, trace_in_process: Tracer
) -> None:
    with pytest.raises(SpecError) as caught:
        _traced(trace_in_process, models_dir, "sparse_embedding", optimizer="sgd")
    assert caught.value.field == "MODEL_REF"
    message = caught.value.message
    assert f"{MODULE}:sparse_embedding makes a sparse tensor" in message
    assert "sparse=False" in message  # the fix


def _make_batch(b: int) -> object:
    return b


def _loss_fn(model: object, batch: object) -> object:
    return batch


@pytest.mark.parametrize(
    ("shape", "said"),
    [
        ("list", "it returned a list of 3 (Linear, function, function)"),
        ("pair", "it returned a tuple of 2 (Linear, function)"),
        ("number-loss", "it returned a tuple of 3 (Linear, function, int)"),
        ("model", "it returned a Linear"),
    ],
)
def test_a_factory_returning_something_else_is_told_what_it_returned(shape: str, said: str) -> None:
    """The refusal said what the factory must return, not what it did."""
    import torch

    from danlu.estimate.memory import steps

    model = torch.nn.Linear(2, 2)
    returned = {
        "list": [model, _make_batch, _loss_fn],
        "pair": (model, _make_batch),
        "number-loss": (model, _make_batch, 3),
        "model": model,
    }[shape]
    with pytest.raises(SpecError) as caught:
        steps.build(lambda: returned, "m:f")
    assert caught.value.field == "MODEL_REF"
    assert caught.value.message.startswith("m:f must return (model, make_batch, loss_fn)")
    assert caught.value.message.endswith(said)
