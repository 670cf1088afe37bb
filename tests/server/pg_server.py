"""A throw-away PostgreSQL cluster for the store tests (:class:`PgServer`), run from Debian's
``postgresql`` package (``/usr/lib/postgresql/*/bin``, found by :func:`pg_bin`): ``initdb``
and ``pg_ctl`` in a temporary directory, as the ``postgres`` system user when the tests run
as root (PostgreSQL refuses to run as root), listening on a free port on 127.0.0.1 and a
unix socket in that directory. ``conftest.py`` starts one per test session (per pytest-xdist
worker)."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path


def pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _as_pg_user(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    return ["runuser", "-u", "postgres", "--", *argv]


class PgServer:
    """A throw-away PostgreSQL cluster."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="danlu-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        if os.geteuid() == 0:
            entry = pwd.getpwnam("postgres")
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self.root.chmod(0o700)

    def _run(self, *argv: str) -> None:
        done = subprocess.run(
            _as_pg_user([str(self.bindir / argv[0]), *argv[1:]]),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed: {done.stdout}\n{done.stderr}")

    def start(self) -> None:
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "-A",
            "trust",
            "--no-sync",
            "-E",
            "UTF8",
            "--locale=C",
        )
        self.resume()

    def resume(self) -> None:
        """Start the cluster's server (again, after :meth:`halt`)."""
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-o",
            options,
            "-l",
            str(self.root / "log"),
            "-w",
            "-t",
            "60",
            "start",
        )

    def halt(self, mode: str = "immediate") -> None:
        """Stop the server, keeping its data for :meth:`resume`: at once, as a crash would
        (``immediate``: with ``synchronous_commit=off`` the last commits may be lost), or
        after writing everything out (``fast``), as an operator's restart would."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def stop(self) -> None:
        try:
            self.halt()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"
