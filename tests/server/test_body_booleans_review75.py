"""A boolean where a request body takes a number is a 422 naming the field: pydantic read
``true`` as 1 and ``false`` as 0, so ``{"quota_gpu_memory": true}`` set a project's quota
to one byte (no job of it could start again), ``{"quota_gpus": true}`` a user's to one
GPU, and a cordon ``{"at": true}`` was one at the epoch, done now."""

from __future__ import annotations

from pathlib import Path

from helpers import live_server


def test_booleans_for_numbers_are_refused_naming_the_field(tmp_path: Path) -> None:
    with live_server(tmp_path, fake_gpus="1x80GiB", start_loops=False) as live, live.client() as c:
        assert c.post("/users", json={"name": "alice"}).status_code == 201
        assert c.post("/projects", json={"name": "vision"}).status_code == 201
        refused = [
            c.post("/projects", json={"name": "nlp", "quota_gpu_memory": True}),
            c.post("/projects", json={"name": "nlp", "priority": True}),
            c.put("/projects/vision", json={"quota_gpus": True}),
            c.put("/projects/vision", json={"share": False}),
            c.put("/users/alice", json={"quota_gpus": True}),
            c.post("/cluster/nodes/localhost/cordon", json={"at": True}),
            c.post("/cluster/nodes/localhost/drain", json={"at": False}),
        ]
        fields = ["quota_gpu_memory", "priority", "quota_gpus", "share", "quota_gpus", "at", "at"]
        for response, field in zip(refused, fields, strict=True):
            assert response.status_code == 422, response.text
            error = response.json()["error"]
            assert error["field"] == field
            assert "expected a number, got " in error["message"]
        # nothing of them was written
        assert [p["name"] for p in c.get("/projects").json()] == ["vision"]
        (vision,) = c.get("/projects").json()
        assert (vision["quota_gpus"], vision["share"]) == (None, 1.0)
        alice = next(u for u in c.get("/users").json() if u["name"] == "alice")
        assert alice["quota_gpus"] is None
        assert c.get("/cluster/nodes").json()[0]["state"] == "ready"
        # numbers are taken as before
        changed = c.put("/projects/vision", json={"quota_gpus": 2, "share": 1, "priority": 0})
        assert changed.status_code == 200 and changed.json()["quota_gpus"] == 2.0
        assert c.put("/users/alice", json={"quota_gpus": 1}).json()["quota_gpus"] == 1.0
        assert c.post("/cluster/nodes/localhost/cordon", json={"at": 0}).json()["state"] == (
            "cordoned"
        )
