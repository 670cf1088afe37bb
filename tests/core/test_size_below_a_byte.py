"""A size that is no whole number of bytes, or is above 0 but below one byte, is refused
wherever danlu reads a size, naming the field and how to write it: ``gpu_memory: 0.5B``
(half a byte) was read as 0 bytes, and a ``gpu_memory`` of 0 is whole GPUs. A fraction of a
byte left over from a larger unit (``0.3GiB``) is still dropped, as documented."""

from __future__ import annotations

from typing import Any

import pytest

from danlu.config import load_settings
from danlu.core.errors import ConfigError, SpecError
from danlu.core.fake_gpus import parse_fake_gpus
from danlu.core.spec import parse_spec
from danlu.core.units import parse_bytes
from danlu.train.env import JobEnv

JOB = {"name": "a", "command": ["x"]}


@pytest.mark.parametrize(
    ("written", "says"),
    [
        ("0.5B", "'0.5B' is a fraction of a byte"),
        ("0.5b", "'0.5b' is a fraction of a byte"),
        ("1.5B", "'1.5B' is a fraction of a byte"),
        ("0.5", "0.5 bytes is a fraction of a byte"),
        (0.5, "0.5 bytes is a fraction of a byte"),
        (1.9, "1.9 bytes is a fraction of a byte"),
        ("0.0000001KB", "'0.0000001KB' is less than one byte"),
        ("0.00000000001GiB", "'0.00000000001GiB' is less than one byte"),
    ],
)
def test_a_size_that_is_no_whole_number_of_bytes_is_refused(written: Any, says: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_bytes(written, "resources.gpu_memory")
    assert caught.value.field == "resources.gpu_memory"
    assert str(caught.value).startswith(f"resources.gpu_memory: {says}"), caught.value
    assert "GiB" in str(caught.value)  # how to write one


@pytest.mark.parametrize(
    ("written", "size"),
    [("0", 0), ("0B", 0), ("0.0B", 0), ("0.00GiB", 0), (0, 0), (2.0, 2), ("7B", 7)],
)
def test_zero_and_whole_bytes_still_read(written: Any, size: int) -> None:
    assert parse_bytes(written, "size") == size


@pytest.mark.parametrize(
    ("written", "size"),
    [("0.3GiB", 322_122_547), ("1.0005KB", 1000), ("8.2GB", 8_200_000_000)],
)
def test_a_fraction_of_a_byte_left_from_a_larger_unit_is_still_dropped(
    written: str, size: int
) -> None:
    assert parse_bytes(written, "size") == size


@pytest.mark.parametrize("field", ["gpu_memory", "memory"])
def test_a_spec_refuses_half_a_byte_naming_its_field(field: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec({**JOB, "resources": {field: "0.5B"}})
    assert caught.value.field == f"resources.{field}"
    assert "'0.5B' is a fraction of a byte" in str(caught.value)


def test_a_sweep_trial_spec_refuses_half_a_byte() -> None:
    from danlu.core.sweep import parse_sweep

    body = {
        "name": "s",
        "trial": {**JOB, "resources": {"gpus": 1, "gpu_memory": "0.5B"}},
        "parameters": {"lr": {"values": [0.1]}},
        "method": "grid",
    }
    with pytest.raises(SpecError) as caught:
        parse_sweep(body)
    assert "gpu_memory" in caught.value.field
    assert "fraction of a byte" in str(caught.value)


def test_the_fake_gpus_refuse_half_a_byte() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_fake_gpus("2x0.5B")
    assert "fraction of a byte" in str(caught.value)


def test_a_setting_refuses_less_than_a_byte(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DANLU_MAX_BODY_BYTES", "0.0000001KB")
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert "DANLU_MAX_BODY_BYTES" in str(caught.value)
    assert "less than one byte" in str(caught.value)


def test_a_job_s_memory_limit_refuses_half_a_byte() -> None:
    with pytest.raises(ConfigError) as caught:
        JobEnv.from_environ({"DANLU_GPU_MEMORY_LIMIT": "0.5B"})
    assert "DANLU_GPU_MEMORY_LIMIT" in str(caught.value)
    assert "fraction of a byte" in str(caught.value)
