"""A home's control plane started again with ``--port 0`` listens where its running jobs
report (``DANLU_API_URL``, recorded in ``{home}/api_url.json``), and one that cannot, or is
given another ``--port``, says that those jobs report to the old address. On SQLite: the
store only counts the running jobs."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from danlu.config import load_settings
from danlu.core.state import JobState
from danlu.core.units import GiB
from danlu.server.db import Database
from danlu.server.home_port import (
    ADDRESS_RECORD,
    JobsAddress,
    port_to_bind,
    read_address,
    record_address,
    tell_jobs_address,
)
from danlu.server.main import Prepared, prepare
from danlu.server.services import jobs, users

SHARE = [{"node": "localhost", "gpu": 0, "milli": 1000, "memory": 80 * GiB}]
BODY = {"name": "j", "command": ["python", "t.py"], "resources": {"gpus": 1}}


def _prepare(home: Path, said: list[str], port: int = 0) -> Prepared:
    return prepare(
        load_settings(home=home, fake_gpus="1x80GiB"),
        port=port,
        start_loops=False,
        announce=said.append,
    )


@pytest.fixture
def home(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A home whose plane (on any free port) stopped, leaving one job running, and the
    address that plane gave its jobs."""
    home = tmp_path / "home"
    first = _prepare(home, [])
    first.close()
    db = Database(first.settings.db_url)
    try:
        with db.session() as s:
            job = jobs.submit(s, BODY, users.get_user(s, "admin"))
            jobs.change_state(s, job, JobState.RUNNING, "scheduled", allocation=SHARE)
    finally:
        db.dispose()
    yield home, first.url


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def test_port_0_listens_again_where_the_jobs_report(home: tuple[Path, str]) -> None:
    path, told = home
    said: list[str] = []
    again = _prepare(path, said)
    try:
        assert again.url == told  # where the running job reports
        assert any(f"listening on port {_port(told)} again" in line for line in said), said
        assert not any("WARNING" in line for line in said), said
    finally:
        again.close()


def test_the_port_taken_the_plane_says_its_running_jobs_report_elsewhere(
    home: tuple[Path, str],
) -> None:
    path, told = home
    old = _port(told)
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", old))
        holder.listen()
        said: list[str] = []
        moved = _prepare(path, said)
    try:
        port = moved.sock.getsockname()[1]
        assert port != old
        warning = " ".join(line for line in said if "WARNING" in line)
        assert f"1 running job(s) of this home report to http://127.0.0.1:{old}" in warning
        assert f"listens on port {port}" in warning and "Address already in use" in warning
        assert f"--port {old}" in warning
        assert read_address(path) == JobsAddress(moved.url, port)  # what it tells jobs now
    finally:
        moved.close()


def test_port_choice() -> None:
    recorded = JobsAddress("http://127.0.0.1:41235", 41235)
    assert port_to_bind(0, recorded) == 41235
    assert port_to_bind(8470, recorded) == 8470  # asked for: kept
    assert port_to_bind(0, None) == 0


def test_another_port_asked_for_is_said_only_while_jobs_run() -> None:
    recorded = JobsAddress("http://node1:41235", 41235)
    said: list[str] = []
    asked = {"recorded": recorded, "wanted": 8470, "port": 8470, "taken": None}
    tell_jobs_address(**asked, running=lambda: 0, announce=said.append)  # type: ignore[arg-type]
    assert said == []  # no job to lose
    tell_jobs_address(**asked, running=lambda: 2, announce=said.append)  # type: ignore[arg-type]
    assert len(said) == 1, said
    assert "2 running job(s) of this home report to http://node1:41235" in said[0]
    assert "--port 8470 was asked for" in said[0] and "--port 41235" in said[0]
    tell_jobs_address(
        recorded=None, wanted=0, port=5000, taken=None, running=lambda: 3, announce=said.append
    )
    assert len(said) == 1  # a home without a record: nothing known to say


def test_a_record_that_is_not_one_is_no_address(tmp_path: Path) -> None:
    record_address(tmp_path, "http://127.0.0.1:41235", 41235)
    assert read_address(tmp_path) == JobsAddress("http://127.0.0.1:41235", 41235)
    for text in ("", "[]", '{"url": "x", "port": 0}', '{"url": "x", "port": true}', "x" * 5000):
        (tmp_path / ADDRESS_RECORD).write_text(text)
        assert read_address(tmp_path) is None, text
