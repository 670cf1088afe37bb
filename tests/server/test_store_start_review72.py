"""Starting a control plane on a database of an older or of another danlu, or not danlu's
(review 71).

- A database a danlu before revision 0028 ran has a ``scheduler`` lease that names no home;
  a plane of another home read that as its own and ran the running jobs a second time. It
  now acts only when one of those jobs' runs is recorded under its own home.
- A starting plane migrated the database before it took the lease: a plane refused because
  an older danlu's plane used the database had migrated it, and that plane could not start
  on it again. It now waits for (and is refused by) a live holder first.
- Another application's Alembic revision read as "a newer danlu migrated it"; tables of
  danlu's names without a revision, or a file that is not a SQLite database, got a hint to
  GRANT rights on PostgreSQL; and such a file was made 0600 before it was refused.
- The hint to start a killed server again left out its ``--executor``.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import user_and_nodes
from sqlalchemy import text

from danlu.client.discovery import find_server
from danlu.client.errors import NoServerError
from danlu.config import load_settings
from danlu.core.cluster import Node, gpu_type
from danlu.core.errors import ConfigError
from danlu.server import main, private_files
from danlu.server.db import Database, Lease, current_revision, head_revision, upgrade_database
from danlu.server.plane_lease import (
    LEASE,
    LEASE_GRACE,
    LEASE_MIN_TTL,
    take_scheduler_lease,
    wait_before_upgrading,
)
from danlu.server.services import jobs, locks, users

NODE = Node("a", 1, gpu_type("H100"))


def _running_job(db: Database) -> str:
    """A job the database says runs (its run launched by some plane's executor)."""
    t = time.time()
    with db.session() as s:
        user_and_nodes(s, (NODE,), t)
        alice = users.get_user(s, "alice")
        body = {"name": "one", "command": ["python", "train.py"], "resources": {"gpus": 1}}
        job_id = jobs.submit(s, body, alice, now=t).id
        s.execute(
            text("UPDATE jobs SET state = 'RUNNING', attempt = 1 WHERE id = :id"), {"id": job_id}
        )
        # the lease of an older danlu: held once, lapsed, naming no home
        assert locks.acquire_lease(s, LEASE, "old", 1.0, t - 100, "elsewhere:1:1")
        s.commit()
    return job_id


def test_a_lease_naming_no_home_is_not_this_homes_unless_its_runs_are_here(
    db: Database, tmp_path: Path
) -> None:
    job_id = _running_job(db)
    home = tmp_path / "home"
    settings = load_settings(home=home)
    now = [time.time()]

    def sleep(seconds: float) -> None:  # the lapsed lease is watched for its TTL first
        now[0] += seconds

    with pytest.raises(ConfigError) as err:
        take_scheduler_lease(db, settings, clock=lambda: now[0], sleep=sleep)
    said = str(err.value)
    assert job_id in said and "does not name" in said and "another database" in said, said
    with db.read_session() as s:
        lease = s.get(Lease, LEASE)
        assert lease is not None and lease.lock_token is None and lease.home is None
    # the plane of the home that launched it (its run recorded there) takes it up
    run = home / "executor" / "runs" / job_id
    run.mkdir(parents=True)
    (run / "launch.json").write_text(json.dumps({"job_id": job_id, "attempt": 1}))
    token = take_scheduler_lease(db, settings)
    with db.read_session() as s:
        lease = s.get(Lease, LEASE)
        assert lease is not None and lease.lock_token == token
        assert lease.home is not None and str(home.resolve()) in lease.home


# -- an older danlu's plane that uses the database ---------------------------------------------


def _at_0027(tmp_path: Path, owner: str, expires: float) -> str:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    upgrade_database(url, "0027")
    db = Database(url)
    try:
        with db.engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO leases (id, lock_token, lock_expires_at, lock_owner) "
                    "VALUES (:id, 'old', :expires, :owner)"
                ),
                {"id": LEASE, "expires": expires, "owner": owner},
            )
    finally:
        db.dispose()
    return url


def _revision(url: str) -> str | None:
    db = Database(url)
    try:
        return current_revision(db.engine)
    finally:
        db.dispose()


def test_a_live_older_plane_keeps_its_database_unmigrated(tmp_path: Path) -> None:
    start = time.time()
    url = _at_0027(tmp_path, "farhost:77:5", start + 3)
    now = [start]

    def renewing_sleep(seconds: float) -> None:  # the older plane renews its lease meanwhile
        now[0] += seconds
        db = Database(url)
        try:
            with db.engine.begin() as conn:
                conn.execute(text("UPDATE leases SET lock_expires_at = :e"), {"e": now[0] + 3})
        finally:
            db.dispose()

    with pytest.raises(ConfigError) as err:
        wait_before_upgrading(url, clock=lambda: now[0], sleep=renewing_sleep)
    said = str(err.value)
    assert "pid 77 on farhost" in said and "0027" in said and head_revision() in said, said
    assert "Stop that plane first" in said, said
    assert _revision(url) == "0027"


def test_a_lapsed_or_dead_holder_lets_the_upgrade_go_on(tmp_path: Path) -> None:
    lapsed = tmp_path / "lapsed"
    lapsed.mkdir()
    start = time.time()
    url = _at_0027(lapsed, "farhost:77:5", start - 1)
    now = [start]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    # a lapsed lease is waited for until no one renewed it for its TTL (a clock stepped
    # ahead makes a live holder's lease look lapsed), then the upgrade goes on
    wait_before_upgrading(url, clock=lambda: now[0], sleep=sleep)
    assert now[0] - start <= LEASE_MIN_TTL + LEASE_GRACE + 1
    dead = tmp_path / "dead"
    dead.mkdir()
    gone = subprocess.Popen(["true"])
    gone.wait()
    url = _at_0027(dead, f"{socket.gethostname()}:{gone.pid}:1", time.time() + 600)
    wait_before_upgrading(url, sleep=lambda _s: pytest.fail("waited for a dead holder"))


