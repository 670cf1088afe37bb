"""``wait_for``'s poll and timeout at the edges: a poll past what ``time.sleep`` takes
(about 9.2e9 s: OverflowError) sleeps a day at a time, and an infinite poll or a NaN timeout
(which never passed: the wait never ended) is refused naming the argument."""

from __future__ import annotations

import math

import httpx
import pytest

from danlu.client import Client
from danlu.client.errors import WaitTimeout
from danlu.client.waits import MAX_SLEEP, wait_for
from danlu.core.errors import SpecError


class _Clock:
    """A clock that moves only when slept on, keeping what it was asked to sleep."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float, /) -> None:
        if seconds > 9e9:  # what time.sleep refuses
            raise OverflowError("timestamp out of range for platform time_t")
        self.slept.append(seconds)
        self.now += seconds


def _client() -> Client:
    return Client(
        "http://danlu.test", "tok", transport=httpx.MockTransport(lambda r: httpx.Response(500))
    )


def _timed_out(keys: list[str], done: list[str]) -> WaitTimeout:
    return WaitTimeout(keys, [], 0.0)


def test_a_poll_longer_than_sleep_takes_looks_once_a_day() -> None:
    clock = _Clock()
    looks = iter([None, None, "ended"])
    with _client() as client:
        ended = wait_for(
            client,
            ["j"],
            lambda key: next(looks),
            timeout=None,
            poll=1e15,
            timed_out=_timed_out,
            clock=clock,
        )
    assert ended == ["ended"]
    assert clock.slept == [MAX_SLEEP, MAX_SLEEP]


def test_a_huge_poll_still_ends_at_the_timeout() -> None:
    clock = _Clock()
    with _client() as client, pytest.raises(WaitTimeout):
        wait_for(
            client,
            ["j"],
            lambda key: None,
            timeout=90.0,
            poll=1e300,
            timed_out=_timed_out,
            clock=clock,
        )
    assert clock.now == 90.0


@pytest.mark.parametrize(
    ("poll", "timeout", "named"),
    [
        (math.inf, None, "poll"),
        (math.nan, None, "poll"),
        (-1.0, None, "poll"),  # 0 is taken as MIN_POLL
        (1.0, math.nan, "timeout"),
    ],
)
def test_an_endless_poll_or_timeout_is_refused(
    poll: float, timeout: float | None, named: str
) -> None:
    clock = _Clock()
    with _client() as client, pytest.raises(SpecError, match=named):
        wait_for(
            client,
            ["j"],
            lambda key: None,
            timeout=timeout,
            poll=poll,
            timed_out=_timed_out,
            clock=clock,
        )
    assert clock.slept == []
