"""``Client.iter_jobs`` (what ``danlu ls --all`` and ``danlu top`` read) paged ``GET /jobs``
by overlapping offsets: each page asked for the last job of the page before again, and a job
that left the ``state`` filter sent it looking further back. It now asks for the jobs
submitted before the last one read (``before_id``), which nothing submitted or leaving the
filter meanwhile shifts; a server that does not take ``before_id`` (a 422 naming it as an
unknown query parameter) is still read by offset, as before."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from danlu.client import Client
from danlu.client.errors import InvalidRequestError
from danlu.config import load_settings
from danlu.server.app import create_app
from danlu.server.db import Database
from danlu.server.services.users import bootstrap_admin

URL = "http://danlu.test"


class Forward:
    """A transport to the API app in this process that keeps every request it forwards and
    runs ``between`` after each answer (jobs submitted or cancelled meanwhile)."""

    def __init__(self, http: TestClient) -> None:
        self.http = http
        self.requests: list[httpx.Request] = []
        self.answers: list[list[str]] = []  # the job ids each GET /jobs answered
        self.between: Callable[[], None] = lambda: None

    def __call__(self, request: httpx.Request) -> httpx.Response:
        answer = self.http.request(
            request.method, str(request.url), headers=request.headers, content=request.content
        )
        if request.method == "GET" and request.url.path == "/api/v1/jobs":
            self.requests.append(request)
            if answer.status_code == 200:
                self.answers.append([job["id"] for job in answer.json()])
            self.between()
        return httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)


@pytest.fixture
def app_client(tmp_path: Path) -> Iterator[tuple[Client, Forward]]:
    """A client of the real API app on a fresh home (no scheduler loop: jobs stay PENDING
    until cancelled), with the admin's token, and its transport."""
    settings = load_settings(home=tmp_path, fake_gpus="1x80GiB")
    app = create_app(settings, start_loops=False)
    db = Database(settings.db_url)
    with db.session() as session:
        admin_token = bootstrap_admin(session, settings.admin_token_path)
    db.dispose()
    assert admin_token is not None
    with TestClient(app) as http:
        forward = Forward(http)
        with Client(URL, admin_token, transport=httpx.MockTransport(forward)) as client:
            yield client, forward


def submit(client: Client, name: str) -> str:
    return str(client.submit({"name": name, "command": ["true"]})["id"])


def test_pages_after_the_first_ask_for_the_jobs_before_the_last_one_read(
    app_client: tuple[Client, Forward],
) -> None:
    client, forward = app_client
    ids = [submit(client, f"job-{i}") for i in range(7)][::-1]  # newest first
    assert [job["id"] for job in client.iter_jobs(page=3)] == ids
    cursors = [request.url.params.get("before_id") for request in forward.requests]
    assert cursors == [None, ids[2], ids[5]]
    # no page answers a job of another (by offset each page overlapped the one before)
    assert forward.answers == [ids[:3], ids[3:6], ids[6:]]


def test_jobs_submitted_or_leaving_the_state_between_pages_shift_no_page(
    app_client: tuple[Client, Forward],
) -> None:
    client, forward = app_client
    ids = [submit(client, f"job-{i}") for i in range(12)][::-1]
    cancelled: list[str] = []

    def between() -> None:  # after each page: its newest job leaves PENDING, a job is added
        newest = forward.answers[-1][0] if forward.answers and forward.answers[-1] else None
        if newest is not None:
            client.cancel(newest)
            cancelled.append(newest)
        submit(client, f"late-{len(forward.answers)}")

    forward.between = between
    read = [job["id"] for job in client.iter_jobs("PENDING", page=4)]
    assert read == ids  # each once, in order, none skipped, none submitted meanwhile
    assert cancelled == [ids[0], ids[4], ids[8]]  # the fourth page (none left) was empty
    assert len(forward.requests) == 4
    assert all("before_id" in r.url.params for r in forward.requests[1:])
    assert all(r.url.params.get("offset", "0") == "0" for r in forward.requests)


