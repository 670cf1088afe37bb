"""Text UTF-8 cannot encode (a lone surrogate, as Python reads bytes that are not UTF-8 in a
command-line argument or a file name) in a request's body, path or query is refused before
anything is sent, naming the field: each was a bare UnicodeEncodeError as the request was
built."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from danlu.client import Client, InvalidRequestError
from danlu.core.errors import SpecError


def _client(sent: list[httpx.Request]) -> Client:
    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json=[])

    return Client("http://127.0.0.1:1", transport=httpx.MockTransport(answer))


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "a", "command": ["python", "data-\udcff.csv"]}, "command.1"),
        ({"name": "a\ud800", "command": ["x"]}, "name"),
        ({"name": "a", "command": ["x"], "env": {"K\udc80": "v"}}, "env"),
    ],
)
def test_a_body_with_a_lone_surrogate_is_refused_naming_the_field(
    body: dict[str, Any], field: str
) -> None:
    sent: list[httpx.Request] = []
    with _client(sent) as client, pytest.raises(InvalidRequestError) as caught:
        client.submit(body)
    assert caught.value.field == field
    assert "lone surrogate" in str(caught.value) and "not sent" in str(caught.value)
    assert sent == []


def test_an_id_with_a_lone_surrogate_is_refused_naming_it() -> None:
    sent: list[httpx.Request] = []
    with _client(sent) as client, pytest.raises(SpecError) as caught:
        client.get_job("abcd\udcff")
    assert caught.value.field == "job"
    assert "lone surrogate" in caught.value.message
    assert sent == []


@pytest.mark.parametrize(
    ("arguments", "field"),
    [({"name": "train-\udcff*"}, "name"), ({"state": ["RUNNING", "\ud800"]}, "state")],
)
def test_a_query_with_a_lone_surrogate_is_refused_naming_the_parameter(
    arguments: dict[str, Any], field: str
) -> None:
    sent: list[httpx.Request] = []
    with _client(sent) as client, pytest.raises(SpecError) as caught:
        client.list_jobs(**arguments)
    assert caught.value.field == field
    assert sent == []


def test_text_beyond_ascii_is_sent() -> None:
    sent: list[httpx.Request] = []
    with _client(sent) as client:
        assert client.list_jobs(name="träning-✓") == []
    assert sent[0].url.params["name"] == "träning-✓"
