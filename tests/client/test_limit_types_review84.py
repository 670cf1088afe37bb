"""A client limit or wait time that is not a number is a SpecError naming it: text gave a
bare TypeError (at construction, or at the first wait), a float ``busy_retries`` a bare
TypeError from ``range()`` at the first request, and ``True`` was read as one second."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from danlu.client import Client
from danlu.core.errors import SpecError


def ok(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={"id": "abcd00000001", "state": "SUCCEEDED"})


def client(**limits: Any) -> Client:
    return Client("http://danlu.test", "tok", transport=httpx.MockTransport(ok), **limits)


@pytest.mark.parametrize(
    ("limits", "field"),
    [
        ({"timeout": "30"}, "timeout"),
        ({"timeout": True}, "timeout"),
        ({"reconnect_for": "60"}, "reconnect_for"),
        ({"reconnect_for": None}, "reconnect_for"),
        ({"busy_retries": 2.0}, "busy_retries"),
        ({"busy_retries": "5"}, "busy_retries"),
        ({"busy_retries": True}, "busy_retries"),
    ],
)
def test_a_limit_of_another_type_is_refused(limits: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as caught:
        client(**limits).get_job("abcd")
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{field}: must be")


@pytest.mark.parametrize(
    ("wait", "field"),
    [
        ({"poll": "2"}, "poll"),
        ({"poll": True}, "poll"),
        ({"timeout": "10"}, "timeout"),
        ({"timeout": False}, "timeout"),
    ],
)
def test_a_wait_time_of_another_type_is_refused(wait: dict[str, Any], field: str) -> None:
    with client() as c, pytest.raises(SpecError) as caught:
        c.wait(["abcd"], **wait)
    assert caught.value.field == field


def test_a_follow_delay_that_is_text_is_refused() -> None:
    with client() as c, pytest.raises(SpecError) as caught:
        next(c.follow_log_bytes("abcd", reconnect_delay="1"))  # type: ignore[arg-type]
    assert caught.value.field == "reconnect_delay"


def test_numbers_of_either_kind_are_kept() -> None:
    with client(timeout=5, busy_retries=0, reconnect_for=1.5) as c:
        assert c.busy_retries == 0 and c.reconnect_for == 1.5
        assert c.wait(["abcd"], poll=1, timeout=3)[0]["state"] == "SUCCEEDED"
        assert c.wait(["abcd"], poll=0.5, timeout=None)[0]["state"] == "SUCCEEDED"


@pytest.mark.parametrize("ident", [None, 123456789012, 1.5, b"abcd"])
def test_an_id_that_is_not_text_is_refused_before_sending(ident: Any) -> None:
    """``get_job(None)`` or a number was a bare TypeError (``'/' in None``)."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return ok(request)

    c = Client("http://danlu.test", "tok", transport=httpx.MockTransport(handler))
    with c, pytest.raises(SpecError) as caught:
        c.get_job(ident)
    # the argument's name: every path segment was named "id" (a user's, a node's too)
    assert caught.value.field == "job" and "give it as text" in str(caught.value)
    assert seen == []
