"""Dropout, and attention with dropout, are traced as a GPU runs them (``--target cuda``).

On a GPU ``F.dropout`` in training runs the fused ``native_dropout``, which keeps a one-byte
mask per element for the backward pass; on the CPU the tracer runs on, it multiplies by a
noise tensor of the input's dtype and keeps that (four bytes per element in fp32): every
``nn.Dropout`` was traced at four times its mask. ``F.scaled_dot_product_attention`` with
``dropout_p > 0`` runs a fused kernel on a GPU (the output and a log-sum-exp per row kept,
as without dropout) and the math composition on the CPU (the ``b x heads x s x s``
probabilities, their mask and the dropped probabilities kept): a GPT-2-small-sized model
with attention dropout 0.1 traced more than three times the activations of the same step
without it. ``--target cpu`` keeps the CPU's kernels, which it imitates.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from danlu.estimate.memory.trace_result import StepTrace, TraceRequest

torch = pytest.importorskip("torch")

MODULE = "fused_kernel_models"
FACTORIES = textwrap.dedent(
    """
    import torch
    import torch.nn.functional as F
    from torch import nn
    from torch.nn.functional import scaled_dot_product_attention

    WIDTH, SEQ, HEADS = 32, 16, 2


    class Dropped(nn.Module):
        def __init__(self, p):
            super().__init__()
            self.inner = nn.Linear(WIDTH, WIDTH)
            self.drop = nn.Dropout(p)
            self.outer = nn.Linear(WIDTH, 4)

        def forward(self, x):
            return self.outer(self.drop(self.inner(x)))


    def _classifier(model):
        def make_batch(b):
            return torch.randn(b, WIDTH), torch.randint(0, 4, (b,))

        def loss_fn(model, batch):
            return F.cross_entropy(model(batch[0]), batch[1])

        return model, make_batch, loss_fn


    def dropout():
        return _classifier(Dropped(0.1))


    def no_dropout():
        return _classifier(Dropped(0.0))


    class Attn(nn.Module):
        # named as many hand-written models name it: no "Attention" in its class name
        def __init__(self, p, keyword):
            super().__init__()
            self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
            self.p, self.keyword = p, keyword

        def forward(self, x):
            b, s, d = x.shape
            q, k, v = self.qkv(x).split(d, dim=2)
            q, k, v = (t.view(b, s, HEADS, d // HEADS).transpose(1, 2) for t in (q, k, v))
            if self.keyword:
                y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.p, is_causal=True)
            else:  # positionally, through a name imported from torch.nn.functional
                y = scaled_dot_product_attention(q, k, v, None, self.p, True)
            return y.transpose(1, 2).reshape(b, s, d).sum(dim=1)


    def _attention(model):
        def make_batch(b):
            return torch.randn(b, SEQ, WIDTH)

        def loss_fn(model, batch):
            return model(batch).pow(2).mean()

        return model, make_batch, loss_fn


    def attention_dropout():
        return _attention(Attn(0.1, keyword=True))


    def attention_dropout_positional():
        return _attention(Attn(0.1, keyword=False))


    def attention():
        return _attention(Attn(0.0, keyword=True))
    """
)

Tracer = Callable[[TraceRequest], list[StepTrace]]
BATCH = 64
WIDTH = 32


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The factories' module, in a folder of its own (removed from ``sys.path`` after)."""
    folder = tmp_path_factory.mktemp("fused_kernels")
    (folder / f"{MODULE}.py").write_text(FACTORIES)
    yield folder
    while str(folder) in sys.path:
        sys.path.remove(str(folder))
    sys.modules.pop(MODULE, None)


def _passes_peak(tracer: Tracer, folder: Path, factory: str, target: str = "cuda") -> int:
    """The live bytes at the peak of the forward and backward passes of a trace at
    :data:`BATCH` (the optimizer's step peaks higher for a model this small)."""
    req = TraceRequest(
        f"{MODULE}:{factory}",
        (BATCH,),
        target=target,  # type: ignore[arg-type]
        sys_path=(str(folder),),
    )
    (traced,) = tracer(req)
    return traced.phase_peaks["passes"]


def test_a_dropout_keeps_the_gpus_one_byte_mask(models_dir: Path, trace_in_process: Tracer) -> None:
    dropped = _passes_peak(trace_in_process, models_dir, "dropout")
    plain = _passes_peak(trace_in_process, models_dir, "no_dropout")
    assert dropped - plain == BATCH * WIDTH  # a bool per element (it was 4 bytes each)


def test_the_cpu_target_keeps_the_cpus_noise_tensor(
    models_dir: Path, trace_in_process: Tracer
) -> None:
    dropped = _passes_peak(trace_in_process, models_dir, "dropout", "cpu")
    plain = _passes_peak(trace_in_process, models_dir, "no_dropout", "cpu")
    assert dropped - plain == BATCH * WIDTH * 4  # fp32 noise, as the CPU's kernel keeps


@pytest.mark.parametrize("factory", ["attention_dropout", "attention_dropout_positional"])
def test_attention_dropout_is_the_fused_kernels(
    models_dir: Path, trace_in_process: Tracer, factory: str
) -> None:
    # the fused kernel keeps what it keeps without dropout (no s x s probabilities)
    with_dropout = _passes_peak(trace_in_process, models_dir, factory)
    assert with_dropout == _passes_peak(trace_in_process, models_dir, "attention")


def test_torchs_functions_are_restored_after_a_trace(
    models_dir: Path, trace_in_process: Tracer
) -> None:
    import torch.nn.functional as F

    dropout, attention = F.dropout, F.scaled_dot_product_attention
    _passes_peak(trace_in_process, models_dir, "attention_dropout")
    assert F.dropout is dropout
    assert F.scaled_dot_product_attention is attention
    # a name the model's module imported during the trace calls torch's function as it is
    module = sys.modules[MODULE]
    q = torch.ones(1, 1, 4, 8)
    out = module.scaled_dot_product_attention(q, q, q, dropout_p=0.0)
    assert torch.equal(out, q)
