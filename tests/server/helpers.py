"""Shared helpers of the API / reconcile / crash / security / Prometheus / store tests: a real
uvicorn server on 127.0.0.1 (a free port) in a thread, or ``danlu server`` as a subprocess,
a scheduling round recorded in a store, and a training step as danlu.train reports it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import uvicorn
from sqlalchemy import text
from sqlalchemy.orm import Session

from danlu.config import load_settings
from danlu.core.cluster import Allocation, Cluster, GpuShare, Node
from danlu.core.state import JobState
from danlu.core.units import GiB
from danlu.executors import Executor, FakeExecutor, FakeWorld
from danlu.executors.fake import ManualClock
from danlu.sched.policies.base import Policy
from danlu.sched.registry import make_policy
from danlu.sched.view import ClusterView, Plan
from danlu.server.db import Database
from danlu.server.db.models import Base, User
from danlu.server.main import Prepared, prepare
from danlu.server.reconcile import Reconciler
from danlu.server.services import cluster, users
from danlu.server.services.events import replay
from danlu.server.services.record import Applied, apply_plan
from danlu.server.services.view import build_snapshot

TERMINAL = {s.value for s in JobState if s.terminal}
SRC = Path(__file__).resolve().parents[2] / "src"


def truncate(db: Database) -> None:
    """Empty every table of a PostgreSQL store (the shared, migrated template database)."""
    tables = ", ".join(t.name for t in reversed(Base.metadata.sorted_tables))
    with db.engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))


def record_round(db: Database, policy: Policy, now: float) -> Applied:
    """One scheduling round in the store, as the reconcile loop makes it: the snapshot at
    ``now``, the policy's plan, and the plan recorded, in one transaction."""
    with db.session() as session:
        snap = build_snapshot(session, now)
        return apply_plan(session, policy.schedule(snap.view), now, snap.withheld, snap)


def fake_loop(
    db: Database, nodes: Sequence[Node], home: Path, policy: Policy, duration: float
) -> tuple[Reconciler, FakeWorld]:
    """A reconcile loop running ``policy`` over a fake executor of ``nodes`` whose runs last
    ``duration`` seconds of the returned world's clock (stop the loop when done)."""
    world = FakeWorld()
    world.default = world.default.__class__(duration=duration)
    executor = FakeExecutor(Cluster(tuple(nodes)), world)
    return Reconciler(db, executor, load_settings(home=home), policy=policy), world


def one_gpu_loop(
    db: Database, home: Path, now: float, policy: str = "fifo"
) -> tuple[Reconciler, FakeWorld]:
    """A reconcile loop of ``policy`` over a fake executor of one 1-GPU node, with the user
    ``alice`` made and the world's clock (a :class:`ManualClock`) at ``now``."""
    inventory = Cluster.homogeneous(1, 1, "H100")
    with db.session() as s:
        user_and_nodes(s, inventory.nodes, now)
    world = FakeWorld(clock=ManualClock(now))
    executor = FakeExecutor(inventory, world)
    loop = Reconciler(db, executor, load_settings(home=home), policy=make_policy(policy))
    return loop, world


def user_and_nodes(session: Session, nodes: Sequence[Node], now: float) -> User:
    """The user ``alice`` and an inventory of ``nodes`` (fake GPUs), made in ``session``."""
    alice = users.create_user(session, "alice", now=now)
    cluster.replace_inventory(session, list(nodes), fake=True, now=now)
    return alice


