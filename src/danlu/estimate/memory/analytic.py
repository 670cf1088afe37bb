"""Closed-form training memory of GPT-style transformers, for models too large to trace.

* parameters: ``V*h + s*h + L*(12h^2 + 13h) + 2h`` (token and learned position embeddings, per
  layer QKV/projection/MLP weights and biases and two LayerNorms, final LayerNorm; the LM head
  is tied to the token embedding);
* activations per layer, Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
  Transformer Models", sections 4.1-4.2), with 16-bit activations:
  ``s*b*h*(34 + 5*a*s/h)`` without recomputation, ``34*s*b*h`` with selective recomputation
  (attention scores recomputed), ``2*s*b*h`` with full recomputation (only the layer input
  kept), with tensor parallelism ``t`` and sequence parallelism as in their Table 2. In fp32
  the 2-byte tensors double (dropout masks stay 1 byte). Flash attention removes the
  ``a*s^2`` terms. The output layer adds ``4*s*b*h`` (the final LayerNorm's input and the
  output projection's input, two 16-bit tensors; ``8*s*b*h`` in fp32) and ``6*s*b*V``
  (16-bit logits and their fp32 softmax; ``8*s*b*V`` in fp32), divided by ``t``;
* model states per parameter (Rajbhandari et al. 2020, ZeRO, section 3): weights ``p``,
  gradients ``g`` and optimizer state ``K`` bytes; mixed precision with fp32 master weights
  has ``p = g = 2`` and ``K = 4 + optimizer moments`` (Adam: ``K = 12``); ZeRO stage 1 divides
  ``K`` by the data-parallel degree ``N_d``, stage 2 ``g + K``, stage 3 ``p + g + K``.
"""

from __future__ import annotations

from dataclasses import dataclass

from danlu.core.errors import SpecError
from danlu.core.spec import MAX_BATCH, MAX_GPUS
from danlu.core.values import MAX_INT, quoted
from danlu.estimate.checks import check_bool, check_count, check_finite
from danlu.estimate.memory.model import largest_within
from danlu.estimate.memory.trace_result import precision_name

OPTIMIZER_MOMENTS: dict[str, int] = {
    "sgd": 0,
    "sgd-momentum": 1,
    "adam": 2,
    "adamw": 2,
    "adagrad": 1,
    "rmsprop": 1,
}
"""fp32 moment tensors per parameter kept by each optimizer."""

MAX_FRAGMENTATION = 100.0
"""The largest ``fragmentation`` factor :func:`transformer_memory` takes (measured ones are
about 1.0 to 1.5; ``1e308`` made every prediction infinite, an OverflowError in ``int``)."""


@dataclass(frozen=True)
class TransformerConfig:
    """A GPT-style decoder: layers, hidden size, heads, sequence length, vocabulary.

    Each is an integer in ``1..MAX_INT`` (2**62): beyond it the memory formulas (products
    of up to four of them, in floats) overflowed with a bare OverflowError."""

    layers: int
    hidden: int
    heads: int
    seq: int
    vocab: int

    def __post_init__(self) -> None:
        for name in ("layers", "hidden", "heads", "seq", "vocab"):
            check_count(name, getattr(self, name), MAX_INT)
        if self.hidden % self.heads:
            raise SpecError("heads", f"hidden ({self.hidden}) must be divisible by heads")

    @property
    def parameters(self) -> int:
        """Parameter count (tied LM head)."""
        h, v, s, n = self.hidden, self.vocab, self.seq, self.layers
        return v * h + s * h + n * (12 * h * h + 13 * h) + 2 * h


