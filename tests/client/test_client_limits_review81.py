"""The client's own limits at the edges: a request timeout of NaN, 0, below 0 or infinity
(httpx then raised a bare ValueError or OverflowError at the first request), busy retries
below 0 (every request raised AssertionError "unreachable"), a reconnect time of NaN (a lost
server was waited for forever) and a follow's reconnect delay below 0 or NaN (ValueError
from time.sleep once a stream brought nothing) are refused, naming the argument, before
anything is sent."""

from __future__ import annotations

import math

import httpx
import pytest

from danlu.client import Client
from danlu.core.errors import SpecError


def _recording() -> tuple[httpx.MockTransport, list[httpx.Request]]:
    """A server whose job is running and whose log follow ends at once, bringing nothing."""
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        if request.url.path.endswith("/logs"):
            return httpx.Response(200, content=b"")
        return httpx.Response(200, json={"id": "j1", "state": "RUNNING"})

    return httpx.MockTransport(handler), sent


@pytest.mark.parametrize("timeout", [math.nan, -1.0, 0.0, math.inf])
def test_a_timeout_no_request_can_keep_is_refused(timeout: float) -> None:
    transport, sent = _recording()
    with pytest.raises(SpecError, match="timeout"):
        Client("http://danlu.test", "tok", transport=transport, timeout=timeout)
    assert sent == []


def test_busy_retries_below_zero_are_refused() -> None:
    with pytest.raises(SpecError, match="busy_retries"):
        Client("http://danlu.test", "tok", busy_retries=-1)


@pytest.mark.parametrize("reconnect_for", [math.nan, -1.0])
def test_a_reconnect_time_no_deadline_passes_is_refused(reconnect_for: float) -> None:
    with pytest.raises(SpecError, match="reconnect_for"):
        Client("http://danlu.test", "tok", reconnect_for=reconnect_for)


def test_the_limits_that_mean_none_are_kept() -> None:
    transport, _ = _recording()
    client = Client(
        "http://danlu.test", "tok", transport=transport, timeout=None, reconnect_for=math.inf
    )
    with client:
        assert client.reconnect_for == math.inf
        assert client.get_job("j1")["state"] == "RUNNING"


@pytest.mark.parametrize("delay", [-1.0, math.nan, math.inf])
def test_a_follow_delay_sleep_cannot_take_is_refused_before_any_request(delay: float) -> None:
    transport, sent = _recording()
    client = Client("http://danlu.test", "tok", transport=transport)
    with client, pytest.raises(SpecError, match="reconnect_delay"):
        next(client.follow_log_bytes("j1", reconnect_delay=delay))
    assert sent == []
