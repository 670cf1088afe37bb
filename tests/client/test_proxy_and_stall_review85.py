"""Client review 85:

1. ``iter_jobs`` against a server (or proxy) that ignores ``offset`` asked for the same page
   for ever; it is now a :class:`ServerError` naming the request and the cause.
2. A ``POST`` answered 502/503/504 by a reverse proxy was a plain :class:`ServerError`
   quoting the proxy's page, though the server may have carried it out: it is now a
   :class:`GatewayError` (still a ``ServerError``) saying so and how to check.
3. A path segment that is no id (None, ``..``, ``a/b``) was refused naming the field ``id``
   whatever it was (a user's name, a node's): it names the argument.
4. ``reconnect_delay=0`` made a log follow whose streams end at once a loop of requests as
   fast as the server answered: a delay below :data:`MIN_RECONNECT_DELAY` is taken as it.
5. A list argument that is no list (``wait(12345)``, ``list_jobs(state=5)``), an
   ``iter_jobs`` page given as text and an API token that is not text were bare TypeErrors:
   they are a SpecError naming the argument (a ConfigError for the token).
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from danlu.client import Client, GatewayError, ServerError, rest
from danlu.client.errors import from_proxy, out_of_reach
from danlu.core.errors import ConfigError, SpecError

URL = "http://danlu.test"


def client(handler: Callable[[httpx.Request], httpx.Response]) -> Client:
    return Client(URL, "tok", transport=httpx.MockTransport(handler), busy_retries=0)


# -- 1. a server that ignores offset ---------------------------------------------------------


def test_iter_jobs_from_a_server_that_ignores_offset_ends_with_a_server_error() -> None:
    jobs = [{"id": f"j{i:03d}"} for i in range(30, 0, -1)]
    asked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.params["offset"])
        assert len(asked) < 50, "iter_jobs did not stop"
        return httpx.Response(200, json=jobs[: int(request.url.params["limit"])])

    read: list[str] = []
    with client(handler) as c, pytest.raises(ServerError) as caught:
        read.extend(job["id"] for job in c.iter_jobs(page=5))
    assert read == [job["id"] for job in jobs[:6]]  # the first pages' jobs, once each
    assert "ignores 'offset'" in str(caught.value)
    assert caught.value.method == "GET" and caught.value.path == "/api/v1/jobs"
    assert len(asked) < 10


def test_iter_jobs_still_reads_a_server_that_pages() -> None:
    jobs = [{"id": f"j{i:03d}"} for i in range(30, 0, -1)]

    def handler(request: httpx.Request) -> httpx.Response:
        offset, limit = int(request.url.params["offset"]), int(request.url.params["limit"])
        return httpx.Response(200, json=jobs[offset : offset + limit])

    with client(handler) as c:
        assert [job["id"] for job in c.iter_jobs(page=4)] == [job["id"] for job in jobs]


# -- 2. a proxy's 502/503/504 ------------------------------------------------------------------


GATEWAY_PAGES = [
    httpx.Response(502, content=b"<html><body>502 Bad Gateway</body></html>"),
    httpx.Response(503, content=b"Service Unavailable"),
    httpx.Response(504, content=b"<html>504 Gateway Time-out</html>"),
]


@pytest.mark.parametrize("answer", GATEWAY_PAGES, ids=lambda r: str(r.status_code))
def test_a_post_answered_by_a_proxy_may_have_been_carried_out(answer: httpx.Response) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(answer.status_code, content=answer.content)

    with client(handler) as c, pytest.raises(ServerError) as caught:
        c.submit({"name": "a", "command": ["true"]})
    error = caught.value
    assert isinstance(error, GatewayError) and error.status == answer.status_code
    text = str(error)
    assert text.startswith(f"POST {URL}/api/v1/jobs: a proxy in front of the danlu server answered")
    assert "may or may not have been carried out" in text and "danlu ls" in text
    assert error.message == answer.content.decode()[:500]  # the proxy's text, as it came
    assert from_proxy(error) and out_of_reach(error)  # followers still ride it out


def test_a_read_answered_by_a_proxy_says_to_try_again_not_to_check() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(502, content=b"bad gateway")

    with client(handler) as c, pytest.raises(GatewayError) as caught:
        c.get_job("abcd")
    assert "try again" in str(caught.value) and "carried out" not in str(caught.value)
    assert "bad gateway" in str(caught.value)


@pytest.mark.parametrize(
    "answer",
    [
        httpx.Response(
            503, json={"error": {"type": "unavailable", "field": None, "message": "db down"}}
        ),
        httpx.Response(500, content=b"oops"),
        httpx.Response(
            502, json={"error": {"type": "internal", "field": None, "message": "own 502"}}
        ),
    ],
    ids=["own-503", "500", "own-502"],
)
def test_the_servers_own_errors_stay_plain_server_errors(answer: httpx.Response) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(answer.status_code, content=answer.content)

    with client(handler) as c, pytest.raises(ServerError) as caught:
        c.cancel("abcd")
    assert type(caught.value) is ServerError
    # review 86: the server's own 500 (or 502) to a POST may come after the change was
    # made, and says so; its 503 "unavailable" says what happened itself
    told = answer.status_code == 503
    assert ("may or may not" in str(caught.value)) is not told


def test_a_gateway_error_pickles_as_itself() -> None:
    error = GatewayError(504, "http", None, "timeout", "POST", "/api/v1/jobs")
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is GatewayError and str(back) == str(error)
    assert (back.status, back.message, back.method) == (504, "timeout", "POST")


# -- 3. path segments name their field ---------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda c: c.get_job(None), "job"),
        (lambda c: c.cancel(".."), "job"),
        (lambda c: c.tokens("a/b"), "user"),
        (lambda c: c.update_user("", role="admin"), "name"),
        (lambda c: c.revoke_tokens("bob", "a/b"), "prefix"),
        (lambda c: c.sweep(7), "sweep"),
        (lambda c: c.cordon(None), "node"),
        (lambda c: c.uncordon("."), "node"),
        (lambda c: c.update_project("x/y", share=2), "name"),
        (lambda c: c.ping_webhook(None), "webhook"),
        (lambda c: c.logs("a/b"), "job"),
    ],
)
def test_a_path_segment_that_is_no_id_names_its_argument(
    call: Callable[[Client], Any], field: str
) -> None:
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json={})

    with client(handler) as c, pytest.raises(SpecError) as caught:
        call(c)
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{field}: ")
    assert sent == []


# -- 4. the reconnect delay's floor -----------------------------------------------------------


class Clock:
    """``time`` for :mod:`danlu.client.rest`: sleeps are recorded, and only move ``now``."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.mark.parametrize("delay", [0, 0.0, 1e-9, 0.05])
