"""End to end: ``danlu submit SPEC --array 0-3%2`` against a real ``danlu up`` runs four
tasks as jobs, each with its own ``DANLU_ARRAY_INDEX``, and ``danlu wait ARRAY`` blocks until
all ended, exit 0 when every task succeeded (README, "Running jobs")."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from e2e_server import Server, danlu

pytestmark = pytest.mark.slow


def test_a_job_array_runs_each_index_once(server: Server, tmp_path: Path) -> None:
    spec = tmp_path / "shard.json"
    spec.write_text(
        json.dumps(
            {
                "name": "shard",
                "command": [
                    sys.executable,
                    "-c",
                    "import os; print('index', os.environ['DANLU_ARRAY_INDEX'])",
                ],
                "resources": {"gpus": 1, "gpu_memory": "1GiB"},
            }
        )
    )
    home = ("--home", str(server.home))
    submitted = danlu("submit", str(spec), "--array", "0-3%2", *home)
    assert submitted.returncode == 0, submitted.stderr
    found = re.search(
        r"submitted array ([0-9a-f]{12}) \(shard\): 4 tasks, at most 2", submitted.stdout
    )
    assert found, submitted.stdout
    array = found.group(1)

    waited = danlu("wait", array, "--timeout", "2m", *home, timeout=150)
    assert waited.returncode == 0, waited.stdout + waited.stderr

    with server.client() as c:
        tasks = [job for job in c.list_jobs() if job["name"].startswith("shard-")]
        assert sorted(job["name"] for job in tasks) == [f"shard-{i}" for i in range(4)]
        assert {job["state"] for job in tasks} == {"SUCCEEDED"}
        for job in tasks:
            index = job["name"].removeprefix("shard-")
            assert c.logs(job["id"])[0] == f"index {index}\n"
