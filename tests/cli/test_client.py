"""danlu.client against httpx.MockTransport: every method sends the documented method, path,
query and body of docs/api.md, and error bodies map to DanluError subclasses keeping the
server's type, field and message."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from danlu import client as api
from danlu.client import Client
from danlu.core.errors import ConfigError, DanluError, SpecError, UnschedulableError
from danlu.core.spec import parse_spec

URL = "http://danlu.test:8470"


class Recorder:
    """A transport that records requests and answers ``reply`` (status, JSON/bytes, headers)."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []
        self.status = 200
        self.body: Any = {}
        self.headers: dict[str, str] = {}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if isinstance(self.body, bytes):
            return httpx.Response(self.status, content=self.body, headers=self.headers)
        return httpx.Response(self.status, json=self.body, headers=self.headers)

    @property
    def last(self) -> httpx.Request:
        return self.requests[-1]


@pytest.fixture
def rec() -> Recorder:
    return Recorder()


@pytest.fixture
def client(rec: Recorder) -> Client:
    return Client(URL, "tok", transport=httpx.MockTransport(rec))


SPEC = {"name": "hello", "command": ["python", "-c", "print('hello')"]}

# (call, method, path, query, json body, answer)
CASES: list[tuple[Callable[[Client], Any], str, str, dict[str, Any], Any, Any]] = [
    (lambda c: c.health(), "GET", "/health", {}, None, {"status": "ok", "version": "0.1"}),
    (lambda c: c.me(), "GET", "/users/me", {}, None, {"name": "root", "role": "admin"}),
    (lambda c: c.create_user("bob"), "POST", "/users", {}, {"name": "bob", "role": "user"}, {}),
    (lambda c: c.submit(SPEC), "POST", "/jobs", {}, SPEC, {"id": "a1"}),
    (lambda c: c.list_jobs(), "GET", "/jobs", {}, None, []),
    (
        lambda c: c.list_jobs(["RUNNING", "PENDING"], project="p", user="u", limit=5, offset=10),
        "GET",
        "/jobs",
        {
            "state": ["RUNNING", "PENDING"],
            "project": ["p"],
            "user": ["u"],
            "limit": ["5"],
            "offset": ["10"],
        },
        None,
        [],
    ),
    (lambda c: c.get_job("abc"), "GET", "/jobs/abc", {}, None, {"id": "abc"}),
    (lambda c: c.cancel("abc"), "POST", "/jobs/abc/cancel", {}, None, {"id": "abc"}),
    (
        lambda c: c.events("abc", after_id=3, limit=7),
        "GET",
        "/jobs/abc/events",
        {"after_id": ["3"], "limit": ["7"]},
        None,
        [],
    ),
    (lambda c: c.why("abc"), "GET", "/jobs/abc/why", {}, None, {"reason": "r"}),
    (
        lambda c: c.post_metrics("abc", [{"step": 1, "loss": 0.5}]),
        "POST",
        "/jobs/abc/metrics",
        {},
        {"metrics": [{"step": 1, "loss": 0.5}]},
        {"accepted": 1},
    ),
    (
        lambda c: c.metrics("abc", after_step=2),
        "GET",
        "/jobs/abc/metrics",
        {"after_step": ["2"]},
        None,
        [],
    ),
    (lambda c: c.projects(), "GET", "/projects", {}, None, []),
    (
        lambda c: c.create_project("vision", 5, quota_gpus=4, share=2.0),
        "POST",
        "/projects",
        {},
        {
            "name": "vision",
            "priority": 5,
            "quota_gpus": 4,
            "quota_gpu_memory": None,
            "share": 2.0,
            "members": [],
        },
        {},
    ),
    (
        lambda c: c.update_project("vision", priority=2),
        "PUT",
        "/projects/vision",
        {},
        {"priority": 2},
        {},
    ),
    (lambda c: c.nodes(), "GET", "/cluster/nodes", {}, None, []),
    (lambda c: c.allocations(), "GET", "/cluster/allocations", {}, None, []),
    (
        lambda c: c.create_token("bob", "ci"),
        "POST",
        "/users/bob/tokens",
        {},
        {"name": "ci"},
        {"token": "t0k"},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[1]} {c[2]}")
def test_each_method_hits_the_documented_route(
    case: tuple[Callable[[Client], Any], str, str, dict[str, Any], Any, Any],
    rec: Recorder,
    client: Client,
) -> None:
    call, method, path, query, body, answer = case
    rec.body = answer
    rec.status = 201 if method == "POST" and path in ("/jobs", "/projects", "/users") else 200
    result = call(client)
    req = rec.last
    assert req.method == method
    assert req.url.path == "/api/v1" + path
    assert {k: req.url.params.get_list(k) for k in req.url.params} == query
    assert req.headers["authorization"] == "Bearer tok"
    if body is None:
        assert req.content == b""
    else:
        assert json.loads(req.content) == body
    if path.endswith("/tokens"):
        assert result == "t0k"
    elif path.endswith("/metrics") and method == "POST":
        assert result == 1
    else:
        assert result == answer


def test_submit_accepts_a_jobspec_and_sends_its_json_form(rec: Recorder, client: Client) -> None:
    spec = parse_spec(SPEC | {"resources": {"gpus": 2, "gpu_memory": "20GiB"}, "priority": 3})
    rec.body = {"id": "x"}
    client.submit(spec)
    sent = json.loads(rec.last.content)
    assert sent["name"] == "hello"
    assert sent["priority"] == 3
    assert sent["resources"]["gpu_memory"] == 20 * 1024**3
    assert parse_spec(sent) == spec  # the server can read it back


def test_url_may_carry_the_api_prefix_and_job_ids_cannot_escape(
    rec: Recorder,
) -> None:
    c = Client(URL + "/api/v1/", "tok", transport=httpx.MockTransport(rec))
    rec.body = {"id": "x"}
    c.get_job("a?b#c")
    assert rec.last.url.raw_path.decode().startswith("/api/v1/jobs/a%3Fb%23c")
    # no id or name holds a '/': refused before any request, not sent to a 404 "Not Found"
    for bad in ("..", "a/../../users", "../../etc/passwd"):
        with pytest.raises(SpecError, match="not a valid id or name"):
            c.get_job(bad)


@pytest.mark.parametrize("url", ["notaurl", "ftp://x", "http://[::1", "http://"])
def test_a_url_that_names_no_http_server_is_a_config_error(url: str) -> None:
    with pytest.raises(ConfigError, match="server URL"):
        Client(url, "t")


def test_no_token_sends_no_authorization(rec: Recorder) -> None:
    Client(URL, None, transport=httpx.MockTransport(rec)).health()
    assert "authorization" not in rec.last.headers


def test_logs_returns_text_and_next_offset(rec: Recorder, client: Client) -> None:
    rec.body = "héllo\n".encode()
    rec.headers = {"X-Danlu-Log-Offset": "107"}
    text, offset = client.logs("abc", 100)
    assert (text, offset) == ("héllo\n", 107)
    assert rec.last.url.params["offset"] == "100"
    rec.headers = {}
    assert client.logs("abc", 3)[1] == 3 + len("héllo\n".encode())


def test_follow_logs_streams_with_follow_true(rec: Recorder) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        rec.requests.append(request)
        if request.url.path.endswith("/logs"):
            follow = request.url.params.get("follow") == "true"
            return httpx.Response(200, content=b"line 1\nline 2\n" if follow else b"")
        return httpx.Response(200, json={"id": "abc", "state": "SUCCEEDED"})

    c = Client(URL, "tok", transport=httpx.MockTransport(handler))
    assert "".join(c.follow_logs("abc")) == "line 1\nline 2\n"
    first = rec.requests[0]
    assert first.url.params["follow"] == "true"
    assert first.url.path == "/api/v1/jobs/abc/logs"


def test_iter_jobs_pages_until_a_short_page(rec: Recorder) -> None:
    jobs = [{"id": str(i)} for i in range(4)]

    def handler(request: httpx.Request) -> httpx.Response:
        rec.requests.append(request)
        params = request.url.params
        start = int(params["before_id"]) + 1 if "before_id" in params else 0
        return httpx.Response(200, json=jobs[start : start + int(params["limit"])])

    c = Client(URL, "tok", transport=httpx.MockTransport(handler))
    assert [j["id"] for j in c.iter_jobs(page=3)] == ["0", "1", "2", "3"]
    # each page after the first: the jobs before the last one read (a cursor)
    asked = [(r.url.params.get("before_id"), r.url.params["limit"]) for r in rec.requests]
    assert asked == [(None, "3"), ("2", "3")]


ERRORS = [
    (401, "AuthError", None, "missing or invalid API token", api.AuthError),
    (403, "PermissionDenied", "id", "job 1 belongs to bob", api.PermissionDenied),
    (404, "NotFoundError", "id", "job 'zz' not found", api.NotFoundError),
    (409, "ConflictError", "state", "job is already SUCCEEDED", api.ConflictError),
    (422, "SpecError", "resources.gpus", "a GPU count cannot be negative", api.InvalidRequestError),
    (422, "AdmissionError", "resources.gpus", "needs 9 GPUs", api.UnschedulableRequestError),
    (500, "http", None, "internal error", api.ServerError),
    (418, "http", None, "teapot", api.ApiError),
]


@pytest.mark.parametrize(
    "status,kind,field,message,cls", ERRORS, ids=[str(e[0]) + e[1] for e in ERRORS]
)
def test_error_bodies_map_to_danlu_errors(
    rec: Recorder,
    client: Client,
    status: int,
    kind: str,
    field: str | None,
    message: str,
    cls: type[api.ApiError],
) -> None:
    rec.status = status
    rec.body = {"error": {"type": kind, "field": field, "message": message}}
    with pytest.raises(cls) as info:
        client.get_job("zz")
    exc = info.value
    assert isinstance(exc, DanluError)
    assert (exc.status, exc.type, exc.field, exc.message) == (status, kind, field, message)
    assert str(exc) == (f"{field}: {message}" if field else message)
    assert (exc.method, exc.path) == ("GET", "/api/v1/jobs/zz")


def test_spec_and_unschedulable_errors_are_in_the_core_branches(
    rec: Recorder, client: Client
) -> None:
    rec.status = 422
    rec.body = {"error": {"type": "SpecError", "field": "name", "message": "use letters"}}
    with pytest.raises(SpecError) as spec_err:
        client.submit(SPEC)
    assert spec_err.value.field == "name"
    rec.body = {"error": {"type": "AdmissionError", "field": "resources", "message": "too big"}}
    with pytest.raises(UnschedulableError):
        client.submit(SPEC)


def test_non_contract_error_bodies_still_map(rec: Recorder, client: Client) -> None:
    rec.status = 422
    rec.body = {"detail": [{"loc": ["query", "limit"], "msg": "less than or equal to 1000"}]}
    with pytest.raises(api.InvalidRequestError) as info:
        client.list_jobs(limit=5000)
    assert info.value.field == "limit"
    rec.status = 502
    rec.body = b"bad gateway"
    with pytest.raises(api.ServerError, match="bad gateway"):
        client.health()


def test_unreachable_server_is_a_danlu_error() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    c = Client(URL, "t", transport=httpx.MockTransport(refuse))
    with pytest.raises(api.ServerUnavailable, match="cannot reach the danlu server at"):
        c.health()
    with pytest.raises(api.ServerUnavailable):
        list(c.follow_logs("abc"))


def test_from_home_reads_server_json_and_admin_token(tmp_path: Path, rec: Recorder) -> None:
    (tmp_path / "server.json").write_text(json.dumps({"url": URL, "pid": 1, "started_at": 0}))
    (tmp_path / "admin.token").write_text("admintok\n")
    c = Client.from_home(tmp_path, transport=httpx.MockTransport(rec))
    c.me()
    assert str(rec.last.url) == URL + "/api/v1/users/me"
    assert rec.last.headers["authorization"] == "Bearer admintok"
    c2 = Client.from_home(
        tmp_path, url="http://other:1", token="t2", transport=httpx.MockTransport(rec)
    )
    c2.me()
    assert rec.last.url.host == "other"
    assert rec.last.headers["authorization"] == "Bearer t2"


def test_from_home_without_a_server_says_how_to_start_one(tmp_path: Path) -> None:
    home = tmp_path / "nohome"
    with pytest.raises(ConfigError) as info:
        Client.from_home(home)
    assert str(info.value) == (
        f"no danlu server found at {home}: start one with `danlu up --home {home}`"
    )
    # url and token given: the home is not needed
    Client.from_home(home, url=URL, token="t").close()
    # a url without a token, and no home to read one from: the missing token is named
    with pytest.raises(ConfigError, match="needs an API token: pass --token"):
        Client.from_home(home, url=URL)


def test_the_home_s_token_goes_only_to_the_home_s_server(tmp_path: Path) -> None:
    """A ``--url`` of another server without ``--token`` sent it the home's admin token."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "server.json").write_text(json.dumps({"url": "http://127.0.0.1:8765"}))
    (home / "admin.token").write_text("dl_secret\n")
    with pytest.raises(ConfigError, match="another server"):
        Client.from_home(home, url="http://evil.example:8765")
    with pytest.raises(ConfigError, match="another server"):
        Client.from_home(home, url="http://127.0.0.1:9999")
    for same in ("http://127.0.0.1:8765/", "HTTP://127.0.0.1:8765"):
        with Client.from_home(home, url=same) as client:
            assert client._http.headers["authorization"] == "Bearer dl_secret"
    with Client.from_home(home, url="http://evil.example:8765", token="theirs") as client:
        assert client._http.headers["authorization"] == "Bearer theirs"


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8765/api/v1",
        "http://127.0.0.1:8765/api/v1/",
        "http://127.0.0.1:8765//",
    ],
)
def test_the_home_s_server_is_the_same_with_or_without_the_api_prefix(
    tmp_path: Path, url: str
) -> None:
    """The client takes a URL with or without ``/api/v1``; the home's token check did not."""
    (tmp_path / "server.json").write_text(json.dumps({"url": "http://127.0.0.1:8765"}))
    (tmp_path / "admin.token").write_text("dl_secret\n")
    assert api.same_server(url, "http://127.0.0.1:8765")
    assert api.same_server("http://127.0.0.1:8765", url)
    with Client.from_home(tmp_path, url=url) as client:
        assert client._http.headers["authorization"] == "Bearer dl_secret"
    assert not api.same_server("http://127.0.0.1:8765/api/v2", "http://127.0.0.1:8765")
    assert not api.same_server("http://127.0.0.1:8765/other/api/v1", "http://127.0.0.1:8765")
