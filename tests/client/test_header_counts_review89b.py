"""A count header (the log offset, the metrics cursor) of thousands of digits is a
ServerError naming the request and the header, not int()'s bare ValueError; a count a
64-bit server sends is read as before."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from danlu.client import Client
from danlu.client.errors import ServerError
from danlu.client.rest import LOG_OFFSET_HEADER, METRICS_CURSOR_HEADER


def _client(headers: dict[str, str], body: Any = None, content: bytes | None = None) -> Client:
    def handler(request: httpx.Request) -> httpx.Response:
        data = json.dumps(body).encode() if content is None else content
        return httpx.Response(200, content=data, headers=headers)

    return Client("http://danlu.test", "tok", transport=httpx.MockTransport(handler))


@pytest.mark.parametrize("value", ["7" * 5000, "9223372036854775808"], ids=["5000-digits", "2**63"])
def test_a_huge_metrics_cursor_is_a_server_error(value: str) -> None:
    client = _client({METRICS_CURSOR_HEADER: value}, body=[])
    with client, pytest.raises(ServerError) as info:
        client.metrics_page("j1")
    text = str(info.value)
    assert METRICS_CURSOR_HEADER in text
    assert "/jobs/j1/metrics" in text
    assert "64-bit" in text
    assert len(text) < 400  # the 5000 digits are not repeated


def test_a_huge_log_offset_is_a_server_error() -> None:
    client = _client({LOG_OFFSET_HEADER: "1" * 4400}, content=b"abc")
    with client, pytest.raises(ServerError) as info:
        client.logs("j1")
    assert LOG_OFFSET_HEADER in str(info.value)
    assert "/jobs/j1/logs" in str(info.value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("9223372036854775807", 9223372036854775807), ("0" * 5000 + "12", 12), ("0", 0)],
    ids=["2**63-1", "leading-zeros", "zero"],
)
def test_a_count_a_server_sends_is_read_as_before(value: str, expected: int) -> None:
    with _client({METRICS_CURSOR_HEADER: value}, body=[]) as client:
        rows, cursor = client.metrics_page("j1")
    assert rows == [] and cursor == expected