@dataclass(frozen=True)
class TransformerMemory:
    """Per-GPU training memory of a :class:`TransformerConfig` (bytes).

    ``predict(b)`` (the :class:`MemoryModel` protocol) adds ``activation_bytes_per_sample*b``
    to the model states, times ``fragmentation``, plus ``overhead_bytes`` (CUDA context and
    cuBLAS workspaces of the GPU, when one was given). Batch sizes lie within
    ``1..MAX_BATCH`` (2**30), the largest a job spec, the tracer or the throughput model
    takes.
    """

    config: TransformerConfig
    parameter_bytes: int
    gradient_bytes: int
    optimizer_bytes: int
    activation_bytes_per_sample: int
    overhead_bytes: int = 0
    fragmentation: float = 1.0

    @property
    def state_bytes(self) -> int:
        """Weights, gradients and optimizer state."""
        return self.parameter_bytes + self.gradient_bytes + self.optimizer_bytes

    def activation_bytes(self, batch_size: int) -> int:
        """Activations kept for the backward pass at ``batch_size``; :class:`SpecError` as
        :meth:`predict` gives."""
        check_count("batch_size", batch_size, MAX_BATCH)  # None: a bare TypeError
        return self.activation_bytes_per_sample * batch_size

    def predict(self, batch_size: int) -> int:
        """Peak bytes per GPU at ``batch_size``; :class:`SpecError` unless it is an integer
        in ``1..MAX_BATCH`` (2.5 and a negative batch were answered, NaN raised a bare
        ValueError, ``10**400`` a bare OverflowError)."""
        check_count("batch_size", batch_size, MAX_BATCH)
        logical = self.state_bytes + self.activation_bytes(batch_size)
        return int(logical * self.fragmentation) + self.overhead_bytes

    def max_batch(self, limit_bytes: int, margin_bytes: int = 0) -> int | None:
        """Largest b with ``predict(b) <= limit_bytes - margin_bytes`` (None if b=1 does not),
        at most ``MAX_BATCH``: an answer equal to it means "at least this many", as
        :attr:`FittedMemoryModel.max_batch_cap` does.

        Raises :class:`SpecError` unless ``limit_bytes`` and ``margin_bytes`` are finite
        numbers >= 0 (NaN and inf raised ValueError and OverflowError). The answer is found
        by bisection around the closed-form estimate: stepping by one from it never ended
        for a limit of 10**30 bytes, where ``predict`` rounds to the same float for many
        consecutive batches."""
        check_finite("limit_bytes", limit_bytes, positive=False, what="a number of bytes")
        check_finite("margin_bytes", margin_bytes, positive=False, what="a number of bytes")
        budget = limit_bytes - margin_bytes
        if self.predict(1) > budget:
            return None
        if self.activation_bytes_per_sample <= 0 or self.predict(MAX_BATCH) <= budget:
            return MAX_BATCH  # every batch it takes fits
        guess = max(
            1,
            int((budget - self.overhead_bytes) / self.fragmentation - self.state_bytes)
            // max(1, self.activation_bytes_per_sample),
        )
        # invariant: predict(lo) <= budget < predict(hi)
        lo, hi, step = 1, min(guess, MAX_BATCH), 1
        while self.predict(hi) <= budget:
            lo, hi, step = hi, min(hi + step, MAX_BATCH), step * 2
        return largest_within(self.predict, budget, lo, hi)


def activation_bytes_per_layer(
    cfg: TransformerConfig,
    batch_size: int,
    *,
    recompute: str = "none",
    tensor_parallel: int = 1,
    sequence_parallel: bool = False,
    bytes_per_value: int = 2,
    flash_attention: bool = False,
) -> float:
    """Korthikanti et al.'s activation memory of one layer (bytes).

    :class:`SpecError` unless ``batch_size`` lies within ``1..MAX_BATCH`` and
    ``tensor_parallel`` within ``1..MAX_GPUS``."""
    check_count("batch_size", batch_size, MAX_BATCH)
    check_count("tensor_parallel", tensor_parallel, MAX_GPUS)  # 0: ZeroDivisionError
    sequence_parallel = check_bool("sequence_parallel", sequence_parallel)  # "no" was truthy
    flash_attention = check_bool("flash_attention", flash_attention)
    s, b, h, a, t = cfg.seq, batch_size, cfg.hidden, cfg.heads, tensor_parallel
    if recompute not in ("none", "selective", "full"):
        raise SpecError("recompute", f"{recompute!r}: use none, selective or full")
    scale = bytes_per_value / 2
    if recompute == "full":
        return 2 * s * b * h * scale / (t if sequence_parallel else 1)
    # 34 = 32 bytes of 16-bit tensors + 2 one-byte dropout masks (per s*b*h); without sequence
    # parallelism 10 of them (LayerNorms, dropouts, block inputs) are not split across t
    linear = (32 * scale + 2) / t if sequence_parallel else 8 * scale + 2 + 24 * scale / t
    attention = 0.0
    if recompute == "none" and not flash_attention:
        attention = (4 * scale + 1) * a * s / (h * t)  # scores, softmax/dropout out, mask
    elif flash_attention:
        attention = 4 * a / (h * t)  # fp32 log-sum-exp per head and position
    return s * b * h * (linear + attention)


