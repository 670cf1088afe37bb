"""Torch's fused GPU kernels in a trace on the CPU (imports torch: tracer subprocess only).

A few ``torch.nn.functional`` calls choose their kernel by device, and keep other tensors for
the backward pass on a GPU than on the CPU the tracer runs on:

* ``F.dropout`` in training: on a GPU the fused ``native_dropout``, which keeps a one-byte
  mask per element; on the CPU a multiplication by a noise tensor of the input's dtype, which
  it keeps (four bytes per element in fp32). Every ``nn.Dropout`` of a model was traced at
  four times its mask: 629 MB more than no dropout at all for a GPT-2-small-sized model at
  batch 8 (25 dropouts of 8 x 1024 x 768), where the GPU keeps 157 MB.
* ``F.scaled_dot_product_attention`` with ``dropout_p > 0``: on a GPU a fused kernel (flash
  or memory-efficient attention) that keeps the output and one log-sum-exp per row, and draws
  the dropout mask again in the backward pass; on the CPU the math composition, which keeps
  the ``batch x heads x seq x seq`` probabilities, their dropout mask and the dropped
  probabilities. The same GPT-2-small-sized model with attention dropout 0.1 traced 21.7 GB
  of activations at batch 8, where its step without dropout traced 6.5 GB.

:class:`FusedKernelWatch` traces both as the GPU runs them for ``--target cuda`` (the CPU's
``native_dropout`` keeps the GPU's mask; the CPU's fused attention, called without dropout,
the GPU's output and log-sum-exp: a fake tensor has no values to drop), and counts the
attention calls, which tell a model's attention layers whatever its classes are named
(:func:`danlu.estimate.family.infer_family`: a hand-written GPT's ``Attn`` module read as
no family). ``--target cpu`` keeps the CPU's kernels, as it imitates them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F

ATTENTION_DROPOUT_POSITION = 4
"""``dropout_p``'s place among ``scaled_dot_product_attention``'s positional arguments
(``query, key, value, attn_mask, dropout_p, is_causal``, as ``nn.MultiheadAttention`` passes
them)."""

_active: FusedKernelWatch | None = None
"""The watch of the trace running now (None: calls pass through unchanged)."""


class FusedKernelWatch:
    """The ``F.dropout`` and ``F.scaled_dot_product_attention`` calls of a traced step.

    While :meth:`watching`, every call through ``torch.nn.functional`` (a model's ``F.``
    calls and the names its module imported from there meanwhile, ``nn.Dropout``,
    ``nn.MultiheadAttention`` and the ``nn.Transformer*Layer`` built on it) goes through
    this watch: attention calls are counted in :attr:`attention_calls`, and with ``fused``
    both run as a GPU's fused kernels run them (the module's docstring)."""

    def __init__(self, fused: bool) -> None:
        self.fused = fused
        self.attention_calls = 0
        """Calls of ``scaled_dot_product_attention`` so far."""

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        """Route ``F.dropout`` and ``F.scaled_dot_product_attention`` through this watch
        (torch's own functions restored after; a reference the model's module took meanwhile
        calls torch's function unchanged once no watch is active)."""
        global _active
        dropout, attention = F.dropout, F.scaled_dot_product_attention
        previous = _active
        _active = self
        F.dropout = _routed(dropout, FusedKernelWatch.dropout)
        F.scaled_dot_product_attention = _routed(attention, FusedKernelWatch.attention)
        try:
            yield
        finally:
            F.dropout, F.scaled_dot_product_attention = dropout, attention
            _active = previous

    def dropout(self, original: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        """``F.dropout(input, p=0.5, training=True, inplace=False)``: with :attr:`fused`, a
        training call that a GPU runs as ``native_dropout`` (not in place, ``0 < p < 1``,
        elements to drop) runs so here too."""
        bound = _DROPOUT_DEFAULTS | dict(zip(_DROPOUT_ARGS, args, strict=False)) | kwargs
        tensor, p = bound.get("input"), bound.get("p")
        if (
            self.fused
            and bound.get("training") is True
            and bound.get("inplace") is False
            and isinstance(tensor, torch.Tensor)
            and isinstance(p, int | float)
            and 0 < p < 1
            and tensor.numel() > 0
        ):
            return torch.native_dropout(tensor, float(p), True)[0]
        return original(*args, **kwargs)

    def attention(self, original: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        """``F.scaled_dot_product_attention``: counted, and with :attr:`fused` its dropout
        left to the GPU's fused kernel (``dropout_p`` 0 in the trace)."""
        self.attention_calls += 1
        if self.fused:
            if len(args) > ATTENTION_DROPOUT_POSITION:
                at = ATTENTION_DROPOUT_POSITION
                args = (*args[:at], 0.0, *args[at + 1 :])
            elif "dropout_p" in kwargs:
                kwargs = {**kwargs, "dropout_p": 0.0}
        return original(*args, **kwargs)


_DROPOUT_ARGS = ("input", "p", "training", "inplace")
_DROPOUT_DEFAULTS: dict[str, Any] = {"p": 0.5, "training": True, "inplace": False}


def _routed(
    original: Callable[..., Any],
    route: Callable[[FusedKernelWatch, Callable[..., Any], Any, Any], Any],
) -> Callable[..., Any]:
    """``original`` (one of torch's functions) calling ``route`` of the active
    :class:`FusedKernelWatch`, or straight through when none is."""

    def routed(*args: Any, **kwargs: Any) -> Any:
        watch = _active
        if watch is None:
            return original(*args, **kwargs)
        return route(watch, original, args, kwargs)

    routed.__name__ = getattr(original, "__name__", "routed")
    routed.__doc__ = original.__doc__
    return routed
