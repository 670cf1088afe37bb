"""One control plane per database.

Two control planes on one database (different homes) both ran: the second waited as a
standby on the ``scheduler`` lease and, once the first was ``kill -9``'d (its runs, started
by its home's local executor, running on), took the lease over and relaunched every running
job it could not see: each ran twice. Now a plane refuses to start while another live plane
holds the database's lease (after waiting for it to lapse), and refuses a database whose
running jobs were launched from another home; a restart on the same home after ``kill -9``
still takes over at once. Two planes starting together on a fresh PostgreSQL database raced
in the migrations (a 120-line traceback): upgrades are serialised.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import SRC, fake_loop, user_and_nodes, wait_for
from plane_procs import Plane, admin_api, planes
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from danlu.config import load_settings
from danlu.core.cluster import Node, gpu_type
from danlu.core.errors import ConfigError
from danlu.sched.registry import make_policy
from danlu.server.db import Database, Lease, current_revision, head_revision
from danlu.server.db import migrate as migrate_module
from danlu.server.plane_lease import LEASE, LeaseWatch, take_scheduler_lease
from danlu.server.services import jobs, locks, users

NOW = 1_000_000.0
NODE = Node("a", 1, gpu_type("H100"))
ENV = {**os.environ, "PYTHONPATH": str(SRC)}
UP_TIMEOUT = 25.0
"""Seconds a ``danlu up`` may take to serve, or to give up (the lease's TTL is 10 s)."""


# -- databases --------------------------------------------------------------------------------


# ``fresh_url``: an empty database of each backend (tests/server/conftest.py)


# -- processes --------------------------------------------------------------------------------


def _state(api: httpx.Client, job_id: str) -> str:
    return str(api.get(f"/jobs/{job_id}").json()["state"])


# -- one plane per database -------------------------------------------------------------------


# SQLite only: on PostgreSQL the start-up's refusal of a live holder, naming it, is
# test_start_up_refuses_a_live_holder_naming_it (in process), and a real plane refused
# there (its exit status, no traceback) is test_lost_home_takeover's
@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_second_plane_on_a_database_is_refused_naming_the_first(
    fresh_url: str, tmp_path: Path
) -> None:
    """It waited as a standby and took the lease (and the first's jobs) over later."""
    with planes() as started:
        first = Plane(tmp_path / "first", fresh_url, 0.5, verb="up")
        started.append(first)
        first.served()
        second = Plane(tmp_path / "second", fresh_url, 0.5, verb="up")
        started.append(second)
        said = second.refused()
        assert f"pid {first.proc.pid}" in said, said
        assert str((tmp_path / "first").resolve()) in said, said
        assert "another database" in said, said
        assert first.proc.poll() is None  # the first serves on
        assert not (tmp_path / "second" / "server.json").exists()
        assert not (tmp_path / "second" / "admin.token").exists()  # no token issued


def test_a_plane_on_another_home_leaves_a_dead_planes_runs_alone(
    fresh_url: str, tmp_path: Path
) -> None:
    """The reviewer's failover: the leader is ``kill -9``'d with a job running; a plane on
    another home took the lease over (a dead process of this host) and relaunched the job,
    which then ran twice. It is refused, naming the first home; the first home's plane,
    started again, takes over at once (its lease's TTL, 40 s, is not waited out), finds the
    run and cancels it."""
    starts = tmp_path / "starts.txt"
    body = {
        "name": "long",
        "command": ["bash", "-c", f"echo $$ >> {starts}; exec sleep 120"],
        "resources": {"gpus": 1},
    }
    first_home = tmp_path / "first"
    try:
        with planes() as started:
            first = Plane(first_home, fresh_url, 8.0, verb="up")
            started.append(first)
            with admin_api(first_home, first.served()) as api:
                job = api.post("/jobs", json=body).json()
                wait_for(lambda: starts.exists() and starts.read_text().strip(), UP_TIMEOUT, 0.1)
                assert _state(api, job["id"]) == "RUNNING"
            first.kill9()
            other = Plane(tmp_path / "other", fresh_url, 0.5, verb="up")
            started.append(other)
            said = other.refused()
            assert str(first_home.resolve()) in said, said
            assert job["id"] in said, said
            assert len(starts.read_text().split()) == 1  # not relaunched
            again = Plane(first_home, fresh_url, 8.0, verb="up")
            started.append(again)
            with admin_api(first_home, again.served()) as api:
                assert api.post(f"/jobs/{job['id']}/cancel").status_code == 200
                wait_for(lambda: _state(api, job["id"]) == "CANCELLED", UP_TIMEOUT, 0.1)
        assert len(starts.read_text().split()) == 1  # it ran once
    finally:
        for pid in starts.read_text().split() if starts.exists() else []:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)


# -- the lease, in process --------------------------------------------------------------------


def _submit(db: Database, t: float) -> str:
    with db.session() as s:
        alice = users.get_user(s, "alice")
        body = {"name": "one", "command": ["python", "train.py"], "resources": {"gpus": 1}}
        return jobs.submit(s, body, alice, now=t).id


