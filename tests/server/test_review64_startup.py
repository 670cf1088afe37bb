"""The control plane's start-up and shutdown: a log follower does not hold a
stopping server for an hour; ``server.json`` goes with its server, and the CLI never sends the
admin token to whatever listens on a dead server's port; a relative home is made absolute; a
database newer than the code, a malformed or in-memory database URL are one-line errors; and
making the admin token anew revokes the old one."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import httpx
import pytest
import typer
from helpers import SRC, wait_for
from typer.testing import CliRunner

from danlu.cli import server
from danlu.client.discovery import find_server
from danlu.client.errors import NoServerError
from danlu.config import load_settings
from danlu.core.errors import ConfigError
from danlu.server import main
from danlu.server.db import Database, upgrade_database
from danlu.server.services.users import authenticate, bootstrap_admin, issue_token

SERVE = (
    "import sys\n"
    "from danlu.config import load_settings\n"
    "from danlu.server.main import prepare, run\n"
    "settings = load_settings(home=sys.argv[1], fake_gpus='1x80GiB')\n"
    "prepared = prepare(settings, port=0, start_loops=False, announce=lambda _t: None)\n"
    "run(prepared, lambda p: print(p.url, flush=True))\n"
)
"""A control plane served by :func:`danlu.server.main.run` (its signal handling, its
``server.json``), without the reconcile loop: a submitted job stays queued, no process runs."""


@contextmanager
def _served(home: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVE, str(home)],
        env={**os.environ, "PYTHONPATH": str(SRC)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://"), url + proc.stdout.read()
        wait_for(lambda: (home / "server.json").exists(), 10)
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


def test_a_log_follower_does_not_hold_a_stopping_server(tmp_path: Path) -> None:
    """A ``danlu logs -f`` of a job that runs on kept the server from exiting on SIGTERM for
    up to the follow timeout (an hour): uvicorn waited for the stream to end."""
    home = tmp_path / "home"
    with _served(home) as (proc, url):
        token = (home / "admin.token").read_text().strip()
        api = httpx.Client(base_url=f"{url}/api/v1", headers={"Authorization": f"Bearer {token}"})
        body = {"name": "quiet", "command": ["true"], "resources": {"gpus": 1}}
        job = api.post("/jobs", json=body).json()
        with api.stream("GET", f"/jobs/{job['id']}/logs", params={"follow": "true"}) as stream:
            assert stream.status_code == 200
            start = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            with suppress(subprocess.TimeoutExpired):
                proc.wait(main.GRACEFUL_SHUTDOWN + 4)
            assert proc.poll() is not None, "the server is still serving its log follower"
            assert time.monotonic() - start < main.GRACEFUL_SHUTDOWN + 4
        api.close()


def test_server_json_goes_with_its_server(tmp_path: Path) -> None:
    """It stayed after a clean stop, and the CLI sent the admin token to whatever listened on
    the old port next."""
    home = tmp_path / "home"
    with _served(home) as (proc, _url):
        info = json.loads((home / "server.json").read_text())
        assert info["pid"] == proc.pid and info["hostname"] == socket.gethostname()
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)
    assert not (home / "server.json").exists()


def test_server_json_of_another_server_is_left_alone(tmp_path: Path) -> None:
    main.write_server_json(tmp_path, "http://127.0.0.1:1")
    info = json.loads((tmp_path / "server.json").read_text())
    assert info["pid"] == os.getpid() and info["hostname"] == socket.gethostname()
    # a newer server wrote its own: not ours to remove
    (tmp_path / "server.json").write_text(json.dumps({**info, "pid": info["pid"] + 1}))
    main.remove_server_json(tmp_path)
    assert (tmp_path / "server.json").exists()
    main.write_server_json(tmp_path, "http://127.0.0.1:1")
    main.remove_server_json(tmp_path)
    assert not (tmp_path / "server.json").exists()
    main.remove_server_json(tmp_path)  # none: nothing to do


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait(10)
    return proc.pid


def test_find_server_refuses_a_dead_server_of_this_host(tmp_path: Path) -> None:
    (tmp_path / "admin.token").write_text("dl_secret\n")
    record = {"url": "http://127.0.0.1:8470", "pid": _dead_pid(), "started_at": 0}
    path = tmp_path / "server.json"
    path.write_text(json.dumps({**record, "hostname": socket.gethostname()}))
    with pytest.raises(NoServerError, match="not running") as err:
        find_server(tmp_path)
    assert "dl_secret" not in str(err.value)
    # another host's server (a home on a shared filesystem): local pids say nothing of it
    path.write_text(json.dumps({**record, "hostname": "another-host.example"}))
    assert find_server(tmp_path) == ("http://127.0.0.1:8470", "dl_secret")
    # an older server.json, without a hostname: as before
    path.write_text(json.dumps(record))
    assert find_server(tmp_path) == ("http://127.0.0.1:8470", "dl_secret")
    # a live one of this host
    path.write_text(json.dumps({**record, "pid": os.getpid(), "hostname": socket.gethostname()}))
    assert find_server(tmp_path) == ("http://127.0.0.1:8470", "dl_secret")


def test_a_relative_home_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Jobs got a relative DANLU_CHECKPOINT_DIR, which they resolved against their own
    workdir."""
    monkeypatch.chdir(tmp_path)
    assert load_settings(home=Path("relh")).home == tmp_path / "relh"
    monkeypatch.setenv("DANLU_HOME", "env/home")
    settings = load_settings()
    assert settings.home == tmp_path / "env" / "home"
    assert settings.db_url == f"sqlite:///{tmp_path}/env/home/danlu.db"


