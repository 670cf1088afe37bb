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
address (:func:`tell_jobs_address`), as does a plane given another ``--port`` explicitly, or
another ``--host`` that the old address does not reach (:func:`reaches`: the same port on
another interface is no use to the jobs). Where the running jobs' launches say what they
were told (a local run's environment, a Slurm run's task file), that comes first
(:func:`jobs_address`): a home an older danlu made records nothing, and a plane that
listened where its jobs did not report recorded its own address, not theirs.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import socket
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from sqlalchemy import func, select
from sqlalchemy.exc import OperationalError

from danlu.core.errors import ConfigError
from danlu.executors.base import JOB_ID_RE
from danlu.executors.rundirs import RUNS_DIR
from danlu.executors.slurm_task import TASK
from danlu.executors.supervise import JOB, alive, read_json
from danlu.server.db import Database, Job
from danlu.server.plane_lease import EXECUTOR_STATE
from danlu.server.services.projects import HOLDING

log = logging.getLogger(__name__)

ADDRESS_RECORD = "api_url.json"
"""The file of the home that holds the address its plane last gave its jobs."""

MAX_RECORD_BYTES = 4096
"""The most of :data:`ADDRESS_RECORD` that is read (the file is the home's, which a job run
as the plane's user could write: a larger one is not a record of ours)."""
MAX_ENVIRON_BYTES = 1024**2
"""The most of a running job's ``/proc/PID/environ`` that is read for its ``DANLU_API_URL``."""
URL_VARIABLE = "DANLU_API_URL"
"""The variable that tells a job the control plane's address."""


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
    told: int | None = None
    """How many running jobs' launches were read to have been told it
    (:func:`address_from_runs`); None: read from :data:`ADDRESS_RECORD`."""


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