def test_start_up_checks_the_lease_before_it_migrates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = _at_0027(tmp_path, "farhost:77:5", time.time() + 600)
    seen: list[str | None] = []

    def refuse(db_url: str, **_kwargs: Any) -> None:
        seen.append(_revision(db_url))
        raise ConfigError("another control plane uses it")

    monkeypatch.setattr(main, "wait_before_upgrading", refuse)
    settings = load_settings(home=tmp_path / "home", database_url=url)
    with pytest.raises(ConfigError, match="another control plane"):
        main._open_store(settings, take_lease=True)
    assert seen == ["0027"] and _revision(url) == "0027"


# -- not danlu's database -----------------------------------------------------------------------


def _sqlite_with(tmp_path: Path, *statements: str) -> str:
    path = tmp_path / "theirs.db"
    with sqlite3.connect(path) as conn:
        for statement in statements:
            conn.execute(statement)
    return f"sqlite:///{path}"


def test_another_applications_revision_is_not_called_a_newer_danlus(tmp_path: Path) -> None:
    url = _sqlite_with(
        tmp_path,
        "CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)",
        "INSERT INTO alembic_version VALUES ('3f2a9c1b7d0e')",
    )
    with pytest.raises(ConfigError) as err:
        upgrade_database(url)
    said = str(err.value)
    assert "3f2a9c1b7d0e" in said and "not danlu's database" in said, said
    assert "newer danlu" not in said, said


def test_a_newer_danlus_revision_says_so(tmp_path: Path) -> None:
    newer = f"{int(head_revision()) + 7:04d}"
    url = _sqlite_with(
        tmp_path,
        "CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)",
        f"INSERT INTO alembic_version VALUES ('{newer}')",
    )
    with pytest.raises(ConfigError, match="a newer danlu migrated it"):
        upgrade_database(url)


def test_tables_of_danlus_names_without_a_revision_are_not_danlus(tmp_path: Path) -> None:
    url = _sqlite_with(tmp_path, "CREATE TABLE users (id INTEGER PRIMARY KEY)")
    with pytest.raises(ConfigError) as err:
        upgrade_database(url)
    said = str(err.value)
    assert "not danlu's database" in said and "users" in said and "GRANT" not in said, said


def test_a_file_that_is_not_a_database_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes, not a database\n" * 200)
    notes.chmod(0o644)
    settings = load_settings(home=tmp_path / "home", database_url=f"sqlite:///{notes}")
    private_files.private_database(settings.db_url)
    with pytest.raises(ConfigError) as err:
        main._open_store(settings, take_lease=True)
    said = str(err.value)
    assert "notes.txt" in said and "GRANT" not in said and "SQLite" in said, said
    assert notes.stat().st_mode & 0o777 == 0o644
    assert notes.read_text().startswith("my notes")


def test_a_new_or_sqlite_database_file_is_still_made_private(tmp_path: Path) -> None:
    path = tmp_path / "danlu.db"
    private_files.private_database(f"sqlite:///{path}")
    assert path.stat().st_mode & 0o777 == 0o600
    path.chmod(0o644)
    upgrade_database(f"sqlite:///{path}")
    private_files.private_database(f"sqlite:///{path}")
    assert path.stat().st_mode & 0o777 == 0o600


# -- the hint to start a killed server again ----------------------------------------------------


def test_the_hint_for_a_killed_server_names_its_executor(tmp_path: Path) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    main.write_server_json(tmp_path, "http://127.0.0.1:1", "ray")
    info = json.loads((tmp_path / "server.json").read_text())
    assert info["executor"] == "ray"
    (tmp_path / "server.json").write_text(json.dumps({**info, "pid": gone.pid}))
    with pytest.raises(NoServerError) as err:
        find_server(tmp_path)
    assert f"danlu up --home {tmp_path} --executor ray" in str(err.value)
    main.write_server_json(tmp_path, "http://127.0.0.1:1")
    info = json.loads((tmp_path / "server.json").read_text())
    (tmp_path / "server.json").write_text(json.dumps({**info, "pid": gone.pid}))
    with pytest.raises(NoServerError) as err:
        find_server(tmp_path)
    assert "--executor" not in str(err.value)
    assert os.path.exists(tmp_path / "server.json")


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"policy": "nope"}, "DANLU_POLICY (--policy): unknown policy 'nope'"),
        ({"policy": "priority", "policy_options": '{"min_hold": 5}'}, "DANLU_POLICY_OPTIONS"),
    ],
    ids=["policy", "option"],
)
def test_a_bad_policy_is_refused_before_anything_is_made(
    tmp_path: Path, overrides: dict[str, Any], named: str
) -> None:
    """It was refused once the home, the database and the admin token had been made, and an
    unknown policy's error did not name the setting."""
    home = tmp_path / "home"
    settings = load_settings(home=home, **overrides)
    with pytest.raises(ConfigError, match=re.escape(named)):
        main.prepare(settings, port=0, fake_gpus="1x80GiB", start_loops=False)
    assert not home.exists()
