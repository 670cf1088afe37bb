"""The reviewer's case, through ``danlu server``: the control plane and a run's supervisor die
together and the plane comes back later. The run was recorded as ending when the plane
noticed it after its restart, so the whole outage was charged as the job's GPU time (its
``run_time``, which counts toward its ``time_limit``, and ``/usage``). It ends when it was
last known alive now; and a run lost with its host (its records are of an earlier boot: a
power cut, a reboot) is re-queued as a node loss, no restart counted against the job."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import (
    ServerProcess,
    get_job,
    server_process,
    spec,
    submit,
    wait_for,
    wait_state,
)

FAKE = "2x80GiB"
OUTAGE = 2.0


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with server_process(tmp_path / "home", FAKE, env={"DANLU_INTERVAL": "0.1"}) as proc:
        yield proc


def _client(server: ServerProcess) -> httpx.Client:
    return httpx.Client(
        base_url=f"{server.url}/api/v1",
        headers={"Authorization": f"Bearer {server.token}"},
        timeout=30.0,
    )


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _dead(pid: int) -> bool:
    def gone() -> bool:
        try:
            raw = Path(f"/proc/{pid}/stat").read_bytes()
        except OSError:
            return True
        return raw[raw.rindex(b")") + 2 :].split()[0] in (b"Z", b"X")

    return bool(wait_for(gone, 10))


def test_runs_lost_while_the_control_plane_was_down_are_charged_until_they_died(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Two runs die with the control plane: one as the reviewer killed it, the other with
    the host (its records made to look as of the boot before)."""
    server.start()
    ids: dict[str, str] = {}
    with _client(server) as c:
        for case in ("crash", "reboot"):
            body = spec(case, "import time; time.sleep(60)", resources={"gpus": 1})
            ids[case] = submit(c, body | {"max_restarts": 3})["id"]
        started = {case: wait_state(c, i, "RUNNING")["started_at"] for case, i in ids.items()}
    runs = {case: tmp_path / "home" / "executor" / "runs" / i for case, i in ids.items()}
    records = {
        case: wait_for(lambda r=run: _read(r / "job.json"), 15) for case, run in runs.items()
    }
    server.kill9()
    for record in records.values():
        for pid in (record["supervisor_pid"], record["pid"]):
            os.kill(pid, signal.SIGKILL)
            assert _dead(pid)
    crashed = time.time()
    launch = _read(runs["reboot"] / "launch.json") or {}
    launch["boot"] = "00000000-0000-4000-8000-000000000000"  # what a power cut leaves
    (runs["reboot"] / "launch.json").write_text(json.dumps(launch))
    time.sleep(OUTAGE)  # the control plane is down meanwhile
    server.start()
    with _client(server) as c:
        jobs = {
            case: wait_for(lambda i=i: (j := get_job(c, i))["run_time"] > 0 and j, 30)
            for case, i in ids.items()
        }
        reasons = {
            case: [e["reason"] for e in c.get(f"/jobs/{i}/events").json()]
            for case, i in ids.items()
        }
    for case, job in jobs.items():
        assert job["run_time"] <= crashed - started[case], (case, job, crashed - started[case])
    crash, reboot = jobs["crash"], jobs["reboot"]
    assert (crash["restarts"], crash["preemptions"]) == (1, 0), reasons["crash"]
    assert any("supervisor lost" in r for r in reasons["crash"]), reasons["crash"]
    assert (reboot["restarts"], reboot["preemptions"]) == (0, 1), reasons["reboot"]
    assert any(r.startswith("lost with its node") for r in reasons["reboot"]), reasons["reboot"]
