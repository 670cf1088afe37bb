"""A whole number written as ``2.0`` is taken as 2 by every integer field of a request body,
as a job spec's priority and a project's always were (a JSON number has no separate
integer type; a client in JavaScript writes what it holds): ``PATCH /jobs/{id}`` refused
``{"priority": 2.0}`` that ``PUT /projects/{name}`` took, and so did a cordon's ``gpu``.
A fraction, a boolean and a number in quotes are refused everywhere, naming the field."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from helpers import Live, live_server, spec, submit


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    with live_server(tmp_path, fake_gpus="2x80GiB", start_loops=False) as server:
        yield server


def _refused(response: httpx.Response, field: str) -> None:
    assert response.status_code == 422, response.text
    assert field in response.text


def test_a_priority_of_2_0_is_2_as_a_projects(live: Live) -> None:
    client = live.client()
    job = submit(client, spec("p", "pass"))
    changed = client.patch(f"/jobs/{job['id']}", json={"priority": 2.0})
    assert changed.status_code == 200, changed.text
    assert changed.json()["priority"] == 2
    project = client.put(f"/projects/{job['project']}", json={"priority": 3.0})
    assert project.status_code == 200, project.text
    assert project.json()["priority"] == 3
    for wrong in (2.5, True, "2"):
        _refused(client.patch(f"/jobs/{job['id']}", json={"priority": wrong}), "priority")
        _refused(client.put(f"/projects/{job['project']}", json={"priority": wrong}), "priority")


def test_a_cordons_gpu_of_1_0_is_gpu_1(live: Live) -> None:
    client = live.client()
    node = client.get("/cluster/nodes").json()[0]["name"]
    cordoned = client.post(f"/cluster/nodes/{node}/cordon", json={"gpu": 1.0, "reason": "x"})
    assert cordoned.status_code == 200, cordoned.text
    assert [gpu["state"] for gpu in cordoned.json()["gpus"]] == ["ready", "cordoned"]
    opened = client.post(f"/cluster/nodes/{node}/uncordon", json={"gpu": 1.0})
    assert opened.status_code == 200, opened.text
    assert [gpu["state"] for gpu in opened.json()["gpus"]] == ["ready", "ready"]
    for wrong in (0.5, True, "1"):
        _refused(client.post(f"/cluster/nodes/{node}/cordon", json={"gpu": wrong}), "gpu")
        _refused(client.post(f"/cluster/nodes/{node}/uncordon", json={"gpu": wrong}), "gpu")
