"""A sweep refused for its trials' owner names the field as the sweep spec has it,
``trial.user``: a disabled user (409) and, with ``DANLU_RUN_AS=user``, an owner whose OS
account no job could run as (422) were refused naming ``user``, a field the sweep spec does
not have (an unknown user was already ``trial.user``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import live_server, user_and_nodes

from danlu.core.cluster import Node, gpu_type
from danlu.server.db import Database
from danlu.server.errors import ConflictError
from danlu.server.services import sweeps, users

NOW = 1_000_000.0


def _sweep(trial: dict[str, Any], parallel: int = 1) -> dict[str, Any]:
    return {
        "name": "lr",
        "trial": {"command": ["python", "train.py"], **trial},
        "parameters": {"lr": {"values": [0.1, 0.01]}},
        "method": "grid",
        "parallel": parallel,
    }


def test_a_disabled_trial_user_is_named_as_trial_user(sqlite_db: Database) -> None:
    with sqlite_db.session() as s:
        alice = user_and_nodes(s, (Node("a", 2, gpu_type("H100")),), NOW)
        root = users.create_user(s, "root", "admin", now=NOW)
        alice.disabled_at = NOW
        s.flush()
        with pytest.raises(ConflictError) as refused:
            sweeps.create(s, _sweep({"user": "alice"}), root, now=NOW)
        assert refused.value.field == "trial.user", refused.value
        assert str(refused.value).startswith("trial.user: user 'alice' is disabled")
        # a conflict that names no field (too many unfinished jobs) still names none
        with pytest.raises(ConflictError) as many:
            sweeps.create(s, _sweep({}, parallel=2), root, max_unfinished=1, now=NOW)
        assert many.value.field is None and "DANLU_MAX_JOBS_PER_USER" in str(many.value)


def test_a_trial_user_no_job_could_run_as_is_named_as_trial_user(tmp_path: Path) -> None:
    """``POST /sweeps`` with ``DANLU_RUN_AS=user`` and a trial owner whose OS account is
    root's: a 422 naming ``trial.user``, no sweep stored."""
    with live_server(tmp_path, start_loops=False) as live, live.client() as c:
        assert live.prepared is not None
        assert c.post("/users", json={"name": "bob", "os_user": "root"}).status_code == 201
        state = live.prepared.app.state.danlu
        state.settings = state.settings.model_copy(update={"run_as": "user"})
        refused = c.post("/sweeps", json=_sweep({"user": "bob"}))
        assert refused.status_code == 422, refused.text
        error = refused.json()["error"]
        assert (error["type"], error["field"]) == ("AdmissionError", "trial.user"), error
        assert "root's (uid 0)" in error["message"]
        assert c.get("/sweeps").json() == []
