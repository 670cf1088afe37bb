"""Client review 86:

1. The server's own 500 to a ``POST`` (or ``PUT``, ``PATCH``, ``DELETE``) was a plain
   :class:`ServerError` quoting "internal server error", though the server commits a change
   before it builds its answer (a 500 may come after the change was made), while a proxy's
   502/503/504 said the change may or may not have been made: a :class:`ServerError` to a
   request that changes something now says so too, and so does an answer of 2xx that cannot
   be read (the request was taken). The server's 503 ``busy`` and ``unavailable`` say what
   happened themselves, and a read says nothing of the kind.
2. ``Client.wait(poll=1e-9)`` (or ``wait_for``'s) asked the server as fast as it answered:
   a poll below :data:`~danlu.client.waits.MIN_POLL` is taken as it, as a log follow's
   ``reconnect_delay`` below ``MIN_RECONNECT_DELAY`` is; ``poll=0`` too (it was refused,
   while 1e-9 was taken as it came).
3. Arguments that were bare Python errors: ``submit(None)`` / ``submit("name: x")`` /
   ``submit_sweep(None)`` (TypeError, ValueError of ``dict()``), a log offset that is no
   whole number (``"0"``: a TypeError after the first chunk), ``wait(on_end=5)`` (a
   TypeError once a job had ended), ``find_server(123)`` / ``Client.from_home(123)``.
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from danlu.client import Client, GatewayError, ServerError, find_server, rest
from danlu.client.errors import WaitTimeout
from danlu.client.waits import MIN_POLL, wait_for
from danlu.core.errors import ConfigError, SpecError

URL = "http://danlu.test"
SPEC = {"name": "a", "command": ["true"]}
INTERNAL = {"error": {"type": "internal", "field": None, "message": "internal server error"}}


def client(handler: Callable[[httpx.Request], httpx.Response]) -> Client:
    return Client(URL, "tok", transport=httpx.MockTransport(handler), busy_retries=0)


def answering(status: int, **body: Any) -> Client:
    return client(lambda request: httpx.Response(status, **body))


# -- 1. what a ServerError says of a request that changes something ---------------------------

CHANGES: dict[str, Callable[[Client], Any]] = {
    "POST": lambda c: c.submit(SPEC),
    "PUT": lambda c: c.update_project("p", share=2.0),
    "PATCH": lambda c: c.update_job("abcd", priority=3),
    "DELETE": lambda c: c.remove_webhook("w1"),
}


@pytest.mark.parametrize("method", sorted(CHANGES))
def test_the_servers_500_to_a_change_may_have_been_carried_out(method: str) -> None:
    with answering(500, json=INTERNAL) as c, pytest.raises(ServerError) as caught:
        CHANGES[method](c)
    error = caught.value
    assert type(error) is ServerError  # not a proxy's: still a plain ServerError
    assert (error.status, error.type, error.message) == (500, "internal", "internal server error")
    assert error.method == method
    text = str(error)
    assert text.startswith("internal server error; ")  # the server's message first, as before
    assert f"{method} {error.path} may or may not have been carried out" in text
    assert "the server may have made the change before it failed (500)" in text
    assert "check before sending it again" in text and "danlu ls" in text


def test_the_servers_500_to_a_read_says_only_what_the_server_said() -> None:
    with answering(500, json=INTERNAL) as c, pytest.raises(ServerError) as caught:
        c.get_job("abcd")
    assert str(caught.value) == "internal server error"


def test_a_plain_500_page_to_a_post_says_so_too() -> None:
    with answering(500, content=b"oops") as c, pytest.raises(ServerError) as caught:
        c.cancel("abcd")
    assert type(caught.value) is ServerError
    text = str(caught.value)  # named with its status and URL: not a danlu server's words
    assert text.startswith(f"POST {URL}/api/v1/jobs/abcd/cancel: answered 500 ")
    assert "(oops)" in text and "; POST /api/v1/jobs/abcd/cancel may or may not" in text


@pytest.mark.parametrize(
    ("kind", "said"),
    [("busy", "nothing was changed"), ("unavailable", "the database cannot be reached")],
)
def test_the_servers_own_503_to_a_post_says_what_happened_itself(kind: str, said: str) -> None:
    body = {"error": {"type": kind, "field": None, "message": said}}
    with answering(503, json=body) as c, pytest.raises(ServerError) as caught:
        c.submit(SPEC)
    assert str(caught.value) == said


@pytest.mark.parametrize("status", [200, 201])
def test_an_unreadable_answer_to_a_post_says_it_was_taken(status: int) -> None:
    with answering(status, content=b"<html>?</html>") as c, pytest.raises(ServerError) as caught:
        c.submit(SPEC)
    text = str(caught.value)
    assert text.startswith("POST /api/v1/jobs: not JSON")
    assert f"may or may not have been carried out (an answer {status} says it was taken" in text


def test_a_gateway_error_words_its_own_message_once() -> None:
    with answering(502, content=b"bad gateway") as c, pytest.raises(GatewayError) as caught:
        c.submit(SPEC)
    assert str(caught.value).count("may or may not have been carried out") == 1


def test_a_server_error_pickles_with_its_warning() -> None:
    error = ServerError(500, "internal", None, "boom", "POST", "/api/v1/jobs")
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is ServerError and str(back) == str(error)
    assert "may or may not have been carried out" in str(back)


def test_a_server_error_without_a_method_says_only_its_message() -> None:
    """The CLI makes ServerErrors of replies it cannot read, naming no request."""
    assert str(ServerError(200, "http", None, "bad reply")) == "bad reply"


# -- 2. the poll's floor -------------------------------------------------------------------------


class _Clock:
    """A clock that moves only when slept on, keeping what it was asked to sleep."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float, /) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.mark.parametrize("poll", [0.0, 1e-9, 0.05])
