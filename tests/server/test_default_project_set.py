"""``PUT /projects/default`` before any job was submitted: the ``default`` project, where a
job that names none goes, is made on first use, and changing it first (its quota on a new
cluster, ``danlu project set default --quota-gpus 2``) was a 404 ``project 'default' not
found``. It is now made then too; another unknown project stays a 404."""

from __future__ import annotations

from pathlib import Path

from helpers import live_server


def test_the_default_project_can_be_set_before_its_first_job(tmp_path: Path) -> None:
    with live_server(tmp_path, fake_gpus="1x80GiB", start_loops=False) as live, live.client() as c:
        changed = c.put("/projects/default", json={"quota_gpus": 2, "priority": 3})
        assert changed.status_code == 200, changed.text
        assert (changed.json()["quota_gpus"], changed.json()["priority"]) == (2, 3)
        listed = {p["name"]: p for p in c.get("/projects").json()}
        assert listed["default"]["quota_gpus"] == 2
        assert c.put("/projects/nope", json={"priority": 1}).status_code == 404


def test_a_webhook_may_filter_on_the_default_project_before_its_first_job(tmp_path: Path) -> None:
    with live_server(tmp_path, fake_gpus="1x80GiB", start_loops=False) as live, live.client() as c:
        made = c.post("/webhooks", json={"url": "http://127.0.0.1:9/hook", "project": "default"})
        assert made.status_code == 201, made.text
        assert made.json()["project"] == "default"
        unknown = c.post("/webhooks", json={"url": "http://127.0.0.1:9/hook", "project": "nope"})
        assert unknown.status_code == 422 and unknown.json()["error"]["field"] == "project"
