"""Every API route that changes something refuses a user who is neither the owner of what it
changes nor an admin: 403, and nothing changed.

The routes are read from the app, so a new route that changes something fails
:func:`test_every_changing_route_has_a_case` until it is given a case below (and with it a
check of who may call it). Over real HTTP (uvicorn on 127.0.0.1)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from fastapi import APIRouter
from fastapi.routing import APIRoute
from helpers import Live, live_server

from danlu.server.routes import admin, dashboard, events, jobs, sweeps, webhooks

CHANGING = {"POST", "PUT", "PATCH", "DELETE"}
ROUTERS: list[APIRouter] = [
    admin.router,
    dashboard.router,
    events.router,
    jobs.router,
    sweeps.router,
    webhooks.router,
]
"""The app's routers: a route of theirs left out of the OpenAPI schema must only read."""


@dataclass(frozen=True)
class World:
    """What alice owns and bob, a user too, is refused: ``live`` the server, ``bob`` bob's
    token, ``alice`` hers, and the ids of her job, sweep, token and of an admin's webhook."""

    live: Live
    alice: str
    bob: str
    job: str
    sweep: str
    token_prefix: str
    webhook: str


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with live_server(tmp_path_factory.mktemp("owners"), start_loops=False) as live:
        with live.client() as admin:
            tokens = {}
            for name in ("alice", "bob"):
                assert admin.post("/users", json={"name": name}).status_code == 201
                issued = admin.post(f"/users/{name}/tokens", json={"name": "t"})
                tokens[name] = issued.json()["token"]
            hook = admin.post("/webhooks", json={"url": "http://127.0.0.1:9/hook"})
            assert hook.status_code == 201, hook.text
        with live.client(tokens["alice"]) as alice:
            job = alice.post("/jobs", json={"name": "mine", "command": ["true"]})
            assert job.status_code == 201, job.text
            sweep = alice.post(
                "/sweeps",
                json={
                    "name": "search",
                    "method": "grid",
                    "parameters": {"lr": {"values": [0.1, 0.2]}},
                    "trial": {"command": ["true"]},
                },
            )
            assert sweep.status_code == 201, sweep.text
        yield World(
            live,
            tokens["alice"],
            tokens["bob"],
            job.json()["id"],
            sweep.json()["id"],
            tokens["alice"].split("_")[1],
            hook.json()["id"],
        )


SWEEP_BODY = {
    "name": "theirs",
    "method": "grid",
    "parameters": {"lr": {"values": [0.1]}},
    "trial": {"command": ["true"], "user": "alice"},
}

CASES: dict[tuple[str, str], tuple[str, dict[str, Any] | None]] = {
    # a job or sweep of alice's, or one submitted in her name
    ("POST", "/api/v1/jobs"): ("/jobs", {"name": "x", "command": ["true"], "user": "alice"}),
    ("PATCH", "/api/v1/jobs/{job_id}"): ("/jobs/{job}", {"priority": 5, "held": True}),
    ("POST", "/api/v1/jobs/{job_id}/cancel"): ("/jobs/{job}/cancel", None),
    ("POST", "/api/v1/jobs/{job_id}/rerun"): ("/jobs/{job}/rerun", None),
    ("POST", "/api/v1/jobs/{job_id}/metrics"): (
        "/jobs/{job}/metrics",
        {"metrics": [{"step": 1, "loss": 1.0}]},
    ),
    ("POST", "/api/v1/sweeps"): ("/sweeps", SWEEP_BODY),
    ("POST", "/api/v1/sweeps/{sweep_id}/cancel"): ("/sweeps/{sweep}/cancel", None),
    # alice's tokens
    ("POST", "/api/v1/users/{name}/tokens"): ("/users/alice/tokens", {}),
    ("DELETE", "/api/v1/users/{name}/tokens"): ("/users/alice/tokens", None),
    ("DELETE", "/api/v1/users/{name}/tokens/{prefix}"): ("/users/alice/tokens/{prefix}", None),
    # the admin's
    ("POST", "/api/v1/users"): ("/users", {"name": "mallory", "role": "admin"}),
    ("PUT", "/api/v1/users/{name}"): ("/users/bob", {"quota_gpus": 100}),
    ("POST", "/api/v1/users/{name}/disable"): ("/users/alice/disable", {"cancel_jobs": True}),
    ("POST", "/api/v1/users/{name}/enable"): ("/users/bob/enable", None),
    ("POST", "/api/v1/projects"): ("/projects", {"name": "bobs"}),
    ("PUT", "/api/v1/projects/{name}"): ("/projects/default", {"priority": 100}),
    ("POST", "/api/v1/cluster/nodes/{name}/cordon"): ("/cluster/nodes/{node}/cordon", {}),
    ("POST", "/api/v1/cluster/nodes/{name}/drain"): ("/cluster/nodes/{node}/drain", {}),
    ("POST", "/api/v1/cluster/nodes/{name}/uncordon"): ("/cluster/nodes/{node}/uncordon", {}),
    ("POST", "/api/v1/webhooks"): ("/webhooks", {"url": "http://127.0.0.1:9/bob"}),
    ("DELETE", "/api/v1/webhooks/{webhook_id}"): ("/webhooks/{webhook}", None),
    ("POST", "/api/v1/webhooks/{webhook_id}/ping"): ("/webhooks/{webhook}/ping", None),
}
"""Each changing route: the request of bob's it must refuse (path, JSON body or none)."""


