"""Lossless element-wise deltas of a tensor against a base tensor, compressed.

An incremental checkpoint stores each changed tensor as its difference from the same tensor
in the base (full) checkpoint. The difference is taken on the raw bits, so it is exact for
every dtype (``-0.0``, NaN payloads and subnormals included):

1. ``a``, ``b`` = the bit patterns of base and new as unsigned integers of the element size;
   ``d = b - a`` (modulo ``2**bits``), read as a signed integer and zig-zag mapped
   (``0, -1, 1, -2, ... -> 0, 1, 2, 3, ...``). For floats that moved a little (fine-tuned
   weights, Adam's slowly moving second moment) ``d`` is small: its high bytes are zero.
2. Elements with ``d == 0`` are dropped and a bit mask (1 bit per element) records which ones
   are kept; the mask is left out when every element changed.
3. The kept values are split in byte planes (every element's byte 0, then byte 1, ...) and
   each plane, and the mask, is deflated (zlib, run-length strategy, level 1: fast) when that
   makes it smaller, else stored as is. Sign/exponent planes compress well; low mantissa
   planes are near random and cost nothing to keep raw.

:func:`encode` returns the payload (one ``uint8`` tensor) and a JSON-safe spec;
:func:`decode` rebuilds the new tensor bit for bit from the base, the payload and the spec.
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np
import torch

from danlu.core.errors import DataError
from danlu.train.checkpoint.codec import bits

ENCODING = "zigzag-planes/1"
"""Identifier written in each spec; :func:`decode` refuses any other."""

_UINT = {1: "<u1", 2: "<u2", 4: "<u4", 8: "<u8"}
_SINT = {1: "<i1", 2: "<i2", 4: "<i4", 8: "<i8"}


def _deflate(data: bytes) -> bytes:
    c = zlib.compressobj(1, zlib.DEFLATED, -15, 9, zlib.Z_RLE)
    return c.compress(data) + c.flush()


def _inflate(data: bytes, size: int) -> bytes:
    try:
        out = zlib.decompress(data, -15)
    except zlib.error as exc:
        raise DataError(f"delta plane does not inflate: {exc}") from None
    if len(out) != size:
        raise DataError("delta plane does not inflate to its recorded size")
    return out


def _pack(chunks: list[bytes]) -> tuple[list[bytes], list[list[int]]]:
    """Deflate each chunk when that helps; ``[stored_len, raw_len, deflated]`` per chunk."""
    parts, specs = [], []
    for raw in chunks:
        packed = _deflate(raw) if raw else b""
        if len(packed) < len(raw):
            parts.append(packed)
            specs.append([len(packed), len(raw), 1])
        else:
            parts.append(raw)
            specs.append([len(raw), len(raw), 0])
    return parts, specs


def _unsigned(t: torch.Tensor) -> np.ndarray:
    arr = bits(t).numpy()
    return arr.view(_UINT[arr.itemsize])


def encode(new: torch.Tensor, base: torch.Tensor) -> tuple[torch.Tensor, dict[str, Any]] | None:
    """The delta of ``new`` against ``base`` (same dtype and shape, CPU tensors).

    Returns None when their bits are equal, else ``(payload, spec)``: a ``uint8`` tensor and
    a JSON-safe dict for :func:`decode`.
    """
    if new.dtype != base.dtype or new.shape != base.shape:
        raise DataError("a delta needs a base of the same dtype and shape")
    b, a = _unsigned(new), _unsigned(base)
    size = a.itemsize
    d = b - a  # modulo 2**bits: unsigned numpy arithmetic wraps
    changed = d != 0
    nnz = int(np.count_nonzero(changed))
    if nnz == 0:
        return None
    s = d.view(_SINT[size])
    zz = ((s << 1) ^ (s >> (8 * size - 1))).view(_UINT[size])
    chunks: list[bytes] = []
    masked = nnz < d.size
    if masked:
        chunks.append(np.packbits(changed, bitorder="little").tobytes())
        zz = zz[changed]
    planes = zz.view(np.uint8).reshape(-1, size)
    chunks += [np.ascontiguousarray(planes[:, i]).tobytes() for i in range(size)]
    parts, specs = _pack(chunks)
    spec: dict[str, Any] = {
        "encoding": ENCODING,
        "numel": int(d.size),
        "nnz": nnz,
        "mask": specs[0] if masked else None,
        "planes": specs[1:] if masked else specs,
    }
    payload = torch.frombuffer(bytearray(b"".join(parts)), dtype=torch.uint8)
    return payload, spec


def decode(base: torch.Tensor, payload: torch.Tensor, spec: dict[str, Any]) -> torch.Tensor:
    """``new`` rebuilt from ``base`` and the output of :func:`encode` (bit-exact)."""
    if not isinstance(spec, dict) or spec.get("encoding") != ENCODING:
        raise DataError(f"unknown delta encoding {spec!r}")
    out = base.detach().clone(memory_format=torch.contiguous_format)
    a = _unsigned(out)
    size = a.itemsize
    try:
        numel, nnz = int(spec["numel"]), int(spec["nnz"])
        mask_spec = spec["mask"]
        plane_specs = list(spec["planes"])
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(f"malformed delta spec: {exc}") from exc
    if numel != a.size or len(plane_specs) != size or not 0 < nnz <= numel:
        raise DataError("delta does not match its base tensor")
    if mask_spec is None and nnz != numel:
        raise DataError("delta without a mask must cover every element")
    data = payload.numpy().tobytes()
    pos = 0

    def take(chunk_spec: Any, what: str) -> bytes:
        """The bytes of one ``[stored, raw, deflated]`` chunk of the payload, inflated."""
        nonlocal pos
        try:
            stored, raw, deflated = (int(x) for x in chunk_spec)
        except (TypeError, ValueError) as exc:
            raise DataError(f"malformed delta {what} spec {chunk_spec!r}") from exc
        chunk = data[pos : pos + stored]
        pos += stored
        if len(chunk) != stored:
            raise DataError("delta payload is truncated")
        return _inflate(chunk, raw) if deflated else chunk

    mask = None
    if mask_spec is not None:
        packed = np.frombuffer(take(mask_spec, "mask"), dtype=np.uint8)
        mask = np.unpackbits(packed, count=numel, bitorder="little").astype(bool)
        if int(np.count_nonzero(mask)) != nnz:
            raise DataError("delta mask does not match its element count")
    planes = np.empty((nnz, size), dtype=np.uint8)
    for i, p in enumerate(plane_specs):
        plane = np.frombuffer(take(p, "plane"), dtype=np.uint8)
        if plane.size != nnz:
            raise DataError("delta plane has the wrong length")
        planes[:, i] = plane
    if pos != len(data):
        raise DataError("delta payload has trailing bytes")
    zz = planes.reshape(-1).view(_UINT[size])
    if mask is not None:
        full = np.zeros(numel, dtype=_UINT[size])
        full[mask] = zz
        zz = full
    one = zz.dtype.type(1)
    s = (zz >> one) ^ (zz.dtype.type(0) - (zz & one))  # undo the zig-zag (unsigned, wraps)
    a += s  # in place: ``a`` views ``out``'s storage
    return out
