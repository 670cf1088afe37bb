"""A webhook's job states are read in any case, as ``GET /jobs?state=`` reads them, and
stored in the canonical form (``"Failed"`` was a 422); a name that is no job state is a 422
naming ``states.N`` that lists the accepted names. The 101st webhook's 422 tells of the
limit, naming no field of the body (it named ``url``, which was not at fault)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from conftest import NOW
from danlu.config import load_settings
from danlu.core.errors import SpecError
from danlu.core.state import JobState
from danlu.server import app as app_module
from danlu.server.routes import deps
from danlu.server.services import users, webhooks


@pytest.fixture
def admin(db_url: str, tmp_path: Path) -> Iterator[tuple[TestClient, deps.ServerState]]:
    """A client with an admin's token on an app (no loops) over ``db_url``, and its state."""
    settings = load_settings(home=tmp_path / "home", fake_gpus="1x80GiB", database_url=db_url)
    app = app_module.create_app(settings, start_loops=False)
    state: deps.ServerState = app.state.danlu
    with state.db.session() as s:
        token = users.issue_token(s, users.create_user(s, "root", "admin", now=NOW), "t", now=NOW)
    with TestClient(app, headers={"Authorization": f"Bearer {token}"}) as client:
        yield client, state


def test_webhook_states_are_read_in_any_case_and_stored_canonical(
    admin: tuple[TestClient, deps.ServerState],
) -> None:
    client, _ = admin
    body = {"url": "http://hooks.example/danlu", "states": ["Failed", "succeeded", "FAILED"]}
    made = client.post("/api/v1/webhooks", json=body)
    assert made.status_code == 201, made.text
    assert made.json()["states"] == ["SUCCEEDED", "FAILED"]
    [listed] = client.get("/api/v1/webhooks").json()
    assert listed["states"] == ["SUCCEEDED", "FAILED"]


def test_a_name_that_is_no_job_state_is_a_422_listing_the_accepted_names(
    admin: tuple[TestClient, deps.ServerState],
) -> None:
    client, _ = admin
    body = {"url": "http://hooks.example/danlu", "states": ["FAILED", "Finished"]}
    refused = client.post("/api/v1/webhooks", json=body)
    assert refused.status_code == 422
    error = refused.json()["error"]
    assert error["field"] == "states.1"
    assert all(state.value in error["message"] for state in JobState)


def test_the_service_reads_states_in_any_case_too(db_url: str) -> None:
    assert webhooks.check_states(["cancelled", "Pending"]) == ["PENDING", "CANCELLED"]
    with pytest.raises(SpecError) as refused:
        webhooks.check_states(["running", "done"])
    assert refused.value.field == "states.1" and "SUCCEEDED" in refused.value.message


def test_the_101st_webhook_names_the_limit_not_the_url(
    admin: tuple[TestClient, deps.ServerState],
) -> None:
    client, state = admin
    with state.db.session() as s:
        for _ in range(webhooks.MAX_WEBHOOKS):
            webhooks.create(s, "http://hooks.example/danlu", "root", now=NOW)
    refused = client.post("/api/v1/webhooks", json={"url": "http://hooks.example/danlu"})
    assert refused.status_code == 422
    error = refused.json()["error"]
    assert error["field"] is None  # no field of the body is at fault
    assert "100 webhooks" in error["message"] and "remove one" in error["message"]
