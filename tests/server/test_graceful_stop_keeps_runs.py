"""A control plane stopped on purpose (``danlu up``'s Ctrl-C, systemd's SIGTERM) stops none of
its jobs (docs/deploy.md, "Restarts lose nothing"): their processes go on while it is down,
and the plane started again on the same home re-attaches to them, the same run of each job
on the same GPU with no restart counted, and stops them when asked."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from helpers import ServerProcess, get_job, server_process, spec, submit, wait_for, wait_state

FAKE = "2x80GiB"


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


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (not a zombie)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return raw[raw.rindex(b")") + 2 :].split()[0] not in (b"Z", b"X")


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["INT", "TERM"])
def test_a_stopped_plane_leaves_its_runs_running_and_the_next_one_adopts_them(
    server: ServerProcess, tmp_path: Path, stop: signal.Signals
) -> None:
    server.start()
    pid_file = tmp_path / "job.pid"
    code = (
        "import os, pathlib, time; "
        f"pathlib.Path({str(pid_file)!r}).write_text(str(os.getpid())); time.sleep(120)"
    )
    with _client(server) as c:
        job_id = submit(c, spec("long", code, resources={"gpus": 1}))["id"]
        before = wait_state(c, job_id, "RUNNING")
    pid = int(wait_for(lambda: pid_file.exists() and pid_file.read_text()))
    assert server.proc is not None
    server.proc.send_signal(stop)
    server.proc.wait(30)
    assert not (tmp_path / "home" / "server.json").exists()
    assert _alive(pid)  # the plane is gone; its job's process is not

    server.start()
    with _client(server) as c:
        time.sleep(1.5)  # some passes of the new plane (DANLU_INTERVAL 0.1 s)
        job = get_job(c, job_id)
        assert job["state"] == "RUNNING", job
        kept = ("restarts", "preemptions", "started_at", "allocation")
        assert {k: job[k] for k in kept} == {k: before[k] for k in kept}
        assert job["restarts"] == 0
        assert _alive(pid)  # adopted, not launched again nor stopped
        assert c.post(f"/jobs/{job_id}/cancel").status_code == 200
        wait_state(c, job_id, "CANCELLED")
    wait_for(lambda: not _alive(pid), 20)
