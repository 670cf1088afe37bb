"""A small model zoo for examples, tests and benchmarks, written with torch alone.

Every public factory takes no arguments and returns ``(model, make_batch, loss_fn)``:
``make_batch(b)`` builds the inputs for batch size ``b`` and ``loss_fn(model, batch)`` returns a
scalar loss. Refer to them as ``danlu.estimate.zoo:gpt2_124m``. Parameterised builders
(:func:`mlp`, :func:`resnet`, :func:`gpt2`, :func:`bert`, :func:`vit`) make other sizes.

This module imports torch; nothing else in :mod:`danlu.estimate` imports it at import time.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

Batch = Any
ZooEntry = tuple[nn.Module, Callable[[int], Batch], Callable[[nn.Module, Batch], Tensor]]


def _classify_loss(model: nn.Module, batch: tuple[Tensor, Tensor]) -> Tensor:
    x, y = batch
    return F.cross_entropy(model(x), y)


def _lm_loss(model: nn.Module, batch: tuple[Tensor, Tensor]) -> Tensor:
    x, y = batch
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))


# ----------------------------------------------------------------------------- MLP
def mlp(in_features: int = 784, hidden: int = 1024, depth: int = 3, classes: int = 10) -> ZooEntry:
    """A ReLU multi-layer perceptron classifier."""
    layers: list[nn.Module] = []
    width = in_features
    for _ in range(depth):
        layers += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    layers.append(nn.Linear(width, classes))
    model = nn.Sequential(*layers)

    def make_batch(b: int) -> tuple[Tensor, Tensor]:
        return torch.randn(b, in_features), torch.randint(0, classes, (b,))

    return model, make_batch, _classify_loss


# ----------------------------------------------------------------------------- ResNet
class _BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.short(x))


class ResNet(nn.Module):
    """A ResNet-style CNN with basic blocks (ResNet-18 is ``blocks=(2, 2, 2, 2)``)."""

    def __init__(
        self, blocks: tuple[int, ...], width: int = 64, classes: int = 10, stem_stride: int = 1
    ) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 3, stem_stride, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU()
        )
        stages: list[nn.Module] = []
        cin = width
        for i, n in enumerate(blocks):
            cout = width * 2**i
            for j in range(n):
                stages.append(_BasicBlock(cin, cout, 2 if (j == 0 and i > 0) else 1))
                cin = cout
        self.stages = nn.Sequential(*stages)
        self.head = nn.Linear(cin, classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.stages(self.stem(x))
        out: Tensor = self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))
        return out


def resnet(
    blocks: tuple[int, ...] = (1, 1, 1), width: int = 16, image: int = 32, classes: int = 10
) -> ZooEntry:
    """A ResNet-style CNN on ``image x image`` RGB inputs."""
    model = ResNet(blocks, width, classes)

    def make_batch(b: int) -> tuple[Tensor, Tensor]:
        return torch.randn(b, 3, image, image), torch.randint(0, classes, (b,))

    return model, make_batch, _classify_loss


# ----------------------------------------------------------------------------- transformers
class _Attention(nn.Module):
    def __init__(self, dim: int, heads: int, causal: bool, dropout: float) -> None:
        super().__init__()
        self.heads = heads
        self.causal = causal
        self.dropout = dropout
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        shape = (b, s, self.heads, d // self.heads)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=self.causal)
        out: Tensor = self.proj(y.transpose(1, 2).reshape(b, s, d))
        return out


class _Block(nn.Module):
    def __init__(self, dim: int, heads: int, causal: bool, dropout: float) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = _Attention(dim, heads, causal, dropout)
        self.ln2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.out = nn.Linear(4 * dim, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.drop(self.attn(self.ln1(x)))
        out: Tensor = x + self.drop(self.out(F.gelu(self.fc(self.ln2(x)))))
        return out


class Transformer(nn.Module):
    """A pre-LayerNorm transformer: GPT-2-style (causal, tied LM head) or BERT-style encoder.

    ``checkpointing=True`` recomputes each block in the backward pass
    (``torch.utils.checkpoint``).
    """

    def __init__(
        self,
        vocab: int,
        seq: int,
        layers: int,
        dim: int,
        heads: int,
        causal: bool,
        dropout: float = 0.0,
        classes: int | None = None,
    ) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(seq, dim)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(_Block(dim, heads, causal, dropout) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.checkpointing = False
        self.head: nn.Module | None = None
        if classes is not None:
            self.head = nn.Linear(dim, classes)
        for name, p in self.named_parameters():
            if name.endswith("out.weight") or name.endswith("proj.weight"):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * layers))

    def forward(self, idx: Tensor) -> Tensor:
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.blocks:
            if self.checkpointing and self.training:
                x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        x = self.ln_f(x)
        if self.head is not None:
            out: Tensor = self.head(x[:, 0])
            return out
        return F.linear(x, self.wte.weight)  # tied LM head


def gpt2(
    layers: int = 12,
    dim: int = 768,
    heads: int = 12,
    seq: int = 1024,
    vocab: int = 50257,
    dropout: float = 0.0,
) -> ZooEntry:
    """A GPT-2-style causal decoder trained as a language model on random tokens."""
    model = Transformer(vocab, seq, layers, dim, heads, causal=True, dropout=dropout)

    def make_batch(b: int) -> tuple[Tensor, Tensor]:
        return torch.randint(0, vocab, (b, seq)), torch.randint(0, vocab, (b, seq))

    return model, make_batch, _lm_loss


def bert(
    layers: int = 12,
    dim: int = 768,
    heads: int = 12,
    seq: int = 512,
    vocab: int = 30522,
    classes: int = 2,
    dropout: float = 0.0,
) -> ZooEntry:
    """A BERT-style bidirectional encoder with a sequence-classification head."""
    model = Transformer(
        vocab, seq, layers, dim, heads, causal=False, dropout=dropout, classes=classes
    )

    def make_batch(b: int) -> tuple[Tensor, Tensor]:
        return torch.randint(0, vocab, (b, seq)), torch.randint(0, classes, (b,))

    return model, make_batch, _classify_loss


class ViT(nn.Module):
    """A small vision transformer: patch embedding, encoder blocks, class token head."""

    def __init__(
        self, image: int, patch: int, layers: int, dim: int, heads: int, classes: int
    ) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch, patch)
        n = (image // patch) ** 2
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.zeros(1, n + 1, dim))
        self.blocks = nn.Sequential(*(_Block(dim, heads, False, 0.0) for _ in range(layers)))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.size(0), -1, -1), x], dim=1) + self.pos
        out: Tensor = self.head(self.ln(self.blocks(x))[:, 0])
        return out


def vit(
    image: int = 32,
    patch: int = 4,
    layers: int = 4,
    dim: int = 192,
    heads: int = 3,
    classes: int = 10,
) -> ZooEntry:
    """A ViT-style image classifier."""
    model = ViT(image, patch, layers, dim, heads, classes)

    def make_batch(b: int) -> tuple[Tensor, Tensor]:
        return torch.randn(b, 3, image, image), torch.randint(0, classes, (b,))

    return model, make_batch, _classify_loss


# ----------------------------------------------------------------------------- presets
def mlp_small() -> ZooEntry:
    """MLP 784-1024-1024-1024-10 (about 2.9M parameters)."""
    return mlp()


def mlp_large() -> ZooEntry:
    """MLP 4096 wide, 6 hidden layers (about 100M parameters)."""
    return mlp(in_features=4096, hidden=4096, depth=6, classes=1000)


def resnet_tiny() -> ZooEntry:
    """ResNet-style CNN, 3 stages of one basic block, width 16, 32x32 images."""
    return resnet((1, 1, 1), width=16, image=32)


def resnet18() -> ZooEntry:
    """ResNet-18-sized CNN (blocks 2-2-2-2, width 64) on 64x64 images, 100 classes."""
    return resnet((2, 2, 2, 2), width=64, image=64, classes=100)


def gpt2_tiny() -> ZooEntry:
    """GPT-2-style decoder: 2 layers, width 128, 4 heads, sequence 64, vocabulary 1000."""
    return gpt2(layers=2, dim=128, heads=4, seq=64, vocab=1000)


def gpt2_124m() -> ZooEntry:
    """GPT-2 small-sized decoder (124M parameters: 12 layers, 768 wide, 12 heads, seq 1024)."""
    return gpt2()


def gpt2_medium() -> ZooEntry:
    """GPT-2 medium-sized decoder (about 350M parameters: 24 layers, 1024 wide)."""
    return gpt2(layers=24, dim=1024, heads=16)


def bert_tiny() -> ZooEntry:
    """BERT-style encoder: 2 layers, width 128, 2 heads, sequence 64, vocabulary 1000."""
    return bert(layers=2, dim=128, heads=2, seq=64, vocab=1000)


def bert_base() -> ZooEntry:
    """BERT-base-sized encoder (110M parameters, sequence 512)."""
    return bert()


def vit_tiny() -> ZooEntry:
    """ViT-style classifier: 4 layers, width 192, 3 heads, 32x32 images with 4x4 patches."""
    return vit()


PRESETS: dict[str, Callable[[], ZooEntry]] = {
    f.__name__: f
    for f in (
        mlp_small,
        mlp_large,
        resnet_tiny,
        resnet18,
        gpt2_tiny,
        gpt2_124m,
        gpt2_medium,
        bert_tiny,
        bert_base,
        vit_tiny,
    )
}
"""Every preset factory by name (``danlu.estimate.zoo:<name>``)."""