def transformer_memory(
    cfg: TransformerConfig,
    *,
    precision: str = "bf16",
    optimizer: str = "adamw",
    master_weights: bool = True,
    recompute: str = "none",
    zero_stage: int = 0,
    data_parallel: int = 1,
    tensor_parallel: int = 1,
    sequence_parallel: bool = False,
    flash_attention: bool = False,
    overhead_bytes: int = 0,
    fragmentation: float = 1.0,
) -> TransformerMemory:
    """Model-state and activation memory per GPU.

    ``precision`` (in any case, as ``danlu.train`` reads it: ``BF16``, ``16``) fp32 keeps
    fp32 weights and gradients; fp16/bf16 with ``master_weights`` keeps 16-bit weights and
    gradients plus an fp32 master copy in the optimizer state (the ZeRO paper's
    mixed-precision setting); without ``master_weights`` (PyTorch autocast) weights and
    gradients stay fp32 and only activations are 16-bit. The switches must be bools;
    ``data_parallel`` and ``tensor_parallel`` lie within ``1..MAX_GPUS`` (the most GPUs a
    job may ask for), ``fragmentation`` within ``(0, MAX_FRAGMENTATION]``.
    """
    precision = precision_name(precision)  # as danlu.train spells it: "BF16" too
    master_weights = check_bool("master_weights", master_weights)  # "no" was truthy
    # not a string: AttributeError on .lower(); a bool passed as stage 0 or 1; a string
    # fragmentation raised a bare TypeError
    if not isinstance(optimizer, str) or optimizer.lower() not in OPTIMIZER_MOMENTS:
        raise SpecError(
            "--optimizer", f"{optimizer!r}: use one of {', '.join(sorted(OPTIMIZER_MOMENTS))}"
        )
    if isinstance(zero_stage, bool) or zero_stage not in (0, 1, 2, 3):
        raise SpecError("zero_stage", f"must be 0, 1, 2 or 3, got {zero_stage!r}")
    # 10**400 GPUs raised a bare OverflowError in the divisions by them
    check_count("data_parallel", data_parallel, MAX_GPUS)
    check_count("tensor_parallel", tensor_parallel, MAX_GPUS)
    if check_finite("fragmentation", fragmentation, positive=True) > MAX_FRAGMENTATION:
        raise SpecError(
            "fragmentation",
            f"must be at most {MAX_FRAGMENTATION:g} (reserved bytes per logical byte; "
            f"measured ones are about 1.0 to 1.5), got {quoted(fragmentation)}",
        )
    if (
        isinstance(overhead_bytes, bool)
        or not isinstance(overhead_bytes, int)
        or overhead_bytes < 0
    ):
        raise SpecError(
            "overhead_bytes", f"must be a whole number of bytes >= 0, got {overhead_bytes!r}"
        )
    moments = 4 * OPTIMIZER_MOMENTS[optimizer.lower()]
    mixed = precision != "fp32"
    if mixed and master_weights:
        p, g, k = 2.0, 2.0, 4.0 + moments
    else:
        p, g, k = 4.0, 4.0, float(moments)
    n = data_parallel
    if zero_stage >= 1:
        k /= n
    if zero_stage >= 2:
        g /= n
    if zero_stage >= 3:
        p /= n
    params = cfg.parameters / tensor_parallel
    act_bytes = 2 if mixed else 4
    per_layer = activation_bytes_per_layer(
        cfg,
        1,
        recompute=recompute,
        tensor_parallel=tensor_parallel,
        sequence_parallel=sequence_parallel,
        bytes_per_value=act_bytes,
        flash_attention=flash_attention,
    )
    # the final LayerNorm's and the output projection's inputs, the logits, their fp32 softmax
    hidden_part = 2 * act_bytes * cfg.seq * cfg.hidden
    output = (hidden_part + (act_bytes + 4) * cfg.seq * cfg.vocab) / tensor_parallel
    return TransformerMemory(
        config=cfg,
        parameter_bytes=int(params * p),
        gradient_bytes=int(params * g),
        optimizer_bytes=int(params * k),
        activation_bytes_per_sample=int(cfg.layers * per_layer + output),
        overhead_bytes=overhead_bytes,
        fragmentation=fragmentation,
    )