def _newer_database(home: Path) -> None:
    home.mkdir(parents=True)
    url = f"sqlite:///{home / 'danlu.db'}"
    upgrade_database(url)
    db = Database(url)
    with db.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = '0099_future'")
    db.dispose()


def test_a_database_newer_than_the_code_is_a_config_error(tmp_path: Path) -> None:
    """It was a raw Alembic traceback (exit 1)."""
    home = tmp_path / "home"
    _newer_database(home)
    with pytest.raises(ConfigError, match="0099_future") as err:
        upgrade_database(f"sqlite:///{home / 'danlu.db'}")
    assert "newer" in str(err.value) and "upgrade danlu" in str(err.value)
    app = typer.Typer()
    server.register(app)
    result = CliRunner().invoke(
        app, ["server", "--home", str(home), "--port", "0", "--fake-gpus", "1x80GiB"]
    )
    assert result.exit_code == 2, result.output
    assert "0099_future" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://danlu:S3cretPW@dbhost:54x2/danlu",
        "postgresql://u@[::1/db",
        "postgresql://u:S3c@ret:PW@dbhost/danlu",  # an '@' not percent-encoded
    ],
)
def test_a_malformed_database_url_names_the_setting(url: str) -> None:
    """A malformed port was a ValueError traceback from deep in SQLAlchemy."""
    with pytest.raises(ConfigError) as err:
        load_settings(database_url=url)
    text = str(err.value)
    assert "DANLU_DATABASE_URL" in text and "--database-url" in text
    assert "S3c" not in text and "PW" not in text


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:"])
def test_an_in_memory_database_is_refused(url: str) -> None:
    """The migration ran on a connection of its own: the server failed later with "no such
    table: users"."""
    with pytest.raises(ConfigError, match="in-memory"):
        load_settings(database_url=url)


def test_good_database_urls_still_pass(tmp_path: Path) -> None:
    for url in (
        f"sqlite:///{tmp_path}/x.db",
        "postgresql://u:p%40ss@[::1]:5432/db",
        "postgres://u@dbhost/danlu",
    ):
        assert load_settings(database_url=url).database_url


def test_making_the_admin_token_anew_revokes_the_old_one(tmp_path: Path) -> None:
    """Deleting admin.token and restarting issued a new token and left the old (perhaps
    leaked) one valid."""
    url = f"sqlite:///{tmp_path / 'danlu.db'}"
    upgrade_database(url)
    db = Database(url)
    path = tmp_path / "admin.token"
    try:
        with db.session() as session:
            old = bootstrap_admin(session, path)
            assert old is not None
            admin = authenticate(session, old)
            assert admin is not None
            laptop = issue_token(session, admin, "laptop")  # one an admin made: kept
        with db.session() as session:
            assert bootstrap_admin(session, path) is None  # the file is valid: nothing changes
        path.unlink()
        with db.session() as session:
            new = bootstrap_admin(session, path)
            assert new is not None and new != old
        with db.session() as session:
            assert authenticate(session, old) is None
            assert authenticate(session, new) is not None
            assert authenticate(session, laptop) is not None
    finally:
        db.dispose()
