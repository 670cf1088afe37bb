"""Run the control plane: migrate, bootstrap the admin token, find the GPUs, serve.

:func:`prepare` does everything but serving (tests run the result in a thread); :func:`serve`
runs it with uvicorn until interrupted.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO

import uvicorn
from fastapi import FastAPI
from sqlalchemy.exc import OperationalError

from danlu.config import Settings, check_executor_settings, job_base_env
from danlu.core.errors import ConfigError
from danlu.devices import Inventory, fake_inventory, inventory_from_cluster
from danlu.executors import Executor, ExecutorError
from danlu.executors.slurm_inventory import partition_nodes
from danlu.executors.slurmctl import SlurmCommands
from danlu.server.app import build_cluster_executor, build_executor, create_app, is_full
from danlu.server.db import Database, upgrade_database
from danlu.server.db.engine import database_shown, sqlite_file
from danlu.server.gpus import find_inventory
from danlu.server.home_port import (
    jobs_address,
    record_address,
    running_jobs,
    tell_jobs_address,
)
from danlu.server.listening import (
    advertised_host,
    bind,
    check_listen_address,
    check_port,
    listen_for_home,
)
from danlu.server.loops import close_quietly
from danlu.server.plane_lease import (
    EXECUTOR_STATE,
    InUseByAnotherPlane,
    LeaseWatch,
    refuse_foreign_before_upgrading,
    release_scheduler_lease,
    scheduler_lease_ttl,
    take_scheduler_lease,
    wait_before_upgrading,
)
from danlu.server.plane_owner import HomeHolder, last_home_holder, sign_home_lock
from danlu.server.private_files import private_database, private_home
from danlu.server.reconcile import build_policy, tune_collector
from danlu.server.run_as import check_run_as, close_home
from danlu.server.services.users import bootstrap_admin

log = logging.getLogger(__name__)


@dataclass
class Prepared:
    """A ready-to-serve control plane: the app, its bound socket, URL and admin token."""

    app: FastAPI
    sock: socket.socket
    url: str
    admin_token: str
    inventory: Inventory
    settings: Settings
    home_lock: IO[str] | None = None

    def close(self) -> None:
        """Give up the home (its lock), the database's ``scheduler`` lease and the socket;
        for callers that serve more than one control plane in a process (tests)."""
        self.app.state.reconciler.release_lease()
        if self.home_lock is not None:
            self.home_lock.close()
            self.home_lock = None
        self.sock.close()


class HomeInUse(InUseByAnotherPlane):
    """A start-up refused because another running control plane holds the home
    (:func:`lock_home`): starting again changes nothing until that plane stops, so ``danlu
    server`` exits :data:`~danlu.server.plane_lease.IN_USE_EXIT`, as for a database another
    plane uses (it exited 2, and systemd's ``Restart=on-failure`` started it again every few
    seconds)."""


def lock_home(home: Path) -> IO[str]:
    """Hold ``{home}/server.lock`` (an exclusive ``flock``) for as long as the returned file
    stays open: one control plane per home, since two would both launch the home's jobs.

    The kernel drops the lock when the process dies, so a crashed server never leaves a
    stale lock behind. Raises :class:`HomeInUse` naming the running server when the home
    is taken. The file names the home's plane that took the database's ``scheduler`` lease
    last (:func:`~danlu.server.plane_owner.sign_home_lock`): gone, once this one holds the
    lock (:func:`~danlu.server.plane_owner.last_home_holder`).
    """
    path = home / HOME_LOCK
    handle = path.open("a+", encoding="utf-8")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise home_in_use(home) from None
    return handle


HOME_LOCK = "server.lock"
"""The file in a home whose ``flock`` its running control plane holds (:func:`lock_home`)."""


def home_in_use(home: Path) -> HomeInUse:
    """The refusal of a start-up on ``home`` while another running plane holds it, naming
    that plane's pid and URL where its ``server.json`` says them, and the fix."""
    running = ""
    try:
        info = json.loads((home / "server.json").read_text(encoding="utf-8"))
        running = f" (pid {int(info['pid'])}, {info['url']})"
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return HomeInUse(
        f"home {str(home)!r} is in use by another danlu server{running}; stop that server "
        "or start this one with another --home (DANLU_HOME)"
    )