def test_the_server_refuses_a_cursor_of_no_job_naming_before_id(
    app_client: tuple[Client, Forward],
) -> None:
    client, _ = app_client
    submit(client, "one")
    with pytest.raises(InvalidRequestError) as caught:
        client.list_jobs(before_id="no-such-job")
    assert caught.value.field == "before_id"


def _older_server(jobs: list[dict[str, Any]], asked: list[httpx.QueryParams]) -> Client:
    """A client of a fake server of a version without ``before_id``: it refuses it as
    danlu's server refuses any query parameter it does not take; it pages by offset."""

    def handler(request: httpx.Request) -> httpx.Response:
        params = request.url.params
        asked.append(params)
        if "before_id" in params:
            return httpx.Response(
                422,
                json={
                    "error": {
                        "type": "SpecError",
                        "field": "before_id",
                        "message": "unknown query parameter 'before_id'; check the spelling "
                        "against docs/api.md (it takes limit, name, offset, project, since, "
                        "state, user)",
                    }
                },
            )
        offset, limit = int(params.get("offset", "0")), int(params["limit"])
        return httpx.Response(200, json=jobs[offset : offset + limit])

    return Client(URL, "tok", transport=httpx.MockTransport(handler), busy_retries=0)


def test_a_server_that_does_not_take_before_id_is_read_by_offset() -> None:
    jobs = [{"id": f"j{i:02d}"} for i in range(10, 0, -1)]
    asked: list[httpx.QueryParams] = []
    with _older_server(jobs, asked) as client:
        assert [job["id"] for job in client.iter_jobs(page=4)] == [j["id"] for j in jobs]
        assert sum("before_id" in params for params in asked) == 1  # asked once, refused
        offsets = [params["offset"] for params in asked if "before_id" not in params]
        assert offsets == ["0", "3", "7"]  # on from the page read, each page overlapping
        asked.clear()
        assert len(list(client.iter_jobs(page=4))) == 10
        assert not any("before_id" in params for params in asked)  # not asked again


def test_a_cursor_refused_for_another_reason_is_raised() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if "before_id" in request.url.params:
            body = {"type": "SpecError", "field": "before_id", "message": "no job 'j01'"}
            return httpx.Response(422, json={"error": body})
        return httpx.Response(200, json=[{"id": "j02"}, {"id": "j01"}])

    with (
        Client(URL, "tok", transport=httpx.MockTransport(handler)) as client,
        pytest.raises(InvalidRequestError, match="no job 'j01'"),
    ):
        list(client.iter_jobs(page=2))


def test_offset_paging_resumes_after_the_jobs_read_by_cursor() -> None:
    """The fallback to ``offset`` started again at offset 0: the first page was asked for
    twice and its jobs read twice (by cursor, then by offset)."""
    jobs = [{"id": f"j{i:02d}"} for i in range(9, 0, -1)]
    asked: list[httpx.QueryParams] = []
    with _older_server(jobs, asked) as client:
        assert [job["id"] for job in client.iter_jobs(page=3)] == [j["id"] for j in jobs]
    by_offset = [(params["offset"], params["limit"]) for params in asked[2:]]
    assert by_offset == [("2", "4"), ("5", "4"), ("8", "4")]  # none at offset 0 again


def test_a_server_that_ignores_before_id_is_read_on_from_the_first_page() -> None:
    jobs = [{"id": f"j{i:02d}"} for i in range(7, 0, -1)]
    asked: list[httpx.QueryParams] = []

    def handler(request: httpx.Request) -> httpx.Response:  # before_id dropped unread
        params = request.url.params
        asked.append(params)
        offset, limit = int(params.get("offset", "0")), int(params["limit"])
        return httpx.Response(200, json=jobs[offset : offset + limit])

    with Client(URL, "tok", transport=httpx.MockTransport(handler)) as client:
        assert [job["id"] for job in client.iter_jobs(page=3)] == [j["id"] for j in jobs]
    assert [params["offset"] for params in asked] == ["0", "0", "2", "5"]
    assert "before_id" in asked[1]