def url_port(url: str) -> int | None:
    """The port of ``url``, an ``http(s)://host:port`` address a plane gives its jobs; None
    for anything else."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname or not port:
        return None
    return port


def _run_url(run_dir: Path) -> str | None:
    """The ``DANLU_API_URL`` the run recorded in ``run_dir`` was launched with: a Slurm run's,
    in its task file (:data:`~danlu.executors.slurm_task.TASK`); a local run's, in the
    environment of its job's process while it runs (its pid and start in
    :data:`~danlu.executors.supervise.JOB`). None where neither says (a Ray run's environment
    is in its actors alone; a local run that ended)."""
    task = read_json(run_dir / TASK)
    env = task.get("env") if task is not None else None
    if isinstance(env, dict) and isinstance(env.get(URL_VARIABLE), str):
        return str(env[URL_VARIABLE])
    record = read_json(run_dir / JOB)
    pid = record.get("pid") if record is not None else None
    start = record.get("start") if record is not None else None
    if not isinstance(pid, int) or not isinstance(start, int) or not alive(pid, start):
        return None
    try:
        with open(f"/proc/{pid}/environ", "rb") as file:
            environ = file.read(MAX_ENVIRON_BYTES)
    except OSError:  # gone meanwhile, or another user's process this one cannot read
        return None
    prefix = f"{URL_VARIABLE}=".encode()
    for entry in environ.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix) :].decode("utf-8", "replace")
    return None


def address_from_runs(home: Path, job_ids: Iterable[str]) -> JobsAddress | None:
    """The address the running jobs ``job_ids`` of ``home`` report to, read from their runs'
    launches (:func:`_run_url`): the one most of them were told (of two as many, the first's).
    None where no run says (no job runs; Ray runs)."""
    runs = home / EXECUTOR_STATE / RUNS_DIR
    told: Counter[str] = Counter()
    for job_id in job_ids:
        if not JOB_ID_RE.fullmatch(job_id):
            continue
        url = _run_url(runs / job_id)
        if url is not None and url_port(url) is not None:
            told[url] += 1
    if not told:
        return None
    url, count = told.most_common(1)[0]
    port = url_port(url)
    return JobsAddress(url, port, told=count) if port is not None else None


def jobs_address(home: Path, db_url: str) -> JobsAddress | None:
    """The address ``home``'s running jobs (of the database ``db_url``) report to: the one
    their launches say (:func:`address_from_runs`), else the one the home recorded
    (:func:`read_address`). Their launches come first: a plane that listened where they do
    not report (another port or host, said by :func:`tell_jobs_address`) recorded its own
    address, which they were never told, and a home an older danlu made records none."""
    running = address_from_runs(home, running_job_ids(db_url))
    return running if running is not None else read_address(home)


def running_job_ids(db_url: str) -> list[str]:
    """The ids of the jobs of the database that hold GPUs (oldest first); none, said in the
    log, when the database cannot be read."""
    db = Database(db_url)
    try:
        with db.session() as session:
            query = select(Job.id).where(Job.state.in_(HOLDING)).order_by(Job.seq)
            return [str(job_id) for job_id in session.scalars(query)]
    except OperationalError as exc:
        log.warning("cannot read the running jobs: %s", exc)
        return []
    finally:
        db.dispose()


def _addresses_of(host: str) -> set[str] | None:
    """The addresses ``host`` (a name or an address) resolves to here; None where it does not
    resolve."""
    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return None
    return {str(info[4][0]) for info in found}


def reaches(
    url: str, listening: str, resolve: Callable[[str], set[str] | None] = _addresses_of
) -> bool | None:
    """Whether ``url``'s host (a job's ``DANLU_API_URL``) reaches a plane listening on the
    address ``listening`` (as its socket names it; ``0.0.0.0``: every IPv4 address of this
    machine, ``::`` every address): one of the addresses it resolves to (``resolve``) is the
    one listened on, or of a family listened on whole. None where it cannot tell (the host
    does not resolve here, an address that is not one)."""
    host = urlsplit(url).hostname
    found = resolve(host) if host else None
    if not found:
        return None
    try:
        bound = ipaddress.ip_address(listening.split("%", 1)[0])
        addresses = {ipaddress.ip_address(a.split("%", 1)[0]) for a in found}
    except ValueError:
        return None
    if bound.is_unspecified:
        return bound.version == 6 or any(a.version == 4 for a in addresses)
    return any(
        a == bound or (isinstance(a, ipaddress.IPv6Address) and a.ipv4_mapped == bound)
        for a in addresses
    )


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
    listening: str | None = None,
    url: str | None = None,
) -> None:
    """Say (through ``announce``) where the jobs of a plane that listens on ``port`` of the
    address ``listening`` (asked for ``--port wanted``; giving its jobs ``url`` from now on)
    report, given the address its home ``recorded`` before: that ``--port 0`` listens on the
    recorded port again, or, where the recorded address does not reach it (the recorded port
    could not be bound: ``taken`` says why; another was asked for; or the recorded address's
    host is not one it listens on, :func:`reaches`: another ``--host``), that the jobs still
    running (those read to have been told it, :attr:`JobsAddress.told`, else ``running()``
    of them) report to the old address until they are launched again, and how to keep them.
    ``listening`` None: the host is not judged."""
    if recorded is None:
        return
    host = urlsplit(recorded.url).hostname or ""
    host_reached = (
        listening is None or recorded.url == url or reaches(recorded.url, listening) is not False
    )
    if port == recorded.port and host_reached:
        if wanted == 0:
            announce(
                f"danlu: --port 0: listening on port {port} again, where this home's jobs "
                f"report ({recorded.url}, DANLU_API_URL)"
            )
        return
    count = running() if recorded.told is None else recorded.told
    if taken is not None and not count:
        announce(
            f"danlu: --port 0: port {recorded.port}, this home's port before, cannot be "
            f"listened on ({taken}); listening on port {port}"
        )
    elif port == recorded.port and wanted == 0 and not count:
        announce(f"danlu: --port 0: listening on port {port} again, this home's port before")
    if not count:
        return
    why = []
    if port != recorded.port:
        why.append(
            f"port {recorded.port} cannot be listened on ({taken})"
            if taken is not None
            else f"--port {wanted} was asked for"
        )
    fix = f"--port {recorded.port}"
    if not host_reached:
        why.append(f"{host} is not an address it listens on (--host)")
        fix = f"--host {host} {fix}"
    listens = f"port {port}" if host_reached else f"port {port} of {listening}"
    free = " once that port is free" if port != recorded.port else ""
    announce(
        f"danlu: WARNING: {count} running job(s) of this home report to {recorded.url} "
        f"(DANLU_API_URL), but this plane listens on {listens}: {'; '.join(why)}. Their "
        "metrics and progress do not reach this plane until each is launched again (a "
        f"preemption, a restart); to keep them in touch, stop this plane and start it with "
        f"{fix}{free}"
    )
