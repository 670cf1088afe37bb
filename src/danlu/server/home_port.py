"""The port a home's control plane listens on across restarts.

A job is told the control plane's address once, as it is launched (``DANLU_API_URL``), and
reports its metrics there for as long as it runs; a plane that stops leaves its jobs
running (docs/deploy.md, "Restarts lose nothing"). A plane started again on another port
(``--port 0`` picked another free one) was never heard from by those jobs again: their
metrics were lost, and the plane judged their progress by the last step they had reported
before the restart.

So each plane records the address it gives its jobs in ``{home}/api_url.json``
(:func:`record_address`), and a plane started with ``--port 0`` on a home that recorded one
listens on that port again (:func:`port_to_bind`), saying so; where it is taken, the plane
listens on another free port and says that the jobs still running report to the old
address (:func:`tell_jobs_address`), as does a plane given another ``--port`` explicitly.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.exc import OperationalError

from danlu.core.errors import ConfigError
from danlu.server.db import Database, Job
from danlu.server.services.projects import HOLDING

log = logging.getLogger(__name__)

ADDRESS_RECORD = "api_url.json"
"""The file of the home that holds the address its plane last gave its jobs."""

MAX_RECORD_BYTES = 4096
"""The most of :data:`ADDRESS_RECORD` that is read (the file is the home's, which a job run
as the plane's user could write: a larger one is not a record of ours)."""


class ListenError(ConfigError):
    """A ``host:port`` the control plane cannot listen on; ``reason`` says why in a few
    words (``Address already in use``)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class JobsAddress:
    """The address a home's plane gave its jobs (``DANLU_API_URL``) and the port of it."""

    url: str
    port: int


def read_address(home: Path) -> JobsAddress | None:
    """The address :func:`record_address` recorded in ``home``; None when there is none
    (a new home, one of an older danlu) or the record is not one (said in the log)."""
    path = home / ADDRESS_RECORD
    try:
        with path.open("rb") as file:
            text = file.read(MAX_RECORD_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("cannot read %s (%s): the port its jobs were told is unknown", path, exc)
        return None
    try:
        record = json.loads(text) if len(text) <= MAX_RECORD_BYTES else None
    except ValueError:
        record = None
    url = record.get("url") if isinstance(record, dict) else None
    port = record.get("port") if isinstance(record, dict) else None
    if (
        not isinstance(url, str)
        or isinstance(port, bool)
        or not isinstance(port, int)
        or not 0 < port <= 65535
    ):
        log.warning(
            "%s is not a record of an address; the port its jobs were told is unknown", path
        )
        return None
    return JobsAddress(url, port)


def record_address(home: Path, url: str, port: int) -> None:
    """Write ``{home}/api_url.json``: the address (``url``, on ``port``) this plane gives
    the jobs it launches, which a later plane on ``home`` listens on again
    (:func:`port_to_bind`). Written whole or not at all (a file beside it, then renamed);
    one that cannot be written is said in the log, and the plane serves all the same."""
    path = home / ADDRESS_RECORD
    tmp = path.with_name(f".{ADDRESS_RECORD}.{os.getpid()}.tmp")
    try:
        fd = os.open(
            tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(json.dumps({"url": url, "port": port}))
        os.replace(tmp, path)
    except OSError as exc:
        log.warning(
            "cannot record the jobs' address in %s (%s): a restart with --port 0 may listen "
            "on another port than the one its running jobs report to",
            path,
            exc,
        )


def port_to_bind(wanted: int, recorded: JobsAddress | None) -> int:
    """The port to listen on for ``--port wanted`` on a home that recorded ``recorded``:
    ``wanted``, but for ``--port 0`` (any free port) the port the home's jobs were told
    before, so that those still running reach the restarted plane."""
    if wanted == 0 and recorded is not None:
        return recorded.port
    return wanted


def running_jobs(db_url: str) -> int:
    """How many jobs of the database hold GPUs (their runs were launched, and told an
    address); 0, said in the log, when the database cannot be read."""
    db = Database(db_url)
    try:
        with db.session() as session:
            query = select(func.count()).select_from(Job).where(Job.state.in_(HOLDING))
            return int(session.scalar(query) or 0)
    except OperationalError as exc:
        log.warning("cannot count the running jobs: %s", exc)
        return 0
    finally:
        db.dispose()


def tell_jobs_address(
    *,
    recorded: JobsAddress | None,
    wanted: int,
    port: int,
    taken: str | None,
    running: Callable[[], int],
    announce: Callable[[str], None],
) -> None:
    """Say (through ``announce``) where the jobs of a plane that listens on ``port`` (asked
    for ``--port wanted``) report, given the address its home ``recorded`` before: that
    ``--port 0`` listens on the recorded port again, or, where it listens elsewhere (the
    recorded port could not be bound: ``taken`` says why; or another was asked for), that
    the jobs still running (``running()`` of them) report to the old address until they are
    launched again, and how to keep them."""
    if recorded is None:
        return
    if port == recorded.port:
        if wanted == 0:
            announce(
                f"danlu: --port 0: listening on port {port} again, where this home's jobs "
                f"report ({recorded.url}, DANLU_API_URL)"
            )
        return
    count = running()
    if taken is not None and not count:
        announce(
            f"danlu: --port 0: port {recorded.port}, this home's port before, cannot be "
            f"listened on ({taken}); listening on port {port}"
        )
    if not count:
        return
    why = (
        f"port {recorded.port} cannot be listened on ({taken})"
        if taken is not None
        else f"--port {wanted} was asked for"
    )
    announce(
        f"danlu: WARNING: {count} running job(s) of this home report to {recorded.url} "
        f"(DANLU_API_URL), but this plane listens on port {port}: {why}. Their metrics and "
        "progress do not reach this plane until each is launched again (a preemption, a "
        f"restart); to keep them in touch, stop this plane and start it with --port "
        f"{recorded.port} once that port is free"
    )