def check_home_free(home: Path) -> None:
    """Raise :class:`HomeInUse` where ``home``'s :data:`HOME_LOCK` exists and a running
    plane holds it, before anything is made or joined: ``--executor ray`` joins the Ray
    cluster to look at its claim (:func:`check_cluster`), which made this process a driver of
    the cluster (or started a local one) for a start-up :func:`lock_home` refused only after
    that. Nothing is made or kept: a home or lock file that does not exist (or cannot be
    opened: :func:`lock_home` says why) passes, and the lock is tried without waiting
    (shared: two start-ups asking at once do not refuse each other) and given up at once (a
    start-up of the same home taking it in that instant is refused as for a home in use); a
    plane that takes the home after is refused by :func:`lock_home`."""
    try:
        # O_NONBLOCK: a FIFO put in its place is not waited on
        fd = os.open(home / HOME_LOCK, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        raise home_in_use(home) from None
    except OSError:  # a file flock cannot lock: left to lock_home
        pass
    finally:
        os.close(fd)  # the lock, if taken, with it


def _announce(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


@dataclass
class _Store:
    """What :func:`_open_store` got from the store."""

    issued: str | None
    """The admin token issued now (``None``: one was issued before)."""
    lease: str | None
    """The token of the ``scheduler`` lease taken for this plane (``None``: none taken)."""


def _open_store(
    settings: Settings,
    *,
    take_lease: bool,
    take_over_lost_home: bool = False,
    last: HomeHolder | None = None,
) -> _Store:
    """Migrate the store (when ``take_lease``, not while a plane of an older danlu uses it:
    :func:`wait_before_upgrading`), take its ``scheduler`` lease when ``take_lease`` (one control
    plane per database: :func:`take_scheduler_lease`, which waits for another plane's to
    lapse and refuses a live one; ``take_over_lost_home``: the database's running jobs of
    another home are taken over, that home given up as lost; ``last``: the plane that held
    this home before, taken for gone where it holds the lease from an earlier boot), then
    bootstrap the admin token: a plane refused leaves no token behind. The upgrade is said
    in the log when it changed the database. A store that cannot be reached is a
    :class:`ConfigError` naming the URL (its password hidden)."""
    try:
        # one watch of the lease for both waits: a dead holder is waited for once
        watch = LeaseWatch(scheduler_lease_ttl(settings))
        if take_lease:  # a plane of an older danlu that uses the database keeps it as it is
            wait_before_upgrading(settings.db_url, watch=watch, last=last)
            if not take_over_lost_home:  # nor does the plane of the home that launched its jobs
                refuse_foreign_before_upgrading(settings.db_url, settings)
        migrated = upgrade_database(settings.db_url)
        if migrated.changed:  # an upgrade of danlu, or a new (or wrongly restored) database
            log.info("%s", migrated.describe(database_shown(settings.db_url)))
        db = Database(settings.db_url)
        try:
            lease = (
                take_scheduler_lease(
                    db, settings, watch=watch, take_over_lost_home=take_over_lost_home, last=last
                )
                if take_lease
                else None
            )
            try:
                with db.session() as session:
                    return _Store(bootstrap_admin(session, settings.admin_token_path), lease)
            except BaseException:
                if lease is not None:
                    _release_scheduler(settings, lease)
                raise
        finally:
            db.dispose()
    except OperationalError as exc:
        raise _unusable_store(settings, exc) from None


def _unusable_store(settings: Settings, exc: OperationalError) -> ConfigError:
    """The error of a store that cannot be reached (or written: a full disk), naming it (a
    SQLite file by its path, another by its URL with the password hidden), the setting and
    the fix."""
    shown = database_shown(settings.db_url)
    reason = str(exc.orig or exc).strip().splitlines()[0]
    if is_full(exc):
        fix = "free space on its disk"
    elif sqlite_file(settings.db_url) is not None:
        fix = "check that it is a database file this user can read and write"
    else:
        fix = "check that it is running and reachable"
    return ConfigError(
        f"cannot open the database {shown} (--database-url, DANLU_DATABASE_URL): {reason}; {fix}"
    )


def _release_scheduler(settings: Settings, token: str) -> None:
    """Give the lease :func:`_open_store` took back (a start-up that failed after it)."""
    db = Database(settings.db_url)
    try:
        release_scheduler_lease(db, token)
    except OperationalError as exc:  # it lapses anyway
        log.warning("cannot give the scheduler lease back: %s", exc)
    finally:
        db.dispose()


CLUSTER_HINTS = {
    "slurm": (
        "check that Slurm's commands work on this host (SLURM_CONF names the cluster's "
        "slurm.conf) and that --slurm-partition (DANLU_SLURM_PARTITION) names a partition "
        "with GPU nodes"
    ),
    "ray": (
        "start Ray on this host (ray start --head) or give the cluster's address with "
        "--ray-address (DANLU_RAY_ADDRESS)"
    ),
}
"""What to check when a cluster executor cannot read its nodes at start-up."""


def check_cluster(settings: Settings) -> None:
    """Refuse a start-up with Slurm (``--executor slurm``) whose nodes cannot be read (its
    controller unreachable, ``SLURM_CONF`` wrong, a partition with no nodes), or with Ray
    (``--executor ray``: :func:`check_ray_cluster`) before anything is made: the executor
    itself is built once the store is open and the port bound (it needs the URL the jobs
    are told, and keeps its records in the home), and a start-up refused only then left the
    home and the database behind. The executor reads Slurm's nodes again as it is built
    (after the store's migration and a wait for another plane's lease, which may take
    minutes: a reading handed over would be stale)."""
    if settings.executor == "ray":
        check_ray_cluster(settings)
    if settings.executor != "slurm":
        return
    try:
        partition_nodes(SlurmCommands(job_base_env()), settings.slurm_partition)
    except ExecutorError as exc:
        raise cluster_unreadable("slurm", exc) from None


def check_ray_cluster(settings: Settings) -> None:
    """Refuse a start-up with Ray (``--executor ray``) before anything is made where Ray is
    not installed (:data:`~danlu.executors.ray_nodes.RAY_NEEDED`), where the head's GCS does
    not answer at ``--ray-address`` (:func:`~danlu.executors.ray_nodes.check_ray_address`: a
    connection and one request, within 10 s), or where a live plane of another home claims
    the cluster (:func:`~danlu.executors.ray_executor.check_unclaimed`, which joins it, as
    the executor built later would, and claims nothing: a
    :class:`~danlu.executors.ray_claim.ClusterClaimedError`)."""
    from danlu.executors.ray_nodes import RAY_NEEDED, check_ray_address

    try:
        import ray  # noqa: F401 - the executor imports it when built
    except ImportError:
        raise ConfigError(RAY_NEEDED) from None
    from danlu.executors.ray_executor import check_unclaimed

    home = Path(settings.home)
    try:
        check_ray_address(settings.ray_address)
        check_unclaimed(home / EXECUTOR_STATE, home, settings.ray_address)
    except ExecutorError as exc:
        raise cluster_unreadable("ray", exc) from None


def cluster_unreadable(executor: str, exc: ExecutorError) -> ConfigError:
    """The refusal of a start-up whose ``executor`` (``slurm``, ``ray``) cannot read its
    cluster's nodes (``exc``), with what to check (:data:`CLUSTER_HINTS`)."""
    return ConfigError(
        f"--executor {executor}: cannot read the cluster's nodes: {exc}; " + CLUSTER_HINTS[executor]
    )


def prepare(
    settings: Settings,
    *,
    host: str = "127.0.0.1",
    port: int | None = None,
    fake_gpus: str | None = None,
    start_loops: bool = True,
    announce: Callable[[str], None] = _announce,
    preempt_grace: float | None = None,
    follow_timeout: float = 3600.0,
    take_over_lost_home: bool = False,
) -> Prepared:
    """Refuse a setting of another executor (:func:`~danlu.config.check_executor_settings`),
    lock the home (one control plane per home: :func:`lock_home`), migrate the store,
    take the database's ``scheduler`` lease (one control plane per database:
    :func:`take_scheduler_lease`, which waits for another plane's to lapse and refuses a
    live one, unless ``take_over_lost_home`` gives the home that launched the database's
    running jobs up as lost: :data:`~danlu.server.plane_lease.TAKE_OVER_FLAG`; with
    ``start_loops`` only; a lease held by the home's last plane from an earlier boot of this
    host is taken at once: :func:`~danlu.server.plane_owner.gone_from_home`, this plane then
    named in the home's lock file for the next: :func:`~danlu.server.plane_owner.sign_home_lock`),
    bootstrap the admin token (``{home}/admin.token``,
    mode 0600), find the GPUs, bind the port (for ``port`` 0, the one the home's jobs were
    told before, :func:`~danlu.server.home_port.jobs_address`, where it is free:
    :func:`~danlu.server.listening.listen_for_home`; the jobs still running told where they
    cannot reach it: :func:`~danlu.server.home_port.tell_jobs_address`) and build
    the app with its local executor, whose reconcile loop holds that lease, then record the
    address the jobs are told (:func:`~danlu.server.home_port.record_address`). The URL handed
    to the jobs and the CLI names :func:`~danlu.server.listening.advertised_host` (this host's
    name for a wildcard ``host``). What can be checked without making anything (the settings,
    ``port``, ``host``, ``fake_gpus``, the cluster: :func:`check_cluster`; for a home not made
    yet, the port bound) is checked before the home is made: a refused start-up leaves no home
    behind, nor touches one made before. A home another running plane holds is refused
    (:func:`check_home_free`) before the cluster is read or joined."""
    home = Path(settings.home)
    check_run_as(settings)
    check_executor_settings(settings, fake_gpus)  # before anything is made
    build_policy(settings)  # an unknown policy or option too (built again with the app)
    # the port and the address too (bound once the store is open), and a bad --fake-gpus
    # (read again by find_inventory; the setting's was checked when the settings were read)
    wanted_port = settings.port if port is None else port
    check_port(wanted_port)
    check_listen_address(host)
    if settings.executor == "local" and fake_gpus:
        fake_inventory(fake_gpus)
    check_home_free(home)  # another plane's home: refused before the cluster is joined
    check_cluster(settings)  # Slurm or Ray answers: before the home and the database are made
    # a new home's port is bound before the home is made: a port taken left the home made
    # (admin.token, danlu.db, logs/); an existing home's is bound later, so that a second
    # plane on it is told the home is in use, not that the port is
    sock: socket.socket | None = None if os.path.exists(home) else bind(host, wanted_port)
    try:
        home.mkdir(parents=True, exist_ok=True, mode=0o700)
        home_lock = lock_home(home)
    except BaseException as exc:
        if sock is not None:
            sock.close()
        if not isinstance(exc, OSError):
            raise
        raise ConfigError(
            f"--home {str(home)!r} (DANLU_HOME) cannot be used: {exc.strerror or exc}; give a "
            "directory this user can create and write"
        ) from None
    lease: str | None = None
    executor: Executor | None = None
    try:
        if settings.run_as == "user":
            close_home(home)  # before the store is made, so that the database is private
        else:
            private_home(home)
        private_database(settings.db_url)  # before SQLite makes it
        # the lease before the app writes the inventory to the store, serves, or runs a
        # pass; a plane whose caller runs the passes by hand (start_loops=False: tests)
        # takes it at its first pass, so that the caller's own loops may take it instead
        store = _open_store(
            settings,
            take_lease=start_loops,
            take_over_lost_home=take_over_lost_home,
            last=last_home_holder(home_lock, settings),  # gone: this process holds its lock
        )
        lease = store.lease
        if lease is not None:  # the home's next plane knows this one for its lease's holder
            sign_home_lock(home_lock)
        token = store.issued or settings.admin_token_path.read_text(encoding="utf-8").strip()
        inventory = (
            None
            if settings.executor != "local"
            else find_inventory(fake_gpus or settings.fake_gpus, announce)
        )
        recorded = jobs_address(home, settings.db_url)  # what the jobs still running were told
        taken: str | None = None
        if sock is None:
            sock, taken = listen_for_home(host, wanted_port, recorded)
        bound_host, bound_port = sock.getsockname()[:2]
        reached = advertised_host(bound_host, announce)
        shown = f"[{reached}]" if ":" in reached else reached
        url = f"http://{shown}:{bound_port}"
        tell_jobs_address(
            recorded=recorded,
            wanted=wanted_port,
            port=bound_port,
            taken=taken,
            running=lambda: running_jobs(settings.db_url),
            announce=announce,
            listening=bound_host,
            url=url,
        )
        if inventory is None:
            try:
                executor = build_cluster_executor(settings, url)
                inventory = inventory_from_cluster(executor.inventory(), settings.executor)
            except ExecutorError as exc:
                raise cluster_unreadable(settings.executor, exc) from None
            announce(f"danlu: running jobs with {settings.executor}: {inventory.describe()}")
        else:
            executor = build_executor(settings, inventory, url)
        app = create_app(
            settings,
            executor=executor,
            inventory=inventory,
            start_loops=start_loops,
            api_url=url,
            preempt_grace=preempt_grace,
            follow_timeout=follow_timeout,
        )
        if lease is not None:
            app.state.reconciler.hold_lease(lease)
            lease = None
        record_address(home, url, bound_port)  # the address its jobs are told from now on
    except BaseException:
        if lease is not None:
            _release_scheduler(settings, lease)
        if sock is not None:  # a start-up that failed does not keep the port
            sock.close()
        if executor is not None:  # nor the executor it built (create_app closes its own)
            close_quietly("the executor", executor.close)
        home_lock.close()
        raise
    return Prepared(app, sock, url, token, inventory, settings, home_lock)


GRACEFUL_SHUTDOWN = 3
"""Seconds a stopping server (SIGTERM, Ctrl-C) waits for the requests in progress before it
cancels them: a ``danlu logs -f`` streams until its job ends or the follow timeout (an hour)
passes, and would otherwise hold the server up that long."""


def write_server_json(home: Path, url: str, executor: str = "local") -> None:
    """``{home}/server.json``: where the CLI finds this server, which process serves it and
    on which host (the CLI refuses the record of a dead process of its own host:
    :func:`~danlu.client.discovery.find_server`, whose hint to start it again names its
    ``executor``)."""
    path = home / "server.json"
    tmp = path.with_name(f".server.json.{os.getpid()}.tmp")
    record = {
        "url": url,
        "pid": os.getpid(),
        "hostname": socket.gethostname(),
        "started_at": time.time(),
        "executor": executor,
    }
    tmp.write_text(json.dumps(record))
    os.replace(tmp, path)


def remove_server_json(home: Path) -> None:
    """Remove ``{home}/server.json`` when it is still this process's (a stopped server's URL
    must not send the CLI, and the admin token, to whatever listens on its port next); one
    another server wrote is left alone."""
    path = home / "server.json"
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(info, dict) and info.get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError) as exc:  # gone already, or unreadable: not ours to judge
        log.debug("server.json not removed: %s", exc)


class _Server(uvicorn.Server):
    """uvicorn's server, which writes ``{home}/server.json`` once it listens
    (:meth:`record`) and removes it as it begins to shut down: after a signal, uvicorn
    raises the signal again once it has stopped, and nothing after its ``run`` runs."""

    def __init__(self, config: uvicorn.Config, home: Path, executor: str) -> None:
        super().__init__(config)
        self.home = home
        self.executor = executor
        self._record_lock = threading.Lock()
        self._stopping = False
        self.stop_signal: int | None = None
        """The first signal that told it to stop (None: none yet, or told otherwise)."""

    def record(self, url: str) -> bool:
        """Write ``server.json`` naming ``url``, unless the shutdown has begun; whether it
        was written."""
        with self._record_lock:
            if self._stopping:
                return False
            write_server_json(self.home, url, self.executor)
            return True

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # no logging here, in a signal handler: the log's lock may be held by the code the
        # signal interrupted; :meth:`shutdown` says why it stops
        if self.stop_signal is None:
            self.stop_signal = sig
        super().handle_exit(sig, frame)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """Stop (the log says why, and that it stopped): ``server.json`` removed first, then
        uvicorn's shutdown, which ends the app's lifespan (its loops stop; the log says what
        runs on: :func:`~danlu.server.app.say_left_running`)."""
        with self._record_lock:
            self._stopping = True
            remove_server_json(self.home)
        log.info(
            "control plane stopping (%s): no new requests; those in progress have %d s",
            stop_cause(self.stop_signal),
            GRACEFUL_SHUTDOWN,
        )
        await super().shutdown(sockets)
        log.info("control plane stopped (home %s)", self.home)


STOP_CAUSES: dict[int, str] = {
    signal.SIGTERM: "SIGTERM: systemctl stop, kill",
    signal.SIGINT: "SIGINT: Ctrl-C",
}
"""What sends each signal that stops the server, in its log line."""


def stop_cause(sig: int | None) -> str:
    """Why the server stops, in words: the signal it got and what sends it, or none (its
    embedding code told it to exit)."""
    if sig is None:
        return "told to exit"
    try:
        name = signal.Signals(sig).name
    except ValueError:
        name = f"signal {sig}"
    return STOP_CAUSES.get(sig, name)


def run(
    prepared: Prepared,
    on_ready: Callable[[Prepared], None] | None = None,
    log_level: str = "warning",
) -> uvicorn.Server:
    """Serve ``prepared`` with uvicorn in this thread until it is told to exit (Ctrl-C,
    SIGTERM; the requests in progress then have :data:`GRACEFUL_SHUTDOWN` seconds), with
    ``{home}/server.json`` written once it listens and removed once it stops. The process
    becomes the control plane: its collector thresholds are set
    (:func:`~danlu.server.reconcile.tune_collector`)."""
    tune_collector()
    config = uvicorn.Config(
        prepared.app,
        log_level=log_level,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN,
    )
    server = _Server(config, Path(prepared.settings.home), prepared.settings.executor)

    def ready() -> None:
        while not server.started and not server.should_exit:
            time.sleep(0.02)
        if server.started and server.record(prepared.url) and on_ready is not None:
            on_ready(prepared)

    threading.Thread(target=ready, name="danlu-ready", daemon=True).start()
    try:
        server.run(sockets=[prepared.sock])
    finally:  # a start-up that failed
        remove_server_json(server.home)
    return server


def serve(
    settings: Settings,
    *,
    host: str = "127.0.0.1",
    port: int | None = None,
    fake_gpus: str | None = None,
    on_ready: Callable[[Prepared], None] | None = None,
) -> None:
    """Run the control plane until interrupted: migrate the store, bootstrap the admin token,
    find the GPUs (fake ones announced on stderr), start the local executor and the reconcile
    loop, write ``{home}/server.json`` once listening, and serve the API with uvicorn."""
    prepared = prepare(settings, host=host, port=port, fake_gpus=fake_gpus)
    run(prepared, on_ready)
