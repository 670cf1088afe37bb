"""The REST client answers a reply of the wrong shape (JSON, but not what the API sends:
a proxy's page, a server of another version) with ServerError naming the request, not
a raw TypeError, KeyError or ValueError."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from danlu.client import Client
from danlu.client.errors import ServerError
from danlu.client.rest import LOG_OFFSET_HEADER, METRICS_CURSOR_HEADER


def _client(body: Any, headers: dict[str, str] | None = None) -> Client:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=json.dumps(body).encode(), headers=headers or {})

    return Client("http://danlu.test", "tok", transport=httpx.MockTransport(handler))


CALLS: dict[str, Callable[[Client], Any]] = {
    "get_job": lambda c: c.get_job("j1"),
    "list_jobs": lambda c: c.list_jobs(),
    "health": lambda c: c.health(),
    "sweeps": lambda c: c.sweeps(),
    "webhooks": lambda c: c.webhooks(),
    "webhook_deliveries": lambda c: c.webhook_deliveries("w1"),
}


@pytest.mark.parametrize("name", sorted(CALLS))
@pytest.mark.parametrize("body", [None, 7, "text", [1, 2], {"a": 1}])
def test_a_reply_of_the_wrong_shape_is_a_server_error(name: str, body: Any) -> None:
    with _client(body) as client:
        try:
            result = CALLS[name](client)
        except ServerError as exc:
            assert "expected a JSON" in str(exc)
            assert "/" in str(exc)  # names the request's path
        else:
            # only a reply of the right shape gets through, and then as it came
            assert isinstance(result, (dict, list))
            if isinstance(result, list):
                assert all(isinstance(item, dict) for item in result)


def test_a_list_of_jobs_as_an_object_is_named() -> None:
    with _client({"jobs": []}) as client, pytest.raises(ServerError) as caught:
        client.list_jobs()
    assert "GET /api/v1/jobs: expected a JSON array, got dict" in str(caught.value)


def test_a_job_reply_that_is_null_is_named() -> None:
    with _client(None) as client, pytest.raises(ServerError) as caught:
        client.get_job("j1")
    assert "GET /api/v1/jobs/j1: expected a JSON object, got null" in str(caught.value)


def test_a_record_that_is_not_an_object_is_named() -> None:
    with _client([{"id": "w1"}, "w2"]) as client, pytest.raises(ServerError) as caught:
        client.webhooks()
    assert "expected a JSON object, got str" in str(caught.value)


@pytest.mark.parametrize("body", [{}, {"accepted": "3"}, {"accepted": True}, [3]])
def test_a_count_missing_or_not_a_number_is_named(body: Any) -> None:
    with _client(body) as client, pytest.raises(ServerError) as caught:
        client.post_metrics("j1", [{"step": 1, "loss": 0.5}])
    assert "POST /api/v1/jobs/j1/metrics" in str(caught.value)


def test_counts_and_tokens_of_the_right_type_come_back() -> None:
    with _client({"accepted": 3, "revoked": 2, "token": "abc"}) as client:
        assert client.post_metrics("j1", [{"step": 1, "loss": 0.5}]) == 3
        assert client.revoke_tokens("alice") == 2
        assert client.create_token("alice") == "abc"


def test_a_token_reply_without_the_token_is_named() -> None:
    with _client({"name": "x"}) as client, pytest.raises(ServerError) as caught:
        client.create_token("alice")
    assert "no str 'token'" in str(caught.value)


def _odd_header(name: str, body: bytes) -> httpx.MockTransport:
    """A reply whose header ``name`` is a superscript two: a digit to str.isdigit, not to
    int()."""

    def handler(request: httpx.Request) -> httpx.Response:
        headers = [(name.encode(), "\u00b2".encode())]
        return httpx.Response(200, content=body, headers=headers)

    return httpx.MockTransport(handler)


def test_a_log_offset_of_non_ascii_digits_falls_back_to_the_length() -> None:
    transport = _odd_header(LOG_OFFSET_HEADER, b"hello")
    with Client("http://danlu.test", "tok", transport=transport) as client:
        assert client.logs("j1", 10) == ("hello", 15)


def test_a_metrics_cursor_of_non_ascii_digits_is_a_server_error() -> None:
    transport = _odd_header(METRICS_CURSOR_HEADER, b"[]")
    client = Client("http://danlu.test", "tok", transport=transport)
    with client, pytest.raises(ServerError, match=METRICS_CURSOR_HEADER):
        client.metrics_page("j1")
