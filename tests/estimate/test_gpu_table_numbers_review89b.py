"""A --gpu-table file's numbers: a compute capability whose major version is no number
int() reads ("².0", thousands of digits) is an unrecognised one (it was a bare
ValueError); an integer field beyond 2**62 is a ConfigError naming it (a capacity of
10**400 was taken, and a margin of it raised a bare OverflowError)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from danlu.core.errors import ConfigError
from danlu.estimate.memory.gpus import (
    UNKNOWN_CONTEXT_BYTES,
    cublas_workspace_for,
    load_gpu_table,
    typical_context_bytes,
)


def _table(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gpus.json"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "cc", ["².0", "9" * 5000 + ".0", "¹"], ids=["super-2", "5000-digits", "super-1"]
)
def test_an_unreadable_capability_is_an_unknown_one(tmp_path: Path, cc: str) -> None:
    path = _table(tmp_path, json.dumps({"x": {"capacity_bytes": 10**9, "compute_capability": cc}}))
    spec = load_gpu_table(path)["x"]
    assert spec.context_bytes == UNKNOWN_CONTEXT_BYTES
    assert spec.cublas_workspace_bytes == cublas_workspace_for("")
    assert typical_context_bytes(cc) == UNKNOWN_CONTEXT_BYTES


def test_a_known_capability_is_read_as_before(tmp_path: Path) -> None:
    path = _table(
        tmp_path, json.dumps({"x": {"capacity_bytes": 10**9, "compute_capability": "8.0"}})
    )
    spec = load_gpu_table(path)["x"]
    assert spec.context_bytes == typical_context_bytes("8.0") == 430 * 1024**2
    assert spec.cublas_workspace_bytes == cublas_workspace_for("8.0") < cublas_workspace_for("9.0")


@pytest.mark.parametrize(
    "field", ["capacity_bytes", "context_bytes", "cublas_workspace_bytes", "cublas_handles"]
)
@pytest.mark.parametrize("value", ["9" * 400, str(2**62 + 1)], ids=["400-digits", "2**62+1"])
def test_an_integer_field_beyond_2_62_is_refused(tmp_path: Path, field: str, value: str) -> None:
    path = _table(tmp_path, f'{{"h100": {{"{field}": {value}}}}}')
    with pytest.raises(ConfigError) as info:
        load_gpu_table(path)
    assert field in str(info.value)
    assert "4,611,686,018,427,387,904" in str(info.value)


def test_an_integer_field_of_2_62_is_kept(tmp_path: Path) -> None:
    path = _table(tmp_path, json.dumps({"big": {"capacity_bytes": 2**62}}))
    assert load_gpu_table(path)["big"].capacity_bytes == 2**62
