"""The server's settings: a number setting written with ``_`` or in another
script's digits was read as a number (``DANLU_PORT=8_470`` as 8470, ``DANLU_INTERVAL=1_0``
as 10), so a typo started the server with a value nobody meant."""

from __future__ import annotations

import pytest

from danlu.config import load_settings
from danlu.core.errors import ConfigError


@pytest.mark.parametrize(
    ("variable", "text"),
    [
        ("DANLU_PORT", "8_470"),
        ("DANLU_INTERVAL", "1_0"),
        ("DANLU_MAX_BODY_BYTES", "33_554_432"),
        ("DANLU_RETENTION_DAYS", "1_0"),
        ("DANLU_PREEMPT_GRACE", "3_0"),
    ],
)
def test_a_number_not_written_plainly_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, text: str
) -> None:
    monkeypatch.setenv(variable, text)
    with pytest.raises(ConfigError, match=rf"^{variable}: '{text}' is not a number written"):
        load_settings()


@pytest.mark.parametrize(
    ("variable", "text", "field", "value"),
    [
        ("DANLU_PORT", "8471", "port", 8471),
        ("DANLU_PORT", " 8471 ", "port", 8471),
        ("DANLU_INTERVAL", "0.5", "interval", 0.5),
        ("DANLU_INTERVAL", "1e1", "interval", 10.0),
        ("DANLU_PORT", "", "port", 8470),
    ],
)
def test_plain_numbers_read_as_before(
    monkeypatch: pytest.MonkeyPatch, variable: str, text: str, field: str, value: float
) -> None:
    monkeypatch.setenv(variable, text)
    assert getattr(load_settings(), field) == value
