"""Split a training state into a JSON skeleton and named tensors, and back.

A checkpoint never pickles Python objects: the structure (dicts, lists, tuples, numbers,
strings) goes to JSON with tensors replaced by ``{"__tensor__": key}``, and the tensors go
to a ``torch.save`` file that is read back with ``weights_only=True``.

Incremental checkpoints compare tensors on their raw bits (:func:`bits`), so ``-0.0`` vs
``0.0`` and NaN payloads are preserved; their deltas are made by
:mod:`danlu.train.checkpoint.delta`. :func:`apply_delta` reads the sparse deltas (flat
indices and new bits) that earlier versions wrote.
"""

from __future__ import annotations

import io
import math
from typing import Any

import numpy as np
import torch

from danlu.core.errors import DataError

_TENSOR, _TUPLE, _DICT = "__tensor__", "__tuple__", "__dict__"
_NDARRAY, _DTYPE, _FLOAT = "__ndarray__", "__dtype__", "__float__"
_MARKERS = {_TENSOR, _TUPLE, _DICT, _NDARRAY, _DTYPE, _FLOAT}
_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def encode(state: Any) -> tuple[Any, dict[str, torch.Tensor]]:
    """Split ``state`` into a JSON-safe skeleton and a flat ``{key: tensor}`` map.

    Keys are the ``/``-joined paths of the tensors in the structure, so the same tensor
    keeps the same key from one checkpoint to the next.
    """
    tensors: dict[str, torch.Tensor] = {}

    def key_for(path: list[str]) -> str:
        base = "/".join(path) or "root"
        key, n = base, 1
        while key in tensors:
            key, n = f"{base}#{n}", n + 1
        return key

    def enc(obj: Any, path: list[str]) -> Any:
        if isinstance(obj, torch.Tensor):
            key = key_for(path)
            tensors[key] = obj
            return {_TENSOR: key}
        if isinstance(obj, np.ndarray):
            key = key_for(path)
            tensors[key] = torch.from_numpy(np.ascontiguousarray(obj))
            return {_NDARRAY: key}
        if isinstance(obj, np.generic):
            return obj.item()
        if isinstance(obj, torch.dtype):
            return {_DTYPE: str(obj).removeprefix("torch.")}
        if obj is None or isinstance(obj, bool | int | str):
            return obj
        if isinstance(obj, float):
            return obj if math.isfinite(obj) else {_FLOAT: repr(obj)}
        if isinstance(obj, dict):
            plain = all(isinstance(k, str) and k not in _MARKERS for k in obj)
            if plain:
                return {k: enc(v, [*path, k]) for k, v in obj.items()}
            return {
                _DICT: [[enc(k, [*path, "key"]), enc(v, [*path, str(k)])] for k, v in obj.items()]
            }
        if isinstance(obj, tuple):
            return {_TUPLE: [enc(v, [*path, str(i)]) for i, v in enumerate(obj)]}
        if isinstance(obj, list):
            return [enc(v, [*path, str(i)]) for i, v in enumerate(obj)]
        raise DataError(
            f"cannot checkpoint a value of type {type(obj).__name__} at "
            f"{'/'.join(path) or 'root'}: use tensors, numbers, strings, lists, tuples, dicts"
        )

    return enc(state, []), tensors


def decode(skeleton: Any, tensors: dict[str, torch.Tensor]) -> Any:
    """Rebuild the structure made by :func:`encode` from its skeleton and tensors."""

    def dec(obj: Any) -> Any:
        if isinstance(obj, list):
            return [dec(v) for v in obj]
        if not isinstance(obj, dict):
            return obj
        if _TENSOR in obj:
            return _tensor(obj[_TENSOR])
        if _NDARRAY in obj:
            return _tensor(obj[_NDARRAY]).numpy()
        if _FLOAT in obj:
            return float(obj[_FLOAT])
        if _DTYPE in obj:
            dtype = getattr(torch, str(obj[_DTYPE]), None)
            if not isinstance(dtype, torch.dtype):
                raise DataError(f"unknown dtype {obj[_DTYPE]!r} in checkpoint")
            return dtype
        if _TUPLE in obj:
            return tuple(dec(v) for v in obj[_TUPLE])
        if _DICT in obj:
            return {_hashable(dec(k)): dec(v) for k, v in obj[_DICT]}
        return {k: dec(v) for k, v in obj.items()}

    def _tensor(key: str) -> torch.Tensor:
        if key not in tensors:
            raise DataError(f"checkpoint is missing tensor {key!r}")
        return tensors[key]

    return dec(skeleton)


def _hashable(k: Any) -> Any:
    return tuple(_hashable(v) for v in k) if isinstance(k, list) else k


def bits(t: torch.Tensor) -> torch.Tensor:
    """A flat integer view of the raw bytes of ``t`` (same element count)."""
    flat = t.detach().contiguous().reshape(-1)
    if flat.dtype == torch.bool:
        return flat.view(torch.uint8)
    if flat.is_complex():
        flat = torch.view_as_real(flat).reshape(-1)
    size = flat.element_size()
    return flat.view(_INT_OF_SIZE[size]) if flat.dtype not in _INT_OF_SIZE.values() else flat


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True when ``a`` and ``b`` have the same dtype, shape and bytes."""
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(bits(a), bits(b))


def apply_delta(base: torch.Tensor, idx: torch.Tensor, val: torch.Tensor) -> torch.Tensor:
    """``base`` with the elements at flat ``idx`` set to the raw bits ``val`` (the sparse
    deltas of earlier versions)."""
    out = base.detach().clone(memory_format=torch.contiguous_format)
    ob = bits(out)
    if val.dtype != ob.dtype or idx.numel() != val.numel():
        raise DataError("sparse delta does not match its base tensor")
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= ob.numel()):
        raise DataError("sparse delta indices out of range")
    ob[idx.long()] = val
    return out


def tensors_to_bytes(tensors: dict[str, torch.Tensor]) -> bytes:
    """Serialise a flat tensor map with ``torch.save`` (no Python objects but the dict)."""
    buf = io.BytesIO()
    torch.save(tensors, buf)
    return buf.getvalue()


def tensors_from_bytes(data: bytes, where: str) -> dict[str, torch.Tensor]:
    """Load a flat tensor map with ``weights_only=True``; errors name ``where``."""
    try:
        out = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types on corrupt zips
        raise DataError(f"{where}: unreadable tensor file: {exc}") from exc
    if not isinstance(out, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in out.items()
    ):
        raise DataError(f"{where}: tensor file is not a flat map of tensors")
    return out
