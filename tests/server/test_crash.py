"""Crash safety: ``danlu server`` as a subprocess, 100 short jobs, the SERVER killed with
SIGKILL 10 times at random (seeded) moments and restarted on the same home each time.

At the end every job is SUCCEEDED (exactly one terminal state), none is lost, none ran twice
at once (each run appends ``start PID T`` / ``end PID T`` to the job's own file: runs of one
job never overlap), and every job's events replay through the transition table to its final
state."""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import ServerProcess, replayed_state, server_process, wait_for

JOBS = 100
KILLS = 10
SEED = 20240605
FAKE = "4x80GiB"
SCRIPT = (
    "import os, sys, time\n"
    "path, seconds = sys.argv[1], float(sys.argv[2])\n"
    "with open(path, 'a') as f:\n"
    "    f.write(f'start {os.getpid()} {time.time():.6f}\\n')\n"
    "time.sleep(seconds)\n"
    "with open(path, 'a') as f:\n"
    "    f.write(f'end {os.getpid()} {time.time():.6f}\\n')\n"
)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with server_process(tmp_path / "home", FAKE, env={"DANLU_INTERVAL": "0.1"}) as proc:
        yield proc


def _spec(i: int, out: Path, rng: random.Random) -> dict[str, Any]:
    resources: dict[str, Any] = {"gpus": rng.choice([1, 1, 1, 2])}
    if resources["gpus"] == 1 and rng.random() < 0.6:
        resources["gpu_memory"] = rng.choice(["10GiB", "20GiB", "40GiB"])
    seconds = round(rng.uniform(0.2, 1.0), 2)
    return {
        "name": f"crash-{i}",
        "command": [sys.executable, "-c", SCRIPT, str(out / f"{i}.txt"), str(seconds)],
        "resources": resources,
        "priority": rng.randint(0, 3),
        "preemptible": False,
    }


def _check_runs(path: Path) -> int:
    """The job's runs never overlap and the last one finished; returns the number of runs."""
    lines = [line.split() for line in path.read_text().splitlines()]
    assert lines, f"{path} is empty: the job never ran"
    assert len(lines) % 2 == 0, f"{path}: a run started and never ended:\n{path.read_text()}"
    last_end = 0.0
    for start, end in zip(lines[::2], lines[1::2], strict=True):
        assert start[0] == "start" and end[0] == "end", f"{path}: overlapping runs: {lines}"
        assert start[1] == end[1], f"{path}: runs of two processes interleave: {lines}"
        assert float(start[2]) >= last_end <= float(end[2]), f"{path}: overlap: {lines}"
        last_end = float(end[2])
    return len(lines) // 2


def test_kill9_server_ten_times_during_100_jobs(server: ServerProcess, tmp_path: Path) -> None:
    rng = random.Random(SEED)
    out = tmp_path / "runs"
    out.mkdir()
    url = server.start()
    headers = {"Authorization": f"Bearer {server.token}"}
    specs = [_spec(i, out, rng) for i in range(JOBS)]
    with httpx.Client(base_url=f"{url}/api/v1", headers=headers, timeout=30) as client:

        def post(body: dict[str, Any]) -> str:
            response = client.post("/jobs", json=body)
            assert response.status_code == 201, response.text
            return str(response.json()["id"])

        with ThreadPoolExecutor(4) as pool:
            ids = list(pool.map(post, specs))
    t0 = time.monotonic()
    for _ in range(KILLS):
        time.sleep(rng.uniform(0.1, 1.0))
        server.kill9()
        url = server.start()

    def finished() -> list[dict[str, Any]] | None:
        try:
            with httpx.Client(base_url=f"{url}/api/v1", headers=headers, timeout=30) as c:
                jobs = c.get("/jobs", params={"limit": 1000}).json()
        except httpx.HTTPError:
            return None
        terminal = [j for j in jobs if j["state"] in ("SUCCEEDED", "FAILED", "CANCELLED")]
        return jobs if len(terminal) == JOBS else None

    jobs = wait_for(finished, 90, 0.5)
    elapsed = time.monotonic() - t0
    assert sorted(j["id"] for j in jobs) == sorted(ids), "a job was lost or duplicated"
    states = {j["id"]: j["state"] for j in jobs}
    bad = {k: v for k, v in states.items() if v != "SUCCEEDED"}
    assert not bad, f"not all SUCCEEDED: {bad}\n{server.tail()}"
    runs = 0
    with httpx.Client(base_url=f"{url}/api/v1", headers=headers, timeout=30) as client:
        for i, job_id in enumerate(ids):
            runs += _check_runs(out / f"{i}.txt")
            events = client.get(f"/jobs/{job_id}/events", params={"limit": 1000}).json()
            assert replayed_state(events) == states[job_id], events
        allocations = client.get("/cluster/allocations").json()
    assert allocations == []
    print(
        f"\ncrash test: {JOBS} jobs, {KILLS} kill -9 of the server, {runs} runs, "
        f"all SUCCEEDED {elapsed:.1f}s after the first kill"
    )
