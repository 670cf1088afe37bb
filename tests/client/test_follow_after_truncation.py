"""A log follow counts the offset it reopens at from 0 again past the server's note that the
log was truncated: it counted every byte received, so a follow reopened after the server's
follow timeout asked for an offset past the truncated log's end, and the output since the
truncation was shown twice."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from danlu.client import Client
from danlu.client.rest import LOG_TRUNCATED_NOTE, _offset_after
from danlu.server.routes.jobs import TRUNCATED_NOTE

JOB = "abcd00000001"
NEW_LOG = b"new 1\nnew 2\n"  # the log after its truncation


def test_the_client_knows_the_servers_note() -> None:
    assert LOG_TRUNCATED_NOTE == TRUNCATED_NOTE


@pytest.mark.parametrize("cut", [0, 1, 10, len(LOG_TRUNCATED_NOTE) - 1, len(LOG_TRUNCATED_NOTE)])
def test_the_offset_counts_from_the_notes_end_wherever_chunks_split_it(cut: int) -> None:
    stream = b"old line\n" + LOG_TRUNCATED_NOTE + b"new"
    split = len(b"old line\n") + cut
    offset, seen = _offset_after(100, b"", stream[:split])
    offset, _ = _offset_after(offset, seen, stream[split:])
    assert offset == 3


def test_bytes_without_the_note_add_up() -> None:
    offset, seen = _offset_after(5, b"", b"abc")
    assert _offset_after(offset, seen, b"de")[0] == 10


class Server:
    """A job whose first follow stream brings its old output, the note and the new log's
    first line, then ends (the server's follow timeout); the next follow is answered from
    the offset asked in the new log."""

    def __init__(self) -> None:
        self.follows: list[int] = []
        self.job_reads = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path.removeprefix("/api/v1/jobs/")
        if path == JOB:
            self.job_reads += 1
            state = "RUNNING" if self.job_reads == 1 else "SUCCEEDED"
            return httpx.Response(200, json={"id": JOB, "state": state})
        offset = int(request.url.params.get("offset", "0"))
        if request.url.params.get("follow") == "true":
            self.follows.append(offset)
            if len(self.follows) == 1:
                return httpx.Response(200, content=b"old\n" + TRUNCATED_NOTE + NEW_LOG[:6])
            return httpx.Response(200, content=NEW_LOG[offset:])
        text = NEW_LOG[offset:]
        headers: dict[str, Any] = {"X-Danlu-Log-Offset": str(offset + len(text))}
        return httpx.Response(200, content=text, headers=headers)


def test_a_follow_reopened_after_a_truncation_goes_on_from_the_new_log() -> None:
    server = Server()
    with Client("http://danlu.test", "tok", transport=httpx.MockTransport(server)) as client:
        got = b"".join(client.follow_log_bytes(JOB, reconnect_delay=0))
    assert server.follows == [0, 6]  # was [0, 4 + len(note) + 6]: past the new log's end
    assert got == b"old\n" + TRUNCATED_NOTE + NEW_LOG