def _changing_routes(live: Live) -> set[tuple[str, str]]:
    """The (method, path) of every route of the app's OpenAPI schema that changes
    something (the dashboard's routes, left out of the schema, only read)."""
    assert live.prepared is not None
    paths: dict[str, dict[str, Any]] = live.prepared.app.openapi()["paths"]
    return {
        (method.upper(), path)
        for path, operations in paths.items()
        for method in operations
        if method.upper() in CHANGING
    }


def test_every_changing_route_has_a_case(world: World) -> None:
    routes = _changing_routes(world.live)
    missing = sorted(routes - set(CASES))
    assert not missing, (
        f"routes that change something without a case here: {missing}; give each a check of "
        "who may call it and a case in CASES"
    )
    assert not set(CASES) - routes, "a case for a route the app no longer has"
    hidden = [
        (sorted(route.methods), route.path)
        for router in ROUTERS
        for route in router.routes
        if isinstance(route, APIRoute) and not route.include_in_schema
    ]
    assert hidden, "the dashboard's routes are left out of the schema"
    assert all(set(methods) <= {"GET", "HEAD"} for methods, _path in hidden), hidden


def _node(world: World) -> str:
    with world.live.client() as admin:
        return str(admin.get("/cluster/nodes").json()[0]["name"])


@pytest.mark.parametrize("case", sorted(CASES), ids=lambda case: " ".join(case))
def test_a_user_neither_owner_nor_admin_is_refused(world: World, case: tuple[str, str]) -> None:
    template, body = CASES[case]
    path = template.format(
        job=world.job,
        sweep=world.sweep,
        prefix=world.token_prefix,
        webhook=world.webhook,
        node=_node(world),
    )
    with world.live.client(world.bob) as bob:
        answer = bob.request(case[0], path, json=body)
    assert answer.status_code == 403, f"{case}: {answer.status_code} {answer.text}"
    error = answer.json()["error"]
    assert error["type"] == "PermissionDenied" and error["message"], error


def test_the_refusals_changed_nothing(world: World) -> None:
    """Run after the refusals (pytest keeps a module's order): alice's job, sweep and token,
    the users, projects, nodes and webhooks are as they were made."""
    with world.live.client() as admin:
        job = admin.get(f"/jobs/{world.job}").json()
        assert (job["state"], job["priority"], job["held_at"]) == ("PENDING", 0, None)
        sweep = admin.get(f"/sweeps/{world.sweep}").json()
        assert sweep["state"] == "RUNNING"
        assert [j["name"] for j in admin.get("/jobs").json()] == ["search-0", "mine"]
        assert admin.get(f"/jobs/{world.job}/metrics").json() == []
        assert [u["name"] for u in admin.get("/users").json()] == ["admin", "alice", "bob"]
        bob = admin.get("/users/bob").json()
        assert (bob["role"], bob["os_user"], bob["quota_gpus"]) == ("user", None, None)
        assert [u["quota_gpus"] for u in admin.get("/users").json()] == [None, None, None]
        assert [u["disabled_at"] for u in admin.get("/users").json()] == [None, None, None]
        projects = admin.get("/projects").json()
        assert [(p["name"], p["priority"]) for p in projects] == [("default", 0)]
        nodes = admin.get("/cluster/nodes").json()
        assert {n["state"] for n in nodes} == {"ready"}
        hooks = admin.get("/webhooks").json()
        assert [h["id"] for h in hooks] == [world.webhook]
        deliveries = admin.get(f"/webhooks/{world.webhook}/deliveries").json()
        assert deliveries == []
        tokens = admin.get("/users/alice/tokens").json()
        assert [t["prefix"] for t in tokens] == [world.token_prefix]
    with httpx.Client(
        base_url=f"{world.live.url}/api/v1",
        headers={"Authorization": f"Bearer {world.alice}"},
        timeout=30,
    ) as alice:
        assert alice.get("/users/me").json()["name"] == "alice"
