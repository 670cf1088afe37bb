"""A home's plane started again on the port its running jobs report to, but on another
``--host`` that their address does not reach (``http://10.0.0.5:PORT`` told, ``127.0.0.1``
listened on), says so as a port taken is said: it said that it listened "where this home's
jobs report", and they never reached it. A home that records no address (an older danlu made
it) or recorded the plane's own after such a restart keeps the port its running jobs were
launched with: read from a local run's environment, or a Slurm run's task file. On SQLite:
the store only lists the running jobs."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from danlu.config import load_settings
from danlu.core.state import JobState
from danlu.core.units import GiB
from danlu.executors.procs import proc_start_time
from danlu.server.db import Database
from danlu.server.home_port import ADDRESS_RECORD, JobsAddress, tell_jobs_address
from danlu.server.main import Prepared, prepare
from danlu.server.services import jobs, users

SHARE = [{"node": "localhost", "gpu": 0, "milli": 1000, "memory": 80 * GiB}]
BODY = {"name": "j", "command": ["python", "t.py"], "resources": {"gpus": 1}}
ELSEWHERE = "10.255.0.5"
"""An address of another interface (not this machine's): where the jobs were told to report."""


def _prepare(home: Path, said: list[str], host: str = "127.0.0.1") -> Prepared:
    return prepare(
        load_settings(home=home, fake_gpus="1x80GiB"),
        host=host,
        port=0,
        start_loops=False,
        announce=said.append,
    )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def home(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A home whose plane stopped, leaving one job running, and that job's id."""
    home = tmp_path / "home"
    first = _prepare(home, [])
    first.close()
    db = Database(first.settings.db_url)
    try:
        with db.session() as s:
            job = jobs.submit(s, BODY, users.get_user(s, "admin"))
            jobs.change_state(s, job, JobState.RUNNING, "scheduled", allocation=SHARE)
            job_id = job.id
    finally:
        db.dispose()
    yield home, job_id


def test_the_same_port_on_an_address_the_jobs_do_not_reach_is_said(
    home: tuple[Path, str],
) -> None:
    path, _job = home
    port = _free_port()
    told = f"http://{ELSEWHERE}:{port}"
    (path / ADDRESS_RECORD).write_text(json.dumps({"url": told, "port": port}))
    said: list[str] = []
    again = _prepare(path, said)
    try:
        assert again.sock.getsockname()[:2] == ("127.0.0.1", port)  # the port kept
        warning = " ".join(line for line in said if "WARNING" in line)
        assert f"1 running job(s) of this home report to {told}" in warning, said
        assert f"{ELSEWHERE} is not an address it listens on (--host)" in warning
        assert f"--host {ELSEWHERE} --port {port}" in warning  # the fix
        assert not any("where this home's jobs report" in line for line in said), said
    finally:
        again.close()


def test_an_address_the_jobs_reach_is_not_said() -> None:
    """Every address (``0.0.0.0``) reaches an address of this machine; the told address is
    the new one itself; a name that does not resolve here cannot be judged."""
    recorded = JobsAddress("http://127.0.0.1:41235", 41235)
    for listening, url in (("0.0.0.0", "http://a-host:41235"), ("::", "http://a-host:41235")):
        said: list[str] = []
        tell_jobs_address(
            recorded=recorded,
            wanted=0,
            port=41235,
            taken=None,
            running=lambda: 2,
            announce=said.append,
            listening=listening,
            url=url,
        )
        assert len(said) == 1 and "listening on port 41235 again" in said[0], said
    unknown = JobsAddress("http://no-such-host.invalid:41235", 41235)
    said = []
    tell_jobs_address(
        recorded=unknown,
        wanted=0,
        port=41235,
        taken=None,
        running=lambda: 2,
        announce=said.append,
        listening="127.0.0.1",
        url="http://127.0.0.1:41235",
    )
    assert not any("WARNING" in line for line in said), said


def test_the_running_jobs_environment_gives_the_port_where_no_record_says(
    home: tuple[Path, str],
) -> None:
    """A local run's job process (its pid and start in ``job.json``) was told the address; the
    home has no ``api_url.json`` (an older danlu made it)."""
    path, job_id = home
    (path / ADDRESS_RECORD).unlink()
    port = _free_port()
    told = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"],
        stdin=subprocess.PIPE,
        env={"DANLU_API_URL": told},
    )
    try:
        run_dir = path / "executor" / "runs" / job_id
        run_dir.mkdir(parents=True)
        start = proc_start_time(proc.pid)
        (run_dir / "job.json").write_text(json.dumps({"pid": proc.pid, "start": start}))
        said: list[str] = []
        again = _prepare(path, said)
        try:
            assert again.url == told  # the port the running job reports to
            assert any(f"listening on port {port} again" in line for line in said), said
        finally:
            again.close()
    finally:
        proc.kill()
        proc.wait(10)


def test_a_slurm_runs_task_file_comes_before_the_record(home: tuple[Path, str]) -> None:
    """The record names the address of a plane that listened where the job did not report
    (it recorded its own); the run's task file says where the job reports."""
    path, job_id = home
    port = _free_port()
    told = f"http://127.0.0.1:{port}"
    (path / ADDRESS_RECORD).write_text(json.dumps({"url": "http://127.0.0.1:1", "port": 1}))
    run_dir = path / "executor" / "runs" / job_id
    run_dir.mkdir(parents=True)
    task = {"command": ["t"], "env": {"DANLU_API_URL": told}, "workdir": "/"}
    (run_dir / "task.json").write_text(json.dumps(task))
    said: list[str] = []
    again = _prepare(path, said)
    try:
        assert again.url == told
    finally:
        again.close()
