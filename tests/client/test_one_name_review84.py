"""A single string where the client takes a list of names (states, members, job ids) is
one name: it was read character by character (``feed(state="FAILED")`` asked for the
states ``F``, ``A``, ``I``...; ``create_project(members="alice")`` for five one-letter
users; ``wait("abcdef123456")`` for twelve one-character jobs)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from danlu.client import Client

JOB = "abcdef123456"


def recording() -> tuple[Client, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path.endswith(f"/jobs/{JOB}"):
            return httpx.Response(200, json={"id": JOB, "state": "SUCCEEDED"})
        if request.method == "GET" and request.url.path.endswith(("/events", "/sweeps", "/jobs")):
            return httpx.Response(200, json=[])
        return httpx.Response(200, json={"id": "x"})

    client = Client("http://danlu.test", "tok", transport=httpx.MockTransport(handler))
    return client, seen


QUERIES: dict[str, tuple[Callable[[Client], Any], str]] = {
    "feed": (lambda c: c.feed(state="FAILED"), "state"),
    "sweeps": (lambda c: c.sweeps(states="RUNNING"), "state"),
    "list_jobs": (lambda c: c.list_jobs("FAILED"), "state"),
}


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_one_state_in_a_query_is_one_state(name: str) -> None:
    call, param = QUERIES[name]
    client, seen = recording()
    with client:
        call(client)
    (request,) = seen
    assert len(request.url.params.get_list(param)) == 1
    assert request.url.params[param] in ("FAILED", "RUNNING")


BODIES: dict[str, tuple[Callable[[Client], Any], str, list[str]]] = {
    "webhook": (
        lambda c: c.create_webhook("http://hook.test", states="FAILED"),
        "states",
        ["FAILED"],
    ),
    "project": (lambda c: c.create_project("vision", members="alice"), "members", ["alice"]),
}


@pytest.mark.parametrize("name", sorted(BODIES))
def test_one_name_in_a_body_is_one_name(name: str) -> None:
    call, field, want = BODIES[name]
    client, seen = recording()
    with client:
        call(client)
    (request,) = seen
    assert json.loads(request.content)[field] == want


def test_waiting_for_one_job_given_as_a_string_waits_for_that_job() -> None:
    client, seen = recording()
    with client:
        assert client.wait(JOB, poll=0.01, timeout=5) == [{"id": JOB, "state": "SUCCEEDED"}]
    assert [r.url.path for r in seen] == [f"/api/v1/jobs/{JOB}"]


def test_lists_are_sent_as_before() -> None:
    client, seen = recording()
    with client:
        client.feed(state=["FAILED", "CANCELLED"])
        client.create_project("vision", members=["alice", "bob"])
        client.create_webhook("http://hook.test", states=[])
        client.sweeps(states=[])
    feed, project, webhook, sweeps = seen
    assert feed.url.params.get_list("state") == ["FAILED", "CANCELLED"]
    assert json.loads(project.content)["members"] == ["alice", "bob"]
    assert "states" not in json.loads(webhook.content)
    assert "state" not in sweeps.url.params
