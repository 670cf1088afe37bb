"""How an incremental checkpoint stores each tensor against its base (the ``layout`` of its
``meta.json``): :func:`encode_layout` as it is saved, :func:`decode_layout` as it is
loaded, for :mod:`danlu.train.checkpoint.manager`.

A tensor's layout is ``"full"`` (stored whole), ``"base"`` (the base's, unchanged),
``{"delta": ...}`` (a compressed element-wise delta, :mod:`danlu.train.checkpoint.delta`,
stored as ``<key>::delta``) or, in checkpoints of earlier versions, ``"sparse"``
(``<key>::idx`` and ``<key>::val``).
"""

from __future__ import annotations

from typing import Any

import torch

from danlu.core.errors import DataError
from danlu.train.checkpoint import codec, delta


def encode_layout(
    tensors: dict[str, torch.Tensor], base: dict[str, torch.Tensor] | None
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """``(stored, layout)`` of ``tensors``: against ``base`` (an incremental checkpoint)
    each tensor as the smaller of its delta and itself, or a reference when unchanged;
    without one (a full checkpoint) every tensor whole."""
    if base is None:
        return tensors, dict.fromkeys(tensors, "full")
    stored: dict[str, torch.Tensor] = {}
    layout: dict[str, Any] = {}
    for key, t in tensors.items():
        ref = base.get(key)
        if ref is None or ref.dtype != t.dtype or ref.shape != t.shape:
            layout[key], stored[key] = "full", t
            continue
        d = delta.encode(t, ref)
        if d is None:
            layout[key] = "base"
        elif d[0].numel() >= t.numel() * t.element_size() or key + "::delta" in tensors:
            # whole when smaller, or when the delta's name is one of the state's own
            layout[key], stored[key] = "full", t
        else:
            layout[key] = {"delta": d[1]}
            stored[key + "::delta"] = d[0]
    return stored, layout


def decode_layout(
    meta: dict[str, Any],
    stored: dict[str, torch.Tensor],
    base: dict[str, torch.Tensor] | None,
    where: str,
) -> dict[str, torch.Tensor]:
    """The tensors the ``layout`` of ``meta`` (a checkpoint's ``meta.json``) describes, from
    ``stored`` and ``base`` (None for a full checkpoint); a :class:`DataError` naming
    ``where`` (the checkpoint) when they do not match it."""
    tensors: dict[str, torch.Tensor] = {}
    try:
        for key, how in meta["layout"].items():
            if how == "full":
                tensors[key] = stored[key]
            elif how == "base" and base is not None:
                tensors[key] = base[key]
            elif isinstance(how, dict) and "delta" in how and base is not None:
                tensors[key] = delta.decode(base[key], stored[key + "::delta"], how["delta"])
            elif how == "sparse" and base is not None:  # written by earlier versions
                tensors[key] = codec.apply_delta(
                    base[key], stored[key + "::idx"], stored[key + "::val"]
                )
            else:
                raise DataError(f"{where}: bad layout {how!r}")
    except KeyError as exc:
        raise DataError(f"{where}: missing tensor {exc}") from exc
    return tensors