def step_report(step: int, gpus: int, nodes: int, batch: int, progress: float) -> dict[str, Any]:
    """One step of a job that scales sublinearly: 10 ms a sample of its micro-batch plus
    20 ms, and an all-reduce of 40 ms within a node, 120 ms across nodes."""
    micro = max(1, batch // gpus)
    sync = 0.0 if gpus == 1 else (0.04 if nodes == 1 else 0.12)
    return {
        "step": step,
        "step_time_s": 0.02 + 0.01 * micro + sync,
        "micro_batch": micro,
        "accumulation": 1,
        "global_batch": micro * gpus,
        "world_size": gpus,
        "sync_time_s": sync,
        "grad_sqr": 1.0,
        "grad_var": 40.0,
        "progress": progress,
    }


def wait_for(predicate: Callable[[], Any], timeout: float = 30.0, every: float = 0.05) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {predicate}")
        time.sleep(every)


@dataclass
class Live:
    """A running server: its URL, admin token, home and (in-process) app."""

    url: str
    token: str
    home: Path
    prepared: Prepared | None = None

    def client(self, token: str | None = None, timeout: float = 30.0) -> httpx.Client:
        """An HTTP client on ``/api/v1`` with ``token`` (default: admin); ``timeout``: longer
        for a request that starts a model trace (a worker importing torch, slow on a loaded
        machine)."""
        return httpx.Client(
            base_url=f"{self.url}/api/v1",
            headers={"Authorization": f"Bearer {token or self.token}"},
            timeout=timeout,
        )

    @property
    def executor(self) -> Executor:
        assert self.prepared is not None
        executor: Executor = self.prepared.app.state.danlu.executor
        return executor


def stop_runs(executor: Executor) -> None:
    """Cancel every run the executor still has (no stray processes after a test)."""
    for handle in executor.adopt():
        with suppress(Exception):
            if executor.poll(handle).running:
                executor.cancel(handle)


@contextmanager
def live_server(
    root: Path,
    *,
    fake_gpus: str = "4x80GiB",
    db_url: str | None = None,
    interval: float = 0.1,
    start_loops: bool = True,
    preempt_grace: float | None = None,
    follow_timeout: float = 3600.0,
    policy: str = "priority",
    policy_options: str | None = None,
    energy_interval: float = 10.0,
) -> Iterator[Live]:
    """A real server (uvicorn, real HTTP, local executor, fake GPUs) in a thread;
    ``policy_options`` as ``DANLU_POLICY_OPTIONS`` (a JSON object)."""
    settings = load_settings(
        home=root / "home",
        fake_gpus=fake_gpus,
        interval=interval,
        database_url=db_url,
        policy=policy,
        policy_options=policy_options,
        energy_interval=energy_interval,
    )
    prepared = prepare(
        settings,
        port=0,
        start_loops=start_loops,
        announce=lambda _text: None,
        preempt_grace=preempt_grace,
        follow_timeout=follow_timeout,
    )
    server = uvicorn.Server(
        uvicorn.Config(prepared.app, log_level="warning", lifespan="on", access_log=False)
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [prepared.sock]}, daemon=True)
    thread.start()
    wait_for(lambda: server.started, 30)
    try:
        yield Live(prepared.url, prepared.admin_token, Path(settings.home), prepared)
    finally:
        server.should_exit = True
        thread.join(30)
        stop_runs(prepared.app.state.danlu.executor)
        prepared.close()


def spec(name: str, code: str, **extra: Any) -> dict[str, Any]:
    """A job spec running ``python -c code``."""
    out: dict[str, Any] = {"name": name, "command": [sys.executable, "-c", code]}
    out.update(extra)
    return out


