"""A query parameter that a route does not read is a 422 naming it, as one given
twice is: a misspelt filter was dropped without a word, so ``GET /jobs?states=FAILED``
listed every job (a script cancelling what it listed cancelled them all) and
``GET /events?after=N`` read the feed from its start. ``/health``, which needs no token,
still takes whatever a probe adds; an empty name (``?=1``) is no parameter."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from helpers import Live, live_server, spec, submit


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    with live_server(tmp_path, fake_gpus="1x80GiB", start_loops=False) as server:
        yield server


def test_a_misspelt_filter_is_refused_naming_it(live: Live) -> None:
    admin = live.client()
    failed = submit(admin, spec("doomed", "raise SystemExit(1)"))
    queued = submit(admin, spec("waiting", "pass"))
    assert admin.post(f"/jobs/{failed['id']}/cancel").status_code == 200
    listed = admin.get("/jobs", params={"states": "CANCELLED"})
    assert listed.status_code == 422, [job["id"] for job in listed.json()]
    error = listed.json()["error"]
    assert error["field"] == "states"
    assert "unknown query parameter 'states'" in error["message"]
    assert "state," in error["message"]  # the names it takes, the right one among them
    right = admin.get("/jobs", params={"state": "CANCELLED"})
    assert [job["id"] for job in right.json()] == [failed["id"]]
    assert queued["id"] not in {job["id"] for job in right.json()}


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/events", "after"),
        ("/sweeps", "states"),
        ("/usage", "from"),
        ("/webhooks", "limit"),
        ("/users/me", "verbose"),
        ("/cluster/nodes", "node"),
    ],
)
def test_every_route_that_needs_a_token_refuses_what_it_does_not_read(
    live: Live, path: str, name: str
) -> None:
    reply = live.client().get(path, params={name: "1"})
    assert reply.status_code == 422
    assert reply.json()["error"]["field"] == name


def test_a_route_with_a_job_id_refuses_it_too(live: Live) -> None:
    admin = live.client()
    job = submit(admin, spec("quiet", "pass"))
    reply = admin.post(f"/jobs/{job['id']}/cancel", params={"force": "true"})
    assert reply.status_code == 422 and reply.json()["error"]["field"] == "force"
    assert admin.get(f"/jobs/{job['id']}").json()["state"] == "PENDING"  # not cancelled
    logs = admin.get(f"/jobs/{job['id']}/logs", params={"tail": 10, "follw": "true"})
    assert logs.status_code == 422 and logs.json()["error"]["field"] == "follw"


def test_what_the_routes_read_and_health_probes_pass(live: Live) -> None:
    admin = live.client()
    job = submit(admin, spec("fine", "pass"))
    assert admin.get("/jobs", params={"state": ["PENDING", "RUNNING"], "limit": 5}).is_success
    assert admin.get(f"/jobs/{job['id']}/events", params={"tail": "true"}).is_success
    assert admin.get(f"/jobs/{job['id']}/metrics", params={"superseded": "true"}).is_success
    assert admin.get("/jobs?=1&limit=2").is_success  # no name: no parameter
    probe = httpx.get(f"{live.url}/api/v1/health", params={"probe": "lb-7"})
    assert probe.status_code == 200 and probe.json()["status"] == "ok"


def test_a_name_that_is_no_text_is_quoted_in_the_field(live: Live) -> None:
    reply = live.client().get("/jobs?a%1b%5b2Jb=1")
    assert reply.status_code == 422
    assert reply.json()["error"]["field"] == repr("a\x1b[2Jb")
