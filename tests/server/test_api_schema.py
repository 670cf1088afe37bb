"""API robustness: property-based requests generated from the OpenAPI schema (schemathesis),
sent with the admin token: no response is a 5xx, and every 422 of ``POST /jobs`` names the
field. More than 1,000 requests in total (counted and checked when the test that sends
them ends, :func:`requests_sent`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from helpers import stop_runs
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from starlette.testclient import TestClient

from danlu.config import load_settings
from danlu.server.main import prepare

EXAMPLES = 45
MIN_REQUESTS = 1000


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, str]]:
    home = tmp_path_factory.mktemp("schema") / "home"
    prepared = prepare(
        load_settings(home=home, fake_gpus="2x80GiB"),
        port=0,
        start_loops=False,
        announce=lambda _text: None,
        follow_timeout=0.2,
    )
    prepared.sock.close()
    try:
        yield prepared.app, prepared.admin_token
    finally:
        stop_runs(prepared.app.state.danlu.executor)
        prepared.close()


@pytest.fixture(scope="module")
def api_schema(served: tuple[Any, str]) -> Any:
    app, _token = served
    return schemathesis.openapi.from_asgi("/api/v1/openapi.json", app)


@pytest.fixture(scope="module")
def admin_headers(served: tuple[Any, str]) -> dict[str, str]:
    return {"Authorization": f"Bearer {served[1]}"}


@pytest.fixture
def requests_sent() -> Iterator[dict[str, int]]:
    """The count of the requests :func:`test_no_server_errors` sends and of their 5xx
    answers, checked once it has ended: at least :data:`MIN_REQUESTS`, none a 5xx. It is
    one test (each API operation a subtest of it), so the count and its check are of one
    process whichever way pytest-xdist shares out the file's tests."""
    counts = {"requests": 0, "5xx": 0}
    yield counts
    print(f"\nschemathesis: {counts['requests']} requests, {counts['5xx']} 5xx")
    assert counts["5xx"] == 0, counts
    assert counts["requests"] >= MIN_REQUESTS, counts


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
)
def test_no_server_errors(
    case: Any, admin_headers: dict[str, str], requests_sent: dict[str, int]
) -> None:
    response = case.call(headers=admin_headers)
    requests_sent["requests"] += 1
    if response.status_code >= 500:
        requests_sent["5xx"] += 1
    case.validate_response(response, checks=[not_a_server_error])
    if response.status_code == 422 and case.method == "POST" and case.path == "/api/v1/jobs":
        error = response.json()["error"]
        assert error["field"], f"a 422 for a spec must name the field: {error}"
        assert error["message"]
    if response.status_code >= 400:
        body = response.json()
        assert set(body["error"]) == {"type", "field", "message"}, body


def test_unauthenticated_requests_are_401(served: tuple[Any, str]) -> None:
    app, _token = served
    client = TestClient(app)
    for method, path in [
        ("GET", "/api/v1/jobs"),
        ("POST", "/api/v1/jobs"),
        ("GET", "/api/v1/cluster/nodes"),
        ("GET", "/api/v1/users/me"),
    ]:
        response = client.request(method, path)
        assert response.status_code == 401, (method, path, response.text)
        assert response.json()["error"]["type"] == "AuthError"
