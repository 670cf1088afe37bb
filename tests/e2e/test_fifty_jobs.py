"""End to end: ``danlu up --fake-gpus 4x80GiB`` as a real subprocess, 50 jobs of mixed sizes
(whole GPUs, 2-GPU gangs, and 10-30 GiB jobs that share GPUs by memory), all reach SUCCEEDED;
while they run, the allocation record never exceeds a GPU's memory and at least one GPU holds
two jobs at once; ``danlu ls --json`` and ``danlu logs`` work against the live server."""

from __future__ import annotations

import json
import random
import sys
import time
from typing import Any

import pytest
from e2e_server import Server, danlu

from danlu.core.errors import DanluError

GiB = 1024**3
N_JOBS = 50
STATES = {"PENDING", "RUNNING", "PREEMPTING", "RESTARTING", "SUCCEEDED", "FAILED", "CANCELLED"}
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}

pytestmark = pytest.mark.slow


def job_specs(seed: int = 5) -> list[dict[str, Any]]:
    """50 jobs: 2-GPU gangs, whole GPUs, and 10/20/30 GiB jobs that share 80 GiB GPUs."""
    rng = random.Random(seed)
    specs = []
    for i in range(N_JOBS):
        kind = i % 10
        resources: dict[str, Any]
        if kind == 0:
            resources = {"gpus": 2}
        elif kind in (1, 2):
            resources = {"gpus": 1}
        else:
            resources = {"gpus": 1, "gpu_memory": f"{rng.choice([10, 20, 30])}GiB"}
        sleep = round(rng.uniform(0.1, 0.5), 2)
        code = f"import time; time.sleep({sleep}); print('job {i} done')"
        specs.append(
            {
                "name": f"e2e-{i:02d}",
                "command": [sys.executable, "-c", code],
                "resources": resources,
                "priority": rng.randint(0, 3),
                "max_restarts": 0,
            }
        )
    return specs


def test_fifty_mixed_jobs_all_succeed_sharing_gpus_within_memory(server: Server) -> None:
    started = time.monotonic()
    client = server.client()
    submitted: dict[str, str] = {}
    for spec in job_specs():
        try:
            submitted[client.submit(spec)["id"]] = spec["name"]
        except DanluError as exc:
            pytest.fail(f"submit {spec['name']}: {exc}\n{server.output()}")
    assert len(submitted) == N_JOBS

    max_sharing = 0
    over: list[str] = []
    jobs: list[dict[str, Any]] = []
    deadline = time.monotonic() + 70
    while time.monotonic() < deadline:
        for node in client.nodes():
            for gpu in node["gpus"]:
                if gpu["allocated_memory"] > gpu["memory"]:
                    over.append(f"{node['name']}:{gpu['index']} {gpu['allocated_memory']}")
                max_sharing = max(max_sharing, len(set(gpu["jobs"])))
        per_gpu: dict[tuple[str, int], int] = {}
        for a in client.allocations():
            key = (a["node"], a["gpu"])
            per_gpu[key] = per_gpu.get(key, 0) + int(a["memory"])
        over += [f"{k} allocations {v}" for k, v in per_gpu.items() if v > 80 * GiB]
        jobs = [j for j in client.list_jobs(limit=1000) if j["id"] in submitted]
        if len(jobs) == N_JOBS and all(j["state"] in TERMINAL for j in jobs):
            break
        time.sleep(0.05)
    states = {j["name"]: j["state"] for j in jobs}
    assert all(s == "SUCCEEDED" for s in states.values()) and len(states) == N_JOBS, (
        f"not all succeeded: {states}\n{server.output()}"
    )
    assert not over, f"allocation over a GPU's memory: {over[:5]}"
    assert max_sharing >= 2, "no GPU was ever shared by two jobs at once"
    run_seconds = time.monotonic() - started

    listed = danlu("ls", "--json", "--home", str(server.home))
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    mine = [r for r in rows if r["id"] in submitted]
    assert len(mine) == N_JOBS
    for row in mine:
        assert {"id", "name", "state", "restarts"} <= set(row)
        assert row["state"] in STATES and row["state"] == "SUCCEEDED"
        assert row["name"] == submitted[row["id"]]

    some_id = next(iter(submitted))
    index = int(submitted[some_id].removeprefix("e2e-"))
    shown = danlu("logs", some_id, "--home", str(server.home))
    assert shown.returncode == 0, shown.stderr
    assert f"job {index} done" in shown.stdout
    client.close()
    print(f"50 jobs SUCCEEDED in {run_seconds:.1f} s; max jobs on one GPU at once: {max_sharing}")
