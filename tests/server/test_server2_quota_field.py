"""A job that alone exceeds a quota is refused naming the field of the quota it exceeds:
``resources.gpus`` for a GPU quota whatever the project or user is called (a project named
memory-lab was blamed on ``resources.gpu_memory``), ``resources.gpu_memory`` for a GPU
memory quota."""

from __future__ import annotations

import pytest
from helpers import user_and_nodes

from danlu.core.cluster import Node, gpu_type
from danlu.core.units import GiB
from danlu.server.db import Database
from danlu.server.errors import AdmissionError
from danlu.server.services import jobs, projects, users

NOW = 1_000_000.0


def _spec(project: str, gpus: int, memory: int | None = None) -> dict[str, object]:
    resources: dict[str, object] = {"gpus": gpus}
    if memory is not None:
        resources["gpu_memory"] = memory
    return {"name": "j", "command": ["true"], "project": project, "resources": resources}


def test_a_quota_refusal_names_the_quota_s_field_not_a_word_of_a_name(db: Database) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (Node("a", 4, gpu_type("H100")),), NOW)
        projects.create_project(s, "memory-lab", quota_gpus=1)
        projects.create_project(s, "small", quota_gpu_memory=10 * GiB)
        with pytest.raises(AdmissionError) as gpus:
            jobs.submit(s, _spec("memory-lab", 2), alice, now=NOW)
        assert gpus.value.field == "resources.gpus"
        assert "project 'memory-lab' GPU quota" in gpus.value.message
        with pytest.raises(AdmissionError) as memory:
            jobs.submit(s, _spec("small", 1, 20 * GiB), alice, now=NOW)
        assert memory.value.field == "resources.gpu_memory"
        memorable = users.create_user(s, "memory.keeper", now=NOW)
        users.set_quota(s, memorable.name, 1)
        with pytest.raises(AdmissionError) as own:
            jobs.submit(s, _spec("default", 2), memorable, now=NOW)
        assert own.value.field == "resources.gpus"