def test_a_poll_below_the_floor_is_taken_as_it(poll: float) -> None:
    clock = _Clock()
    looks = iter([None, None, "ended"])
    with answering(200, json={}) as c:
        ended = wait_for(
            c,
            ["j"],
            lambda key: next(looks),
            timeout=None,
            poll=poll,
            timed_out=lambda keys, done: WaitTimeout(keys, [], 0.0),
            clock=clock,
        )
    assert ended == ["ended"]
    assert clock.slept == [MIN_POLL, MIN_POLL]


def test_client_wait_with_a_tiny_poll_asks_once_per_floor(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock()
    monkeypatch.setattr(rest, "time", clock)
    asked: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(clock.now)
        state = "SUCCEEDED" if len(asked) == 4 else "RUNNING"
        return httpx.Response(200, json={"id": "abcd", "state": state})

    with client(handler) as c:
        assert c.wait("abcd", poll=1e-9)[0]["state"] == "SUCCEEDED"
    assert clock.slept == [MIN_POLL] * 3
    assert asked == pytest.approx([0.0, MIN_POLL, 2 * MIN_POLL, 3 * MIN_POLL])


@pytest.mark.parametrize("poll", [-1.0, -1e-9, math.nan, math.inf])
def test_a_poll_that_is_no_pause_is_still_refused(poll: float) -> None:
    with answering(200, json={}) as c, pytest.raises(SpecError) as caught:
        c.wait("abcd", poll=poll)
    assert caught.value.field == "poll"


def test_an_on_end_that_is_no_function_is_refused_before_asking() -> None:
    asked: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request)
        return httpx.Response(200, json={"id": "abcd", "state": "SUCCEEDED"})

    with client(handler) as c, pytest.raises(SpecError) as caught:
        c.wait("abcd", on_end=5)  # type: ignore[arg-type]
    assert caught.value.field == "on_end" and asked == []


# -- 3. arguments of the wrong kind -----------------------------------------------------------


@pytest.mark.parametrize("spec", [None, "name: x", [("name", "x")], 5])
@pytest.mark.parametrize("call", ["submit", "submit_sweep"])
def test_a_spec_that_is_no_mapping_is_named_and_not_sent(call: str, spec: Any) -> None:
    asked: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request)
        return httpx.Response(201, json={"id": "abcd"})

    with client(handler) as c, pytest.raises(SpecError) as caught:
        getattr(c, call)(spec)
    assert caught.value.field == "spec" and "mapping" in str(caught.value)
    assert asked == []


def test_a_spec_mapping_is_still_sent_as_it_is() -> None:
    sent: list[bytes] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request.content)
        return httpx.Response(201, json={"id": "abcd"})

    with client(handler) as c:
        assert c.submit(SPEC) == {"id": "abcd"}
        assert c.submit_sweep({"name": "s"}) == {"id": "abcd"}
    assert sent == [b'{"name":"a","command":["true"]}', b'{"name":"s"}']


LOG_CALLS: dict[str, Callable[[Client, Any], Any]] = {
    "logs": lambda c, offset: c.logs("abcd", offset),
    "read_logs": lambda c, offset: list(c.read_logs("abcd", offset)),
    "read_log_bytes": lambda c, offset: list(c.read_log_bytes("abcd", offset)),
    "follow_logs": lambda c, offset: list(c.follow_logs("abcd", offset)),
    "follow_log_bytes": lambda c, offset: list(c.follow_log_bytes("abcd", offset)),
}


@pytest.mark.parametrize("offset", ["0", 1.5, None, True, -1])
@pytest.mark.parametrize("call", sorted(LOG_CALLS))
def test_a_log_offset_that_is_no_byte_count_is_named(call: str, offset: Any) -> None:
    asked: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request)
        return httpx.Response(200, content=b"abc", headers={rest.LOG_OFFSET_HEADER: "3"})

    with client(handler) as c, pytest.raises(SpecError) as caught:
        LOG_CALLS[call](c, offset)
    assert caught.value.field == "offset" and asked == []


def test_a_log_read_from_a_whole_offset_still_reads() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        offset = int(request.url.params["offset"])
        data = b"hello"[offset:]
        return httpx.Response(200, content=data, headers={rest.LOG_OFFSET_HEADER: "5"})

    with client(handler) as c:
        assert list(c.read_log_bytes("abcd", 2)) == [b"llo"]


@pytest.mark.parametrize("home", [123, 1.5, b"/tmp"])
def test_a_home_that_is_no_path_is_a_config_error(home: Any) -> None:
    with pytest.raises(ConfigError, match="the danlu home must be a path"):
        find_server(home)
    with pytest.raises(ConfigError, match="the danlu home must be a path"):
        Client.from_home(home)
