"""A request the server answered 503 "busy" is sent again after its ``Retry-After``: at
least 0.1 s (``0`` sent every retry back to back, within the moment the database was busy),
and an HTTP date is the time until then (it was 1 s, whatever it said)."""

from __future__ import annotations

import email.utils
import time

import httpx
import pytest

from danlu.client import rest
from danlu.client.bodies import retry_after
from danlu.client.rest import Client

MIN_RETRY_AFTER = 0.1  # danlu.client.bodies's
MAX_RETRY_AFTER = 5.0
BUSY = {"error": {"type": "busy", "field": None, "message": "the database is busy"}}


def _sleeps_before_success(monkeypatch: pytest.MonkeyPatch, header: str) -> list[float]:
    """The pauses a submission makes when the server answers busy twice, with ``header``
    as its Retry-After, then takes it."""
    slept: list[float] = []
    monkeypatch.setattr(rest.time, "sleep", slept.append)
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.method)
        if len(calls) <= 2:
            return httpx.Response(503, json=BUSY, headers={"Retry-After": header})
        return httpx.Response(200, json={"id": "abc123", "state": "PENDING"})

    with Client("http://danlu.test", "tok", transport=httpx.MockTransport(handler)) as client:
        assert client.submit({"name": "a", "command": ["x"]})["id"] == "abc123"
    assert calls == ["POST"] * 3
    return slept


@pytest.mark.parametrize("header", ["0", "-3", "0.0"])
def test_zero_retry_after_still_pauses(monkeypatch: pytest.MonkeyPatch, header: str) -> None:
    assert _sleeps_before_success(monkeypatch, header) == [MIN_RETRY_AFTER] * 2


def test_http_date_ahead_is_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    later = email.utils.formatdate(time.time() + 3600, usegmt=True)
    assert _sleeps_before_success(monkeypatch, later) == [MAX_RETRY_AFTER] * 2


def test_http_date_gone_by_is_the_shortest_pause() -> None:
    response = httpx.Response(503, headers={"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"})
    assert retry_after(response) == MIN_RETRY_AFTER


@pytest.mark.parametrize(
    ("header", "seconds"), [(None, 1.0), ("nan", 1.0), ("soon", 1.0), ("2", 2.0), ("inf", 5.0)]
)
def test_other_values(header: str | None, seconds: float) -> None:
    headers = {} if header is None else {"Retry-After": header}
    assert retry_after(httpx.Response(503, headers=headers)) == seconds
