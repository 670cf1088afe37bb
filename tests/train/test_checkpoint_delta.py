"""Element-wise compressed deltas (danlu.train.checkpoint.delta): exact on the bits, small
for fine-tuning-like changes, and loud on corrupt input."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from danlu.core.errors import DataError  # noqa: E402
from danlu.train.checkpoint import delta  # noqa: E402
from danlu.train.checkpoint.codec import bits, same_bits  # noqa: E402

DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.int32,
    torch.int8,
    torch.uint8,
    torch.bool,
    torch.complex64,
]


def _random(dtype: torch.dtype, shape: tuple[int, ...], g: torch.Generator) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) < 0.5
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(shape, generator=g).to(dtype)
    return torch.randint(-100 if dtype != torch.uint8 else 0, 100, shape, generator=g).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fraction", [0.001, 0.3, 1.0])
def test_roundtrip_is_bit_exact(dtype: torch.dtype, fraction: float) -> None:
    g = torch.Generator().manual_seed(hash((str(dtype), fraction)) % 2**31)
    base = _random(dtype, (37, 29), g)
    new = base.clone()
    pick = torch.rand(base.shape, generator=g) < fraction
    pick.view(-1)[0] = True
    new[pick] = _random(dtype, base.shape, g)[pick]
    encoded = delta.encode(new, base)
    if same_bits(new, base):
        assert encoded is None
        return
    assert encoded is not None
    payload, spec = encoded
    kept = base.clone()
    out = delta.decode(base, payload, spec)
    assert out.dtype == new.dtype and out.shape == new.shape
    assert torch.equal(bits(out), bits(new))
    assert same_bits(base, kept)  # decoding never writes into the base


def test_special_float_bits_survive() -> None:
    base = torch.tensor([0.0, 1.0, -2.5, float("inf"), 3.0, 7.0])
    new = torch.tensor([-0.0, float("nan"), -2.5, float("-inf"), 3.0000002, 7.0])
    new_bits = bits(new).clone()
    new_bits[1] = 0x7FC01234  # a NaN with a payload
    new = new_bits.view(torch.float32)
    payload, spec = delta.encode(new, base)  # type: ignore[misc]
    out = delta.decode(base, payload, spec)
    assert torch.equal(bits(out), bits(new))
    assert spec["nnz"] == 4 and spec["mask"] is not None  # unchanged elements are not stored


def test_identical_is_none_and_small_changes_compress() -> None:
    g = torch.Generator().manual_seed(0)
    w = torch.randn(256, 256, generator=g) * 0.05
    assert delta.encode(w.clone(), w) is None
    # every element nudged by ~0.1% (what fine-tuning does to weights): far below 4 bytes each
    moved = w * (1 + 1e-3 * torch.randn(w.shape, generator=g))
    payload, spec = delta.encode(moved, w)  # type: ignore[misc]
    assert spec["nnz"] > 0.99 * w.numel()
    assert payload.numel() < 0.75 * w.numel() * 4
    assert torch.equal(delta.decode(w, payload, spec), moved)


def test_corrupt_or_mismatched_deltas_raise() -> None:
    base = torch.arange(100, dtype=torch.float32)
    new = base.clone()
    new[::3] += 0.5
    payload, spec = delta.encode(new, base)  # type: ignore[misc]
    with pytest.raises(DataError, match=r"truncated|length|inflate"):
        delta.decode(base, payload[:-5], spec)
    with pytest.raises(DataError, match="does not match"):
        delta.decode(torch.zeros(99), payload, spec)
    with pytest.raises(DataError, match="encoding"):
        delta.decode(base, payload, {**spec, "encoding": "other/9"})
    with pytest.raises(DataError, match="malformed"):
        delta.decode(base, payload, {"encoding": delta.ENCODING})
    with pytest.raises(DataError, match="same dtype"):
        delta.encode(new.double(), base)
    with pytest.raises(DataError, match="trailing"):
        delta.decode(base, torch.cat([payload, torch.zeros(3, dtype=torch.uint8)]), spec)
    # bytes that are no deflate stream, and specs of the wrong shape (zlib.error and
    # TypeError escaped before, so a loader could not fall back past them)
    deflated = next(p for p in spec["planes"] if p[2])
    noise = torch.full((deflated[0],), 0xFF, dtype=torch.uint8)
    with pytest.raises(DataError, match="inflate"):
        delta.decode(base, noise, {**spec, "mask": None, "nnz": 100, "planes": [deflated] * 4})
    with pytest.raises(DataError, match="mask spec"):
        delta.decode(base, payload, {**spec, "mask": [1, 2]})
    with pytest.raises(DataError, match="plane spec"):
        delta.decode(base, payload, {**spec, "planes": [[1]] * 4})
