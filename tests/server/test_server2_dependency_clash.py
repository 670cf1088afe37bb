"""A job that names one job twice, waiting for it to succeed and to fail, could never run:
it is refused at submission, naming the entry and the one it contradicts, as a dependency
whose condition can already never hold is (it waited until that job ended, then was
cancelled). Conditions that can hold together stay accepted."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import user_and_nodes

from danlu.core.cluster import Node, gpu_type
from danlu.core.errors import SpecError
from danlu.server.db import Database
from danlu.server.services import jobs

NOW = 1_000_000.0
BODY: dict[str, Any] = {"command": ["python", "train.py"], "resources": {"gpus": 1}}


def _job(name: str, *after: str | dict[str, str]) -> dict[str, Any]:
    return {"name": name, **BODY, "depends_on": list(after)}


def test_waiting_for_one_job_to_both_succeed_and_fail_is_refused(db: Database) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (Node("a", 2, gpu_type("H100")),), NOW)
        prep = jobs.submit(s, _job("prep"), alice, now=NOW).id
        other = jobs.submit(s, _job("other"), alice, now=NOW).id
        clash = _job(
            "never",
            {"job": other, "condition": "failed"},
            prep,  # succeeded
            {"job": prep[:6], "condition": "failed"},  # the same job, by a prefix
        )
        with pytest.raises(SpecError) as caught:
            jobs.submit(s, clash, alice, now=NOW)
        assert caught.value.field == "depends_on.2.condition"
        assert f"job {prep} is named at depends_on.1 too" in caught.value.message
        assert "'succeeded'" in caught.value.message
        # conditions that can hold together, and one named twice alike, stay accepted
        fine = _job(
            "fine",
            {"job": prep, "condition": "started"},
            {"job": prep, "condition": "finished"},
            prep,
            prep[:6],
            {"job": other, "condition": "failed"},
        )
        job = jobs.submit(s, fine, alice, now=NOW)
        assert job.waiting_on == prep