def submit(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    """POST a job; assert 201."""
    response = client.post("/jobs", json=body)
    assert response.status_code == 201, response.text
    job: dict[str, Any] = response.json()
    return job


def get_job(client: httpx.Client, job_id: str) -> dict[str, Any]:
    response = client.get(f"/jobs/{job_id}")
    assert response.status_code == 200, response.text
    job: dict[str, Any] = response.json()
    return job


def wait_state(
    client: httpx.Client, job_id: str, states: set[str] | str, timeout: float = 30.0
) -> dict[str, Any]:
    """Wait until the job is in one of ``states``."""
    wanted = {states} if isinstance(states, str) else states

    def check() -> dict[str, Any] | None:
        job = get_job(client, job_id)
        return job if job["state"] in wanted else None

    result: dict[str, Any] = wait_for(check, timeout, 0.1)
    return result


def replayed_state(events: list[dict[str, Any]]) -> str | None:
    """Replay a job's events through the transition table; the state they lead to."""
    rows = [SimpleNamespace(**e) for e in events]
    final = replay(rows)  # type: ignore[arg-type]
    return None if final is None else final.value


# -- danlu server as a subprocess ---------------------------------------------------------

SERVER_MAIN = (
    "import sys, typer\n"
    "from danlu.cli import server\n"
    "app = typer.Typer()\n"
    "server.register(app)\n"
    "app(sys.argv[1:])\n"
)


@contextmanager
def server_process(
    home: Path, fake_gpus: str, env: dict[str, str] | None = None
) -> Iterator[ServerProcess]:
    """A :class:`ServerProcess` (not started), stopped after the block, and every run its
    local executor left under ``home`` cancelled (a crash test leaves runs behind)."""
    from danlu.devices import fake_inventory
    from danlu.executors.local import LocalExecutor

    proc = ServerProcess(home, fake_gpus, env=env)
    try:
        yield proc
    finally:
        proc.stop()
        stop_runs(LocalExecutor(fake_inventory(fake_gpus).cluster(), home / "executor"))


class ServerProcess:
    """``danlu server --home HOME --port 0 --fake-gpus ...`` in a subprocess."""

    def __init__(self, home: Path, fake_gpus: str, env: dict[str, str] | None = None) -> None:
        self.home = home
        self.fake_gpus = fake_gpus
        self.env = {**os.environ, "PYTHONPATH": str(SRC), **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = home.parent / "server.log"

    def start(self, timeout: float = 30.0) -> str:
        """Start the server and wait for a fresh ``server.json``; return the URL."""
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "server.json").unlink(missing_ok=True)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    SERVER_MAIN,
                    "server",
                    "--home",
                    str(self.home),
                    "--port",
                    "0",
                    "--fake-gpus",
                    self.fake_gpus,
                ],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        proc = self.proc

        def ready() -> str | None:
            if proc.poll() is not None:
                raise AssertionError(f"server exited with {proc.returncode}: {self.tail()}")
            path = self.home / "server.json"
            if not path.exists():
                return None
            info = json.loads(path.read_text())
            if info["pid"] != proc.pid:
                return None
            with suppress(httpx.HTTPError):
                if httpx.get(f"{info['url']}/api/v1/health", timeout=2).status_code == 200:
                    return str(info["url"])
            return None

        url: str = wait_for(ready, timeout, 0.05)
        self.url = url
        return url

    def kill9(self) -> None:
        """SIGKILL the server process only (its jobs run in their own sessions)."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        """SIGTERM the server (graceful) and wait."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def tail(self, n: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    @property
    def token(self) -> str:
        return (self.home / "admin.token").read_text().strip()


class PgError(Exception):
    """A driver error carrying a PostgreSQL SQLSTATE, as psycopg's do (``.sqlstate``)."""

    def __init__(self, sqlstate: str) -> None:
        super().__init__(f"sqlstate {sqlstate}")
        self.sqlstate = sqlstate


def one_gpu(index: int) -> Allocation:
    """GPU ``index`` of node 0, whole (80 GiB)."""
    return Allocation((GpuShare(0, index, 1000, 80 * GiB),))


@dataclass
class ScriptedPolicy:
    """Plays the given plans, one a round, then plans nothing."""

    plans: list[Plan]
    name: str = "scripted"
    views: list[ClusterView] = field(default_factory=list)

    def schedule(self, view: ClusterView) -> Plan:
        self.views.append(view)
        return self.plans.pop(0) if self.plans else Plan()


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that writes no access log to stderr."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


def serve_locally(handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    """``handler`` served on a free loopback port from a daemon thread, each request in a
    thread of its own; ``server.shutdown()`` and ``server.server_close()`` stop it."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
