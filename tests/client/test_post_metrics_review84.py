"""``Client.post_metrics`` takes a list of records: one record alone had its keys read as
records (``{"lr": 0.1}`` went as ``[{"l": "r"}]``, ``{"step": 1}`` a bare ValueError), and a
record that is not a mapping a bare ValueError or TypeError. Now each is an
InvalidRequestError naming the field, and nothing is sent."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from danlu.client import Client, InvalidRequestError, ServerError
from danlu.core.errors import SpecError


def recording() -> tuple[Client, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"accepted": len(json.loads(request.content)["metrics"])})

    return Client("http://danlu.test", "tok", transport=httpx.MockTransport(handler)), seen


@pytest.mark.parametrize(
    ("metrics", "field", "says"),
    [
        ({"lr": 0.1}, "metrics", "not one record"),
        ({"step": 1, "loss": 0.5}, "metrics", "not one record"),
        ("step", "metrics", "(got str)"),
        (7, "metrics", "(got int)"),
        ([{"step": 1, "loss": 0.5}, "loss"], "metrics.1", "(got str)"),
        ([[("step", 1)]], "metrics.0", "(got list)"),
        ([None], "metrics.0", "(got NoneType)"),
    ],
)
def test_metrics_that_are_not_a_list_of_records_are_refused(
    metrics: Any, field: str, says: str
) -> None:
    client, seen = recording()
    with client, pytest.raises(InvalidRequestError) as caught:
        client.post_metrics("j1", metrics)
    assert isinstance(caught.value, SpecError)
    assert caught.value.field == field and caught.value.status == 0
    assert says in str(caught.value) and "not sent" in str(caught.value)
    assert caught.value.path == "/api/v1/jobs/j1/metrics"
    assert seen == []


def test_a_list_tuple_or_generator_of_records_is_sent() -> None:
    client, seen = recording()
    records = [{"step": 1, "loss": 0.5}, {"step": 2, "loss": 0.4}]
    with client:
        assert client.post_metrics("j1", records) == 2
        assert client.post_metrics("j1", tuple(records)) == 2
        assert client.post_metrics("j1", (r for r in records)) == 2
        assert client.post_metrics("j1", []) == 0
    assert [json.loads(r.content)["metrics"] for r in seen] == [records, records, records, []]


def test_a_metrics_reply_without_its_cursor_names_the_request() -> None:
    """It said only ``no X-Danlu-Metrics-Cursor``, with no request named (``path`` empty)."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=[])

    client = Client("http://danlu.test", "tok", transport=httpx.MockTransport(handler))
    with client, pytest.raises(ServerError) as caught:
        client.metrics_page("j1")
    assert str(caught.value).startswith("GET /api/v1/jobs/j1/metrics: no X-Danlu-Metrics-Cursor")
    assert (caught.value.method, caught.value.path) == ("GET", "/api/v1/jobs/j1/metrics")
