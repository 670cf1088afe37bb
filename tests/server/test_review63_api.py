"""The API against a real server: a job over its user's own GPU quota is refused
at submission (as one over its project's), a webhook's URL port 0 and an empty ``states``
are refused naming the field, ``cordon``/``drain`` take a missing body as ``{}``, and a
run's token reports its job's metrics through a unique id prefix (and never another's)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import live_server, record_round, user_and_nodes

from danlu.core.cluster import Node, gpu_type
from danlu.core.errors import SpecError
from danlu.core.state import JobState
from danlu.sched.registry import make_policy
from danlu.server.db import Database
from danlu.server.errors import AdmissionError
from danlu.server.services import jobs, users, webhooks
from danlu.server.services.view import build_snapshot

T = 1_000_000.0
BODY: dict[str, Any] = {"command": ["python", "train.py"]}
TWO: dict[str, Any] = {"name": "two", "resources": {"gpus": 2, "gpu_memory": "20GiB"}, **BODY}


def test_a_job_past_its_users_own_quota_is_refused_at_submission(db: Database) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (Node("a", 4, gpu_type("H100")),), T)
        users.set_quota(s, "alice", 1)
        with pytest.raises(AdmissionError) as refused:
            jobs.submit(s, TWO, alice, now=T)
        assert refused.value.field == "resources.gpus"
        assert refused.value.message == (
            "can never start: user 'alice' GPU quota: 2 asked > 1, by this job alone"
        )
        # what the quota can take is accepted: one GPU, an elastic range starting at 1
        one = jobs.submit(s, {**TWO, "resources": {"gpus": 1}}, alice, now=T).id
        grows = jobs.submit(s, {**TWO, "resources": {"gpus": "1..4"}}, alice, now=T).id
        users.set_quota(s, "alice", None)
        later = jobs.submit(s, TWO, alice, now=T).id  # accepted: no quota now
        users.set_quota(s, "alice", 1)  # lowered below the accepted job: it waits, not fails
    applied = record_round(db, make_policy("fifo"), T + 10)
    assert {j.id for j in applied.started} == {one}
    with db.session() as s:
        snap = build_snapshot(s, T + 20)
        assert snap.withheld[later] == (
            "waiting for quota: user 'alice' GPU quota: 1 in use + 2 asked > 1"
        )
        assert grows in snap.withheld
        assert jobs.get_job(s, later).state == JobState.PENDING.value


def test_the_api_refuses_a_job_and_a_sweep_past_the_users_quota(
    tmp_path: Path, db_url: str
) -> None:
    with (
        live_server(tmp_path, fake_gpus="4x80GiB", db_url=db_url, start_loops=False) as live,
        live.client() as admin,
    ):
        admin.post("/users", json={"name": "bob"}).raise_for_status()
        admin.put("/users/bob", json={"quota_gpus": 1}).raise_for_status()
        token = admin.post("/users/bob/tokens", json={"name": "t"}).json()["token"]
        with live.client(token) as bob:
            job = bob.post("/jobs", json=TWO)
            assert job.status_code == 422, job.text
            assert job.json()["error"]["field"] == "resources.gpus"
            assert "can never start: user 'bob' GPU quota" in job.json()["error"]["message"]
            trial = {k: v for k, v in TWO.items() if k != "name"}
            sweep = {"name": "s", "trial": trial, "parameters": {"a": {"values": [1]}}}
            refused = bob.post("/sweeps", json={**sweep, "method": "grid"})
            assert refused.status_code == 422, refused.text
            assert refused.json()["error"]["field"] == "trial.resources.gpus"
            assert bob.get("/sweeps").json() == [] and bob.get("/jobs").json() == []


@pytest.mark.parametrize(
    ("url", "states", "field", "message"),
    [
        ("http://x.example:0/", None, "url", "the port must be between 1 and 65535"),
        ("http://x.example:00/hook", None, "url", "the port must be between 1 and 65535"),
        ("http://x.example/", [], "states", "names no job state"),
    ],
)
def test_a_webhook_with_port_0_or_no_states_is_refused(
    db: Database, url: str, states: list[str] | None, field: str, message: str
) -> None:
    with db.session() as s, pytest.raises(SpecError, match=message) as refused:
        webhooks.create(s, url, "admin", states=states, now=T)
    assert refused.value.field == field
    with db.session() as s:  # left out: the default, the job's ends; port 1 and 65535 are fine
        assert webhooks.create(s, "http://x.example:1/", "admin", now=T).states == [
            "SUCCEEDED",
            "FAILED",
            "CANCELLED",
        ]
        webhooks.create(s, "http://x.example:65535/", "admin", now=T)


def test_the_api_refuses_a_webhook_with_port_0_or_no_states(tmp_path: Path, db_url: str) -> None:
    with (
        live_server(tmp_path, fake_gpus="1x80GiB", db_url=db_url, start_loops=False) as live,
        live.client() as c,
    ):
        port = c.post("/webhooks", json={"url": "http://x.example:0/"})
        assert port.status_code == 422 and port.json()["error"]["field"] == "url", port.text
        empty = c.post("/webhooks", json={"url": "http://x.example/", "states": []})
        assert empty.status_code == 422 and empty.json()["error"]["field"] == "states", empty.text
        assert c.get("/webhooks").json() == []


def test_cordon_and_drain_take_a_missing_body_as_empty(tmp_path: Path, db_url: str) -> None:
    with (
        live_server(tmp_path, fake_gpus="2x80GiB", db_url=db_url, start_loops=False) as live,
        live.client() as c,
    ):
        name = c.get("/cluster/nodes").json()[0]["name"]
        cordoned = c.post(f"/cluster/nodes/{name}/cordon")
        assert cordoned.status_code == 200, cordoned.text
        assert (cordoned.json()["state"], cordoned.json()["cordon_reason"]) == ("cordoned", "")
        drained = c.post(f"/cluster/nodes/{name}/drain")
        assert drained.status_code == 200 and drained.json()["state"] == "draining", drained.text
        assert c.post(f"/cluster/nodes/{name}/uncordon").json()["state"] == "ready"
        # a body is still checked
        bad = c.post(f"/cluster/nodes/{name}/cordon", json={"why": "typo"})
        assert bad.status_code == 422 and "why" in bad.text


def test_a_run_token_reports_its_jobs_metrics_by_an_id_prefix_only(
    tmp_path: Path, db_url: str
) -> None:
    with (
        live_server(tmp_path, fake_gpus="1x80GiB", db_url=db_url, start_loops=False) as live,
        live.client() as admin,
    ):
        own = admin.post("/jobs", json={"name": "own", **BODY}).json()["id"]
        other = admin.post("/jobs", json={"name": "other", **BODY}).json()["id"]
        assert live.prepared is not None
        with live.prepared.app.state.danlu.db.session() as s:
            run = users.issue_token(s, users.get_user(s, "admin"), "own#1", job_id=own)
            # the token of a job gone (purged) whose id shares a prefix with ``other``
            gone = users.issue_token(
                s, users.get_user(s, "admin"), "gone#1", job_id=other[:6] + "zzzzzz"
            )
        record = {"metrics": [{"step": 1, "loss": 0.5}]}
        with live.client(run) as r:
            by_prefix = r.post(f"/jobs/{own[:6]}/metrics", json=record)
            assert by_prefix.status_code == 200, by_prefix.text
            assert by_prefix.json()["accepted"] == 1
            assert r.post(f"/jobs/{own}/metrics", json=record).status_code == 200
            # never another job, by its id or a prefix of it
            assert r.post(f"/jobs/{other}/metrics", json=record).status_code == 403
            assert r.post(f"/jobs/{other[:6]}/metrics", json=record).status_code == 403
            assert r.get(f"/jobs/{own[:6]}").status_code == 403  # only its metrics' POST
        with live.client(gone) as g:  # the prefix resolves to another job: refused
            stray = g.post(f"/jobs/{other[:6]}/metrics", json=record)
            assert stray.status_code == 403, stray.text
        assert len(admin.get(f"/jobs/{own}/metrics").json()) == 2
        assert admin.get(f"/jobs/{other}/metrics").json() == []


def test_a_sweep_with_a_huge_trial_number_gets_the_fields_own_range(
    tmp_path: Path, db_url: str
) -> None:
    """An integer past 2**62 in a sweep's trial is refused with the field's own range, as in
    a job (not the store's bound)."""
    trial = {**BODY, "priority": 10**30}
    sweep = {"name": "s", "method": "grid", "trial": trial, "parameters": {"a": {"values": [1]}}}
    with (
        live_server(tmp_path, fake_gpus="1x80GiB", db_url=db_url, start_loops=False) as live,
        live.client() as c,
    ):
        refused = c.post("/sweeps", json=sweep)
        assert refused.status_code == 422, refused.text
        error = refused.json()["error"]
        assert error["field"] == "trial.priority", error
        assert "within -1,000,000..1,000,000" in error["message"], error
