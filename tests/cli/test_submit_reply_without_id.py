"""A submission answered with a JSON object without the ``id`` of what was made (a proxy's or
another server's JSON) was taken as it was: ``danlu submit --wait``, ``danlu run`` and
``danlu submit --array`` ended in a KeyError traceback (exit 1) and ``danlu submit`` said
``submitted job None``. The client now refuses such a reply (a :class:`ServerError` saying
that the request may have been carried out, so check before sending it again): an error
line, exit 2."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from cli_fake_api import TOKEN, invoke

from danlu.cli import jobs as jobs_cli
from danlu.cli.main import app
from danlu.client import Client, ServerError

REPLIES: list[Any] = [{"state": "PENDING"}, {"id": None}, {"id": 12}, {"id": ""}]


def _client(reply: Any) -> Client:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            return httpx.Response(201, json=reply)
        body = {"type": "NotFoundError", "field": None, "message": "no such thing"}
        return httpx.Response(404, json={"error": body})

    return Client("http://fake", TOKEN, transport=httpx.MockTransport(handler))


@pytest.mark.parametrize("reply", REPLIES)
@pytest.mark.parametrize(
    "make",
    [
        lambda c: c.submit({"name": "a", "command": ["true"]}),
        lambda c: c.rerun("abc"),
        lambda c: c.submit_sweep({"name": "s"}),
    ],
    ids=["submit", "rerun", "submit_sweep"],
)
def test_a_made_thing_without_a_text_id_is_a_server_error(
    reply: Any, make: Callable[[Client], Any]
) -> None:
    with _client(reply) as client, pytest.raises(ServerError) as caught:
        make(client)
    assert "no text 'id'" in str(caught.value)
    assert "may or may not have been carried out" in str(caught.value)


def test_a_reply_with_its_id_is_returned_whole() -> None:
    with _client({"id": "0a1b2c", "state": "PENDING"}) as client:
        assert client.submit({"name": "a", "command": ["true"]}) == {
            "id": "0a1b2c",
            "state": "PENDING",
        }


@pytest.mark.parametrize(
    "args",
    [
        ["submit", "{spec}", "--wait"],
        ["submit", "{spec}"],
        ["run", "--", "true"],
        ["submit", "{spec}", "--array", "0-1"],
    ],
    ids=["submit-wait", "submit", "run", "array"],
)
def test_the_commands_say_so_in_an_error_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, args: list[str]
) -> None:
    monkeypatch.setattr(jobs_cli, "client_factory", lambda home, url, token: _client({}))
    spec = tmp_path / "job.yaml"
    spec.write_text("name: a\ncommand: [echo]\n")
    code, out, err = invoke(app, *(arg.format(spec=spec) for arg in args))
    assert code == 2, out + err
    flat = " ".join(err.split())
    assert flat.startswith("error: POST /api/v1/") and "no text 'id'" in flat, flat
    assert "check before sending it again" in flat
    assert "submitted" not in out


@pytest.mark.parametrize(
    "reply", [{"id": "s1", "total": 2}, {"id": "s1", "name": "a", "total": 2, "spec": "[2]"}]
)
def test_an_array_reply_without_its_name_or_a_spec_mapping_is_shown(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, reply: dict[str, Any]
) -> None:
    """``danlu submit --array`` read the reply's ``name`` as ``sweep['name']`` and its
    ``spec`` as a mapping: a reply without the one or with the other not a mapping (a server
    of another version) was a KeyError or AttributeError traceback, exit 1, after the array
    was submitted."""
    monkeypatch.setattr(jobs_cli, "client_factory", lambda home, url, token: _client(reply))
    spec = tmp_path / "job.yaml"
    spec.write_text("name: a\ncommand: [echo]\n")
    code, out, err = invoke(app, "submit", str(spec), "--array", "0-1")
    assert code == 0, out + err
    assert "submitted array s1" in " ".join(out.split())
