"""One rule for a size wherever danlu reads one (a job spec, ``DANLU_FAKE_GPUS``, the
cli's flags, the control plane's settings), as docs/api.md states it: ``KiB``... binary,
``KB`` and a bare ``K``... decimal, any case. ``DANLU_MAX_BODY_BYTES`` took no unit
(``32MiB`` was "Input should be a valid integer") while every other size did; what was
accepted (quoted numbers and booleans in a spec, a bare number of bytes) reads as before.
A refused setting is told with its value, in the spec's words."""

from __future__ import annotations

import pytest

from danlu.config import load_settings
from danlu.core.errors import ConfigError
from danlu.core.fake_gpus import parse_fake_gpus
from danlu.core.spec import parse_spec
from danlu.core.units import parse_bytes

JOB = {"name": "a", "command": ["x"]}


@pytest.mark.parametrize(
    ("written", "size"),
    [
        ("80GiB", 80 * 1024**3),
        ("80gib", 80 * 1024**3),
        ("80 Gi", 80 * 1024**3),
        ("80GB", 80 * 1000**3),
        ("80G", 80 * 1000**3),
        ("80gb", 80 * 1000**3),
    ],
)
def test_a_size_reads_alike_in_a_spec_a_flag_and_the_fake_gpus(written: str, size: int) -> None:
    spec = parse_spec({**JOB, "resources": {"gpu_memory": written, "memory": written}})
    assert spec.resources.gpu_memory == spec.resources.memory == size
    assert parse_bytes(written, "--gpu-memory") == size
    (group,) = parse_fake_gpus(f"1x{written.replace(' ', '')}")
    assert group.gpu_type.memory == size


@pytest.mark.parametrize(
    ("written", "size"),
    [("32MiB", 32 * 1024**2), ("64MB", 64 * 1000**2), ("2048", 2048), ("1 mib", 1024**2)],
)
def test_the_body_limit_setting_takes_a_size_with_a_unit(
    monkeypatch: pytest.MonkeyPatch, written: str, size: int
) -> None:
    monkeypatch.setenv("DANLU_MAX_BODY_BYTES", written)
    assert load_settings().max_body_bytes == size


def test_the_body_limit_setting_still_refuses_what_is_no_size(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for written, says in (("lots", "'lots' is not a byte size"), ("2GiB", "less than or equal")):
        monkeypatch.setenv("DANLU_MAX_BODY_BYTES", written)
        with pytest.raises(ConfigError, match="DANLU_MAX_BODY_BYTES") as caught:
            load_settings()
        assert says in str(caught.value)


def test_quoted_numbers_and_booleans_read_as_documented() -> None:
    spec = parse_spec(
        {
            **JOB,
            "priority": "5",
            "preemptible": "no",
            "shell": "off",
            "command": ["x y"],
            "resources": {"gpus": "2", "cpus": "1.5", "memory": "1073741824"},
            "training": {"activation_checkpointing": "Yes"},
        }
    )
    assert spec.priority == 5 and spec.preemptible is False and spec.shell is False
    assert spec.resources.gpus.min == 2 and spec.resources.cpus == 1.5
    assert spec.resources.memory == 1024**3
    assert spec.training.activation_checkpointing is True


@pytest.mark.parametrize(
    ("variable", "written", "says"),
    [
        ("DANLU_PORT", "99999", "DANLU_PORT: must be less than or equal to 65535 (got '99999')"),
        ("DANLU_RETENTION_DAYS", "-1", "must be greater than or equal to 0 (got '-1')"),
        ("DANLU_MAX_JOBS_PER_USER", "x", "DANLU_MAX_JOBS_PER_USER: 'x' is not a whole number"),
        ("DANLU_HEALTH_DRAIN", "maybe", "'maybe' is not true or false"),
        ("DANLU_INTERVAL", "abc", "DANLU_INTERVAL: 'abc' is not a number"),
    ],
)
def test_a_refused_setting_is_told_with_its_value(
    monkeypatch: pytest.MonkeyPatch, variable: str, written: str, says: str
) -> None:
    """pydantic's "Input should be less than or equal to 65535" named neither the value
    nor, for a setting without a hint, what it takes."""
    monkeypatch.setenv(variable, written)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert says in str(caught.value)
    assert "Input should be" not in str(caught.value)
