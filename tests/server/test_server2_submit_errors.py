"""What a refused submission says over HTTP. ``POST /jobs`` answers a bad spec in the words
of ``danlu.core``'s ``spec_error`` (the field and the fix), as ``POST /sweeps`` and the CLI
do, not in pydantic's; a sweep whose trial can never fit is refused with the error type a
job that can never fit gets (``AdmissionError``, which the client raises as
``UnschedulableRequestError``); a project's new ``share`` keeps within a range a fair-share
round can divide by; a dependency's wait reads as a whole sentence."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import live_server, user_and_nodes
from sqlalchemy import select

from danlu.client.errors import UnschedulableRequestError, error_from_response
from danlu.core.cluster import Node, gpu_type
from danlu.server.db import Database, Project
from danlu.server.errors import AdmissionError
from danlu.server.services import dependencies, jobs, projects, sweeps

NOW = 1_000_000.0
NODE = Node("n0", 2, gpu_type("H100"))


def test_a_bad_job_spec_over_http_names_the_field_and_the_fix(tmp_path: Path) -> None:
    with live_server(tmp_path, fake_gpus="2x80GiB", start_loops=False) as live, live.client() as c:
        cases: list[tuple[dict[str, Any], str, str]] = [
            ({"name": "j", "command": ["x"], "Priority": 3}, "Priority", "did you mean priority?"),
            (
                {"name": "j", "command": {"python": "t.py"}},
                "command",
                "must be a list, e.g. [first, second]",
            ),
            ({"name": "j", "command": ["x"], "gpus": 2}, "gpus", "write it as resources.gpus"),
        ]
        for body, field, fix in cases:
            refused = c.post("/jobs", json=body)
            assert refused.status_code == 422, refused.text
            error = refused.json()["error"]
            assert set(error) == {"type", "field", "message"}
            assert (error["type"], error["field"]) == ("SpecError", field), error
            assert fix in error["message"], error
        # what the handler of any route says still holds for a body that is no mapping
        listed = c.post("/jobs", json=["x"])
        assert listed.status_code == 422, listed.text
        assert listed.json()["error"]["field"] == "body"
        made = c.post("/jobs", json={"name": "ok", "command": ["true"]})
        assert made.status_code == 201, made.text


def test_a_sweep_whose_trial_never_fits_is_refused_as_a_job_is(tmp_path: Path) -> None:
    with live_server(tmp_path, fake_gpus="2x80GiB", start_loops=False) as live, live.client() as c:
        trial = {"command": ["x"], "resources": {"gpus": 9}}
        job = c.post("/jobs", json={"name": "big", **trial})
        sweep = c.post(
            "/sweeps",
            json={
                "name": "s",
                "method": "grid",
                "trial": trial,
                "parameters": {"a": {"values": [1]}},
            },
        )
        assert job.status_code == sweep.status_code == 422, (job.text, sweep.text)
        job_error, sweep_error = job.json()["error"], sweep.json()["error"]
        assert sweep_error["type"] == job_error["type"] == "AdmissionError", sweep_error
        assert sweep_error["field"] == "trial." + job_error["field"] == "trial.resources.gpus"
        assert sweep_error["message"] == job_error["message"]
        assert isinstance(error_from_response(sweep), UnschedulableRequestError)
        # a trial spec that is invalid stays a SpecError
        bad = c.post(
            "/sweeps",
            json={
                "name": "s",
                "method": "grid",
                "trial": {"command": "x"},
                "parameters": {"a": {"values": [1]}},
            },
        )
        assert bad.status_code == 422, bad.text
        assert (bad.json()["error"]["type"], bad.json()["error"]["field"]) == (
            "SpecError",
            "trial.command",
        )


def test_the_sweeps_service_keeps_an_admission_error_s_type(db: Database) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        body = {
            "name": "s",
            "method": "grid",
            "trial": {"command": ["x"], "resources": {"gpus": 9}},
            "parameters": {"a": {"values": [1]}},
        }
        with pytest.raises(AdmissionError) as caught:
            sweeps.create(s, body, alice, now=NOW)
        assert caught.value.field == "trial.resources.gpus"


@pytest.mark.parametrize("share", [1e-320, 0.0, 5e-7, 2e6])
def test_a_new_share_outside_its_range_is_refused_naming_it(tmp_path: Path, share: float) -> None:
    with live_server(tmp_path, fake_gpus="2x80GiB", start_loops=False) as live, live.client() as c:
        made = c.post("/projects", json={"name": "p", "share": share})
        assert made.status_code == 422, made.text
        error = made.json()["error"]
        assert error["field"] == "share"
        assert "0.000001" in error["message"] and "1,000,000" in error["message"], error
        assert c.post("/projects", json={"name": "p", "share": 1e-6}).status_code == 201
        changed = c.put("/projects/p", json={"share": share})
        assert changed.status_code == 422, changed.text
        assert changed.json()["error"]["field"] == "share"
        assert c.put("/projects/p", json={"share": 1e6}).json()["share"] == 1e6


def test_the_projects_service_refuses_a_tiny_share_and_keeps_a_stored_one(db: Database) -> None:
    with db.session() as s:
        with pytest.raises(ValueError, match="share"):
            projects.create_project(s, "p", share=1e-320)
        projects.create_project(s, "p", share=1.0)
        with pytest.raises(ValueError, match="share"):
            projects.update_project(s, "p", share=1e-320)
        stored = s.scalars(select(Project).where(Project.name == "p")).one()
        stored.share = 1e-9  # written before the bound: it stays, and its project changes
        s.flush()
        assert projects.update_project(s, "p", priority=3).share == 1e-9


def test_a_dependency_s_wait_reads_as_a_sentence(db: Database) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), NOW)
        prep = jobs.submit(s, {"name": "prep", "command": ["x"]}, alice, now=NOW).id
        train = jobs.submit(
            s, {"name": "train", "command": ["x"], "depends_on": [prep]}, alice, now=NOW
        )
        why = dependencies.explain(s, train)
        assert why == (
            f"waiting for job {prep} (prep) to succeed (it is PENDING): not scheduled until it does"
        )
