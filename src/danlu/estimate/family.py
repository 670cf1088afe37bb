"""A model's family for the GPU-sharing interference model, read off its layers.

The interference model (``danlu.sched.policies.danlu_share``) predicts whether two jobs gain
by sharing a GPU from the *families* of their models (:data:`danlu.core.spec.MODEL_FAMILIES`),
the kinds of model Gavel measured in pairs: ResNet-18 on CIFAR-10 (``cnn-small``), ResNet-50
on ImageNet (``cnn-large``), a Transformer, an LSTM language model, a recommendation model,
CycleGAN (``gan``) and A3C (``rl``). A spec may name its family, or ask for ``auto``: the
memory tracer, which builds the model anyway, then summarises its layers
(:class:`ModelSummary`) and :func:`infer_family` maps the summary to a family by these rules,
first match wins:

1. a recurrent layer (``LSTM``, ``GRU``, ``RNN`` or their cells): ``lstm``;
2. an attention layer (a module whose class name contains ``Attention``, or PyTorch's
   ``Transformer*Layer``), or a step that calls ``F.scaled_dot_product_attention`` (a
   model's own ``Attn`` or ``SelfAttn`` module: hand-written GPTs were none of the
   families): ``transformer``;
3. transposed convolutions (generators) beside convolutions: ``gan``;
4. convolutions holding at least :data:`CONV_SHARE` of the parameters: ``cnn-large`` when a
   sample's activations take at least :data:`LARGE_CNN_ACTIVATIONS` bytes (ImageNet-sized
   inputs: what makes ResNet-50's step compute-bound where ResNet-18's CIFAR step is not),
   else ``cnn-small``;
5. embeddings holding at least :data:`EMBEDDING_SHARE` of the parameters: ``recommendation``;
6. anything else (an MLP, say): ``None``, and the interference model uses its median pair.

Reinforcement learning (``rl``) is not recognised: its networks look like small CNNs or MLPs;
such a job names its family. Torch-free: the tracer builds the summary in its subprocess.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

CONV_SHARE = 0.3
"""Least share of the parameters in convolutions for a CNN."""
EMBEDDING_SHARE = 0.5
"""Least share of the parameters in embedding tables for a recommendation model."""
LARGE_CNN_ACTIVATIONS = 64 * 2**20
"""Activation bytes per sample from which a CNN counts as ``cnn-large``: what its forward
and backward passes hold above the step's start, over the batch (as traced). Traced with
:func:`danlu.estimate.zoo.resnet` (basic blocks, width 64): ResNet-18-sized at 32 x 32
inputs (CIFAR, Gavel's ResNet-18) 9.0 MiB, at 64 x 64 21.5 MiB, at 224 x 224 (ImageNet)
231.4 MiB; ResNet-34-sized at 224 x 224 387.4 MiB."""

_RECURRENT = ("LSTM", "GRU", "RNN", "LSTMCell", "GRUCell", "RNNCell")
_TRANSFORMER_LAYERS = ("TransformerEncoderLayer", "TransformerDecoderLayer", "Transformer")
_CONV = ("Conv1d", "Conv2d", "Conv3d")
_TRANSPOSED = ("ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d")
_EMBEDDING = ("Embedding", "EmbeddingBag")


@dataclass(frozen=True)
class ModelSummary:
    """What the tracer saw of a model: its modules by class name, the parameters each class
    holds directly, and the activation bytes one sample keeps during the step."""

    modules: Mapping[str, int] = field(default_factory=dict)
    """Class name -> how many modules of that class (every module, containers too)."""
    parameters: Mapping[str, int] = field(default_factory=dict)
    """Class name -> parameters (elements) its modules hold directly."""
    activation_bytes_per_sample: float = 0.0
    attention_calls: int = 0
    """Calls of torch's ``scaled_dot_product_attention`` in the traced steps."""


def infer_family(summary: ModelSummary) -> str | None:
    """The family of the summarised model by the rules of this module, or ``None``."""
    modules = summary.modules
    if _has(modules, _RECURRENT):
        return "lstm"
    if (
        _has(modules, _TRANSFORMER_LAYERS)
        or any("Attention" in name for name in modules)
        or summary.attention_calls > 0
    ):
        return "transformer"
    total = sum(summary.parameters.values())
    conv = _held(summary.parameters, _CONV)
    if _has(modules, _TRANSPOSED) and _has(modules, _CONV):
        return "gan"
    if total > 0 and conv >= CONV_SHARE * total:
        if summary.activation_bytes_per_sample >= LARGE_CNN_ACTIVATIONS:
            return "cnn-large"
        return "cnn-small"
    if total > 0 and _held(summary.parameters, _EMBEDDING) >= EMBEDDING_SHARE * total:
        return "recommendation"
    return None


def _has(modules: Mapping[str, int], names: tuple[str, ...]) -> bool:
    return any(modules.get(name, 0) > 0 for name in names)


def _held(parameters: Mapping[str, int], names: tuple[str, ...]) -> int:
    return sum(parameters.get(name, 0) for name in names)
