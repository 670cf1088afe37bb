"""Followers (``Client.wait``, ``follow_log_bytes``, ``read_across_restart``) ride out a
control-plane restart behind a reverse proxy (docs/deploy.md puts one in front for other
hosts): the proxy's 502/503/504 is asked again as a refused connection is, and so is the
server's own 503 ``unavailable`` (its database cannot be reached). They ended the wait or
follow at once with a ServerError. A proxy's answer is not the server's: one that never
reached the server still fails at once."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from danlu.client import Client, ServerError, rest

JOB = "abcd00000001"


class Clock:
    """``time`` for :mod:`danlu.client.rest`: sleeps only move ``now``."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


BAD_GATEWAY = httpx.Response(502, content=b"<html><body>502 Bad Gateway</body></html>")


def outage(
    answer: Callable[[httpx.Request], httpx.Response], up: int, down: int, lost: httpx.Response
) -> Callable[[httpx.Request], httpx.Response]:
    """``answer`` for ``up`` requests, then ``lost`` for ``down``, then ``answer`` again."""
    calls = [0]

    def handler(request: httpx.Request) -> httpx.Response:
        calls[0] += 1
        if up < calls[0] <= up + down:
            return httpx.Response(lost.status_code, content=lost.content, json=None)
        return answer(request)

    return handler


def job_reply(states: list[str]) -> Callable[[httpx.Request], httpx.Response]:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/logs"):
            offset = int(request.url.params.get("offset", "0"))
            body = b"line\n"[offset:]
            return httpx.Response(200, content=body, headers={"X-Danlu-Log-Offset": "5"})
        state = states.pop(0) if len(states) > 1 else states[0]
        return httpx.Response(200, json={"id": JOB, "state": state})

    return answer


UNAVAILABLE = httpx.Response(
    503, json={"error": {"type": "unavailable", "field": None, "message": "database down"}}
)


@pytest.mark.parametrize(
    "lost",
    [BAD_GATEWAY, httpx.Response(504, content=b"timeout"), httpx.Response(503), UNAVAILABLE],
)
def test_a_wait_rides_out_a_restart_behind_a_proxy(
    lost: httpx.Response, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    monkeypatch.setattr(rest, "time", clock)
    handler = outage(job_reply(["RUNNING", "SUCCEEDED"]), up=1, down=3, lost=lost)
    with Client("http://danlu.test", "tok", transport=httpx.MockTransport(handler)) as client:
        (job,) = client.wait([JOB], poll=1.0, timeout=600)
    assert job["state"] == "SUCCEEDED"
    assert clock.now < 600


def test_a_log_follow_rides_out_a_restart_behind_a_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rest, "time", Clock())
    # the first stream and the look at the job answer; then the proxy says 502 twice
    handler = outage(job_reply(["RUNNING", "SUCCEEDED"]), up=2, down=2, lost=BAD_GATEWAY)
    with Client("http://danlu.test", "tok", transport=httpx.MockTransport(handler)) as client:
        assert b"".join(client.follow_log_bytes(JOB, reconnect_delay=0)) == b"line\n"


def test_a_read_rides_out_a_restart_behind_a_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rest, "time", Clock())
    handler = outage(job_reply(["RUNNING"]), up=1, down=2, lost=BAD_GATEWAY)
    with Client("http://danlu.test", "tok", transport=httpx.MockTransport(handler)) as client:
        client.get_job(JOB)
        assert rest.read_across_restart(client, lambda: client.get_job(JOB))["id"] == JOB


def test_a_proxy_that_never_reached_the_server_fails_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock()
    monkeypatch.setattr(rest, "time", clock)
    handler = outage(job_reply(["RUNNING"]), up=0, down=10**6, lost=BAD_GATEWAY)
    client = Client("http://danlu.test", "tok", transport=httpx.MockTransport(handler))
    with client, pytest.raises(ServerError) as caught:
        client.wait([JOB], poll=1.0)
    assert caught.value.status == 502 and clock.now == 0.0


def test_a_server_error_of_its_own_is_not_waited_out(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr(rest, "time", clock)
    internal = httpx.Response(
        500, json={"error": {"type": "internal", "field": None, "message": "boom"}}
    )
    handler = outage(job_reply(["RUNNING"]), up=1, down=10**6, lost=internal)
    client = Client("http://danlu.test", "tok", transport=httpx.MockTransport(handler))
    with client, pytest.raises(ServerError, match="boom"):
        client.wait([JOB], poll=1.0)
    assert clock.now == 1.0  # one poll, no reconnecting
