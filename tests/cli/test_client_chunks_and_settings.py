"""The client and the settings at their edges, against httpx.MockTransport: whole logs
read chunk by chunk, a log follow opened again when the server ends it early, an empty
token prefix refused, ``iter_jobs`` without a job twice, and the empty ``DANLU_HOME`` /
``DANLU_PORT=0`` settings."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from danlu.cli.run import attach
from danlu.client import Client
from danlu.config import load_client_settings, load_settings
from danlu.core.errors import ConfigError, SpecError

URL = "http://danlu.test:8470"


def test_read_logs_reads_every_chunk_and_keeps_split_characters() -> None:
    log = "héllo wörld\n".encode() * 5

    def handler(request: httpx.Request) -> httpx.Response:
        offset = int(request.url.params["offset"])
        data = log[offset : offset + 4]
        return httpx.Response(200, content=data, headers={"X-Danlu-Log-Offset": str(offset + 4)})

    c = Client(URL, "tok", transport=httpx.MockTransport(handler))
    assert "".join(c.read_logs("abc")) == log.decode()
    assert c.logs("abc")[1] == 4  # one request: one chunk


class EarlyEnd:
    """A server whose follow streams end before the job does: the first stream brings
    ``start``, the second ``done``; the job is RUNNING until the third look at it."""

    def __init__(self) -> None:
        self.log = b"start\ndone\n"
        self.follows: list[int] = []
        self.looks = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/logs"):
            offset = int(request.url.params["offset"])
            if request.url.params.get("follow") == "true":
                self.follows.append(offset)
                end = 6 if len(self.follows) == 1 else len(self.log)
                return httpx.Response(200, content=self.log[offset:end])
            return httpx.Response(200, content=self.log[offset:])
        if request.url.path.endswith("/why"):
            return httpx.Response(200, json={"id": "abc", "state": "RUNNING", "reason": "x"})
        self.looks += 1
        state = "SUCCEEDED" if self.looks >= 3 else "RUNNING"
        return httpx.Response(200, json={"id": "abc", "state": state, "exit_code": 0})


def test_follow_logs_reconnects_from_the_offset_until_the_job_ends() -> None:
    server = EarlyEnd()
    c = Client(URL, "tok", transport=httpx.MockTransport(server))
    assert "".join(c.follow_logs("abc", reconnect_delay=0)) == "start\ndone\n"
    assert server.follows == [0, 6, 11]  # the third stream found nothing new, then it ended


def test_danlu_run_attach_follows_past_an_early_end(capsys: pytest.CaptureFixture[str]) -> None:
    server = EarlyEnd()
    c = Client(URL, "tok", transport=httpx.MockTransport(server))
    assert attach(c, "abc") == 0
    assert capsys.readouterr().out == "start\ndone\n"


def test_an_empty_token_prefix_is_refused_and_none_revokes_all() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"revoked": 2})

    c = Client(URL, "tok", transport=httpx.MockTransport(handler))
    with pytest.raises(SpecError, match="prefix is empty"):
        c.revoke_tokens("bob", "")
    assert seen == []
    assert c.revoke_tokens("bob") == 2
    assert seen[-1].method == "DELETE" and seen[-1].url.path == "/api/v1/users/bob/tokens"
    c.revoke_tokens("bob", "dl_ab")
    assert seen[-1].url.path == "/api/v1/users/bob/tokens/dl_ab"


def test_iter_jobs_yields_no_job_twice_when_one_is_submitted_meanwhile() -> None:
    jobs = [{"id": f"j{i:02d}"} for i in range(25, 0, -1)]  # newest first

    def handler(request: httpx.Request) -> httpx.Response:
        offset, limit = int(request.url.params["offset"]), int(request.url.params["limit"])
        page = jobs[offset : offset + limit]
        if offset == 0:
            jobs.insert(0, {"id": "j26"})  # submitted after the first page was read
        return httpx.Response(200, json=page)

    c = Client(URL, "tok", transport=httpx.MockTransport(handler))
    ids = [j["id"] for j in c.iter_jobs(page=10)]
    assert len(ids) == len(set(ids)) == 25


def test_an_empty_danlu_home_is_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    for value in ("", "  "):
        monkeypatch.setenv("DANLU_HOME", value)
        assert load_settings().home == Path("~/.danlu").expanduser()
        assert load_client_settings().home == Path("~/.danlu").expanduser()
    monkeypatch.setenv("DANLU_HOME", "/srv/danlu")
    assert load_settings().home == Path("/srv/danlu")


def test_danlu_port_0_means_any_free_port(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DANLU_PORT", "0")
    assert load_settings().port == 0
    monkeypatch.setenv("DANLU_PORT", "-1")
    with pytest.raises(ConfigError, match=r"DANLU_PORT: .*0\.\.65535"):
        load_settings()
