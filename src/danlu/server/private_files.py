"""What the control plane keeps is its account's alone: the home and its jobs' logs
(:func:`private_home`) and a SQLite database's files (:func:`private_database`), each change
said in the log."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from danlu.server.db.engine import sqlite_file

log = logging.getLogger("danlu.server.main")
"""The start-up's logger (:mod:`danlu.server.main`): making the home private is a step of it."""

OTHERS = 0o077
"""The group and other permission bits: none on what the control plane keeps (the database
holds webhook secrets and every job's environment, the logs every job's output)."""
LOGS = "logs"
"""The home's directory of the jobs' logs (the executors' ``log_dir``)."""


def private_home(home: Path) -> None:
    """Make ``home`` (owned by this user) and its ``logs`` directory ``0700`` and the logs
    in it private (an earlier version left them ``0644``), each change said in the log:
    ``mkdir(mode=0o700)`` applies only to a directory it makes, and a pre-made home
    (``/var/lib/danlu``, ``mkdir -p``) stayed ``0755``. A home of another account is left
    to its owner (said too). No umask: the local executor's jobs inherit this process's,
    and their own files keep their usual modes; a log made later (one per job) is in the
    private directory. Not for ``DANLU_RUN_AS=user``, whose home is ``0711``
    (:func:`~danlu.server.run_as.close_home`)."""
    try:
        info = home.stat()
        if info.st_uid != os.geteuid():
            if info.st_mode & OTHERS:
                log.warning(
                    "home %s is %04o and belongs to uid %d, not this user: other accounts "
                    "may read its database and the jobs' logs; chmod 700 it, or chown it "
                    "to this user (a home of its own is made private at start-up)",
                    home,
                    stat.S_IMODE(info.st_mode),
                    info.st_uid,
                )
            return
        _tighten(home, "home")
        logs = home / LOGS
        logs.mkdir(mode=0o700, exist_ok=True)
        _tighten(logs, "the jobs' log directory")
        loose = [entry for entry in logs.iterdir() if entry.is_file() and _private(entry)]
        if loose:
            log.warning(
                "made %d job log(s) in %s private (0600): other accounts could read them",
                len(loose),
                logs,
            )
    except OSError as exc:
        log.warning(
            "cannot make home %s private (%s): other accounts may read its database and "
            "the jobs' logs; chmod 700 it",
            home,
            exc.strerror or exc,
        )


def _private(path: Path) -> tuple[int, int] | None:
    """Take the group and other bits off ``path`` if it is this user's (not a symbolic
    link): a directory becomes ``0700``, a file keeps its own bits (a log ``0600``).
    ``(old mode, new mode)`` when it changed, else None."""
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode) or info.st_uid != os.geteuid() or not info.st_mode & OTHERS:
        return None
    was = stat.S_IMODE(info.st_mode)
    now = 0o700 if stat.S_ISDIR(info.st_mode) else was & ~OTHERS
    path.chmod(now)
    return was, now


def _tighten(path: Path, what: str) -> None:
    """:func:`_private`, said in the log (``what`` names ``path``)."""
    changed = _private(path)
    if changed is not None:
        log.warning(
            "%s %s was %04o, readable by other accounts; made it %04o", what, path, *changed
        )


SQLITE_COMPANIONS = ("", "-wal", "-shm", "-journal")
"""The suffixes of a SQLite database's files: itself, its write-ahead log, its shared
memory and its rollback journal."""


def private_database(db_url: str) -> None:
    """Make a SQLite database's files (:data:`SQLITE_COMPANIONS`) this user's alone: a
    missing database is made as an empty ``0600`` file before SQLite writes it (SQLite gives
    a new one ``0644`` less the umask, and its ``-wal`` and ``-shm`` the database's mode);
    existing ones of this user lose their group and other bits, said in the log. Other URLs
    (PostgreSQL, a ``file:`` URI) are left alone, and so are a database whose directory
    cannot be made and a file that is not a SQLite database (a wrong path): the engine's
    error names the setting (:func:`~danlu.server.main._open_store`)."""
    path = sqlite_file(db_url)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        log.debug("directory of database %s not made here: %s", path, exc)
        return
    try:
        if not path.exists():
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
    except OSError as exc:  # FileExistsError too: another process made it meanwhile
        log.debug("database %s not made here: %s", path, exc)
    if not _sqlite_or_empty(path):
        return  # not a database: the upgrade refuses it, and its mode stays the user's
    for suffix in SQLITE_COMPANIONS:
        companion = path.with_name(path.name + suffix)
        try:
            _tighten(companion, "database file")
        except FileNotFoundError:
            continue
        except OSError as exc:
            log.warning("cannot make database file %s private (%s): chmod 600 it", companion, exc)


SQLITE_HEADER = b"SQLite format 3\x00"
"""The first bytes of every SQLite database file."""


def _sqlite_or_empty(path: Path) -> bool:
    """True if ``path`` is empty (a new database) or a SQLite database file (its header);
    False for another kind of file, or one that cannot be read (left as it is)."""
    try:
        with path.open("rb") as file:
            start = file.read(len(SQLITE_HEADER))
    except OSError:
        return False
    return start in (b"", SQLITE_HEADER)