def test_a_follow_delay_below_the_floor_is_taken_as_the_floor(
    delay: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    monkeypatch.setattr(rest, "time", clock)
    looks = [0]

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/logs"):
            return httpx.Response(200, content=b"")  # each stream ends at once, empty
        looks[0] += 1
        state = "SUCCEEDED" if looks[0] > 20 else "RUNNING"
        return httpx.Response(200, json={"id": "abcd0001", "state": state})

    with client(handler) as c:
        assert b"".join(c.follow_log_bytes("abcd0001", reconnect_delay=delay)) == b""
    assert len(clock.sleeps) == 20
    assert all(pause == rest.MIN_RECONNECT_DELAY for pause in clock.sleeps)


def test_a_follow_delay_above_the_floor_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr(rest, "time", clock)
    states = iter(["RUNNING", "SUCCEEDED"])

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/logs"):
            return httpx.Response(200, content=b"")
        return httpx.Response(200, json={"id": "abcd0001", "state": next(states)})

    with client(handler) as c:
        list(c.follow_logs("abcd0001", reconnect_delay=2.5))
    assert clock.sleeps == [2.5]


def test_a_negative_follow_delay_is_still_refused_naming_it() -> None:
    c = client(lambda r: httpx.Response(200, json={}))
    with c, pytest.raises(SpecError) as caught:
        next(c.follow_log_bytes("abcd", reconnect_delay=-0.5))
    assert caught.value.field == "reconnect_delay"


# -- 5. arguments of another type name themselves ---------------------------------------------


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda c: c.wait(12345, poll=1), "jobs"),  # was a bare TypeError: int not iterable
        (lambda c: c.list_jobs(state=5), "state"),
        (lambda c: c.list_jobs(state={"RUNNING": 1}), "state"),  # was read as its keys
        (lambda c: c.list_jobs(state=["RUNNING", 3]), "state.1"),
        (lambda c: c.sweeps(states=b"RUNNING"), "states"),
        (lambda c: c.create_project("p", members=7), "members"),
        (lambda c: c.create_webhook("http://hook.test", states=1.5), "states"),
        (lambda c: c.feed(state=True), "state"),
        (lambda c: list(c.iter_jobs(page="10")), "page"),  # was a bare TypeError on '<'
    ],
)
def test_a_list_or_page_argument_of_another_type_names_it(
    call: Callable[[Client], Any], field: str
) -> None:
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json=[])

    with client(handler) as c, pytest.raises(SpecError) as caught:
        call(c)
    assert caught.value.field == field
    assert sent == []


def test_lists_of_names_are_sent_as_before() -> None:
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json=[])

    with client(handler) as c:
        c.list_jobs(state="RUNNING")
        c.list_jobs(state=("PENDING", "RUNNING"))
        c.list_jobs(state=None)
        c.list_jobs(state=[])
    assert [r.url.params.get_list("state") for r in sent] == [
        ["RUNNING"],
        ["PENDING", "RUNNING"],
        [],
        [],
    ]


@pytest.mark.parametrize("token", [12345, b"dl_secret"])
def test_a_token_that_is_not_text_is_a_config_error(token: Any) -> None:
    with pytest.raises(ConfigError, match="the API token must be text") as caught:
        Client(URL, token)
    assert "secret" not in str(caught.value)