def test_a_loop_on_another_home_does_not_relaunch_the_runs_of_the_first(
    db: Database, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A loop that gets the lease (expired) of a loop of another home whose job runs, and
    cannot see that run, relaunched it (``UnknownHandleError``); it now stays out, saying
    why."""
    with db.session() as s:
        user_and_nodes(s, (NODE,), NOW)
    first, _ = fake_loop(db, (NODE,), tmp_path / "first", make_policy("fifo"), 10_000)
    job_id = _submit(db, NOW)
    assert first.run_once(now=NOW + 1).launched == [job_id]
    second, world = fake_loop(db, (NODE,), tmp_path / "second", make_policy("fifo"), 10_000)
    # the first stops renewing: watched unchanged for its TTL (and 2 s), its lease is taken
    assert not second.run_once(now=NOW + 2).leader
    with caplog.at_level(logging.ERROR, logger="danlu.server.reconcile"):
        report = second.run_once(now=NOW + first.ttl + 5)
    assert not report.leader and report.launched == []
    assert world.runs == {}
    assert str((tmp_path / "first").resolve()) in caplog.text
    with db.read_session() as s:
        job = jobs.get_job(s, job_id)
        assert (job.state, job.attempt) == ("RUNNING", 1)
        lease = s.get(Lease, LEASE)
        assert lease is not None and lease.lock_token is None  # given back
    assert first.run_once(now=NOW + first.ttl + 6).leader  # the first home's loop goes on


def test_a_loop_that_loses_the_lease_says_so_and_stops_acting(
    db: Database, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with db.session() as s:
        user_and_nodes(s, (NODE,), NOW)
    loop, _ = fake_loop(db, (NODE,), tmp_path / "home", make_policy("fifo"), 10_000)
    assert loop.run_once(now=NOW).leader
    later = NOW + loop.ttl + 1  # the loop hung past its lease's TTL
    with db.session() as s:
        taken = locks.claim(s, Lease, [LEASE], "other", 60.0, later, "elsewhere:4242:1")
    assert taken == [LEASE]
    job_id = _submit(db, later)
    with caplog.at_level(logging.ERROR, logger="danlu.server.reconcile"):
        report = loop.run_once(now=later + 1)
    assert not report.leader and report.launched == []
    assert "lost the scheduler lease" in caplog.text and "pid 4242 on elsewhere" in caplog.text
    with db.read_session() as s:
        assert jobs.get_job(s, job_id).state == "PENDING"


def test_start_up_waits_for_a_lease_that_lapses(db: Database, tmp_path: Path) -> None:
    """A lease whose holder (on another host) stops renewing it is taken once it lapses."""
    with db.session() as s:
        assert locks.acquire_lease(s, LEASE, "gone", 1.0, time.time(), "elsewhere:1:1")
    settings = load_settings(home=tmp_path / "home")
    # a watch of a 1 s TTL (a plane's is at least 10 s): the row records none, so the wait
    # is that TTL and LEASE_GRACE, on the real clocks
    token = take_scheduler_lease(db, settings, watch=LeaseWatch(1.0))
    with db.read_session() as s:
        lease = s.get(Lease, LEASE)
        assert lease is not None and lease.lock_token == token
        assert lease.home is not None and str((tmp_path / "home").resolve()) in lease.home


def test_start_up_refuses_a_live_holder_naming_it(db: Database, tmp_path: Path) -> None:
    with db.session() as s:
        assert locks.acquire_lease(s, LEASE, "live", 3.0, time.time(), "farhost:77:5")
        s.execute(text("UPDATE leases SET home = 'the other home'"))
        s.commit()

    def renew_and_sleep(seconds: float) -> None:
        with db.session() as s:  # the holder is alive: it renews its lease
            assert locks.acquire_lease(s, LEASE, "live", 3.0, time.time(), "farhost:77:5")
        time.sleep(seconds)

    settings = load_settings(home=tmp_path / "home")
    with pytest.raises(ConfigError) as err:
        take_scheduler_lease(db, settings, sleep=renew_and_sleep)
    said = str(err.value)
    assert "farhost" in said and "pid 77" in said and "the other home" in said, said
    assert "another database" in said, said


# -- migrations -------------------------------------------------------------------------------

UPGRADE = (
    "import sys, time\n"
    "from pathlib import Path\n"
    "from danlu.core.errors import ConfigError\n"
    "from danlu.server.db import upgrade_database\n"
    "go = Path(sys.argv[2])\n"
    "while not go.exists():\n"
    "    time.sleep(0.005)\n"
    "try:\n"
    "    upgrade_database(sys.argv[1])\n"
    "except ConfigError as exc:\n"
    "    print(f'error: {exc}'); sys.exit(2)\n"
)


def test_upgrades_started_together_all_reach_head(fresh_url: str, tmp_path: Path) -> None:
    """One of two planes starting together on a fresh PostgreSQL database died with an
    IntegrityError (``alembic_version`` made twice)."""
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", UPGRADE, fresh_url, str(go)],
            env=ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(4)
    ]
    time.sleep(1.0)  # every process is waiting for the signal
    go.touch()
    said = [proc.communicate(timeout=60)[0] for proc in procs]
    assert [proc.returncode for proc in procs] == [0] * 4, said
    db = Database(fresh_url)
    try:
        assert current_revision(db.engine) == head_revision()
    finally:
        db.dispose()


def test_a_database_error_in_the_upgrade_is_a_config_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_args: Any, **_kwargs: Any) -> None:
        raise IntegrityError("CREATE TABLE alembic_version", {}, Exception("duplicate key"))

    monkeypatch.setattr(migrate_module.command, "upgrade", broken)
    url = f"sqlite:///{tmp_path / 'broken.db'}"
    with pytest.raises(ConfigError, match=r"broken\.db") as err:
        migrate_module.upgrade_database(url)
    assert "duplicate key" in str(err.value)
