"""API load: 10,000 job submissions from 32 concurrent clients against ``danlu server``, on
SQLite and then on PostgreSQL; prints jobs/s and p50/p99 latency per backend and checks that
all submissions are persisted (counted through the API).

    PYTHONPATH=src python benchmarks/api_load.py [--jobs 10000] [--clients 32]
        [--backends sqlite,postgresql]

The server runs as a subprocess (``danlu server``) configured by ``DANLU_*`` variables, with a
fake 4 x 80 GiB inventory and the reconcile loop effectively off (``DANLU_INTERVAL=86400``), so
the jobs stay PENDING and the figures measure the API and the store, not the executor.
PostgreSQL is Debian's, started in a temporary directory with the helpers of
``tests/server/conftest.py`` (skipped when ``initdb`` is not installed). Nothing is asserted on
time; the exit status is 1 only when a submission failed or was not persisted.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from danlu.client import Client  # noqa: E402
from danlu.core.errors import DanluError  # noqa: E402

# `danlu server`, registering the server commands if the main app does not have them yet.
LAUNCH = """\
import sys
from danlu.cli.main import app
names = {c.name or (c.callback.__name__ if c.callback else '') for c in app.registered_commands}
if 'server' not in names:
    try:
        from danlu.cli import server as server_cli
    except ImportError:
        from danlu.config import load_settings
        from danlu.server.main import serve
        serve(load_settings())
        raise SystemExit(0)
    server_cli.register(app)
app(['server', *sys.argv[1:]])
"""


@dataclass
class Result:
    backend: str
    jobs: int
    errors: int
    seconds: float
    latencies: list[float]
    persisted: int
    first_error: str
    server_errors: str = ""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(home: Path, database_url: str | None) -> tuple[subprocess.Popen[bytes], Path]:
    """``danlu server`` on a free port, jobs left pending; returns the process and its log."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DANLU_")}
    env |= {
        "DANLU_HOME": str(home),
        "DANLU_FAKE_GPUS": "4x80GiB",
        "DANLU_INTERVAL": "86400",
        "DANLU_PORT": str(free_port()),
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH")) if p),
    }
    if database_url:
        env["DANLU_DATABASE_URL"] = database_url
    log = home.parent / f"{home.name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", LAUNCH],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    deadline = time.monotonic() + 60
    while not ((home / "server.json").exists() and (home / "admin.token").exists()):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_server(proc)
            raise RuntimeError(f"danlu server did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.1)
    return proc, log


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        if proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(15)


def spec(i: int) -> dict[str, Any]:
    return {
        "name": f"load-{i:05d}",
        "command": ["python", "-c", "pass"],
        "resources": {"gpus": 1 + (i % 7 == 0), "gpu_memory": f"{10 + 10 * (i % 3)}GiB"},
        "priority": i % 4,
    }


def load(home: Path, jobs: int, clients: int) -> tuple[float, list[float], int, str, set[str]]:
    """Submit ``jobs`` specs from ``clients`` threads; (seconds, latencies, errors, first
    error, ids)."""
    latencies: list[list[float]] = [[] for _ in range(clients)]
    ids: list[set[str]] = [set() for _ in range(clients)]
    errors = [0] * clients
    first_error: list[str] = []
    start = threading.Barrier(clients + 1)

    def worker(k: int) -> None:
        with Client.from_home(home, timeout=60) as client:
            client.health()  # open the connection before the clock starts
            start.wait()
            for i in range(k, jobs, clients):
                t0 = time.perf_counter()
                try:
                    ids[k].add(client.submit(spec(i))["id"])
                except DanluError as exc:
                    errors[k] += 1
                    if not first_error:
                        first_error.append(str(exc))
                latencies[k].append(time.perf_counter() - t0)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - t0
    all_ids = set().union(*ids)
    flat = [x for chunk in latencies for x in chunk]
    return seconds, flat, sum(errors), (first_error or [""])[0], all_ids


def count_persisted(home: Path, submitted: set[str]) -> int:
    """How many of ``submitted`` the API lists (all pages, any state)."""
    with Client.from_home(home, timeout=120) as client:
        listed = {job["id"] for job in client.iter_jobs()}
    return len(listed & submitted)


def run_backend(backend: str, jobs: int, clients: int, root: Path, url: str | None) -> Result:
    home = root / backend
    proc, log = start_server(home, url)
    try:
        seconds, latencies, errors, first, ids = load(home, jobs, clients)
        persisted = count_persisted(home, ids)
    finally:
        stop_server(proc)
    lines = log.read_text(errors="replace").splitlines()
    server_errors = "\n".join(ln for ln in lines if "Error" in ln or "error" in ln)[-2000:]
    return Result(backend, jobs, errors, seconds, latencies, persisted, first, server_errors)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def postgres_helpers() -> Any | None:
    """``tests/server/conftest.py`` as a module (PgServer, _pg_bin), or None."""
    path = ROOT / "tests" / "server" / "conftest.py"
    spec_ = importlib.util.spec_from_file_location("danlu_server_test_conftest", path)
    if spec_ is None or spec_.loader is None:
        return None
    module = importlib.util.module_from_spec(spec_)
    try:
        spec_.loader.exec_module(module)
    except ImportError as exc:
        print(f"postgresql: cannot load the helpers of {path}: {exc}")
        return None
    return module


def report(r: Result) -> None:
    rate = (r.jobs - r.errors) / r.seconds if r.seconds > 0 else float("nan")
    p50 = percentile(r.latencies, 50) * 1000
    p99 = percentile(r.latencies, 99) * 1000
    ok = "yes" if r.persisted == r.jobs and r.errors == 0 else "NO"
    print(
        f"{r.backend:<11} {r.jobs:>6} {r.seconds:>8.1f} {rate:>8.0f} {p50:>8.1f} {p99:>8.1f} "
        f"{r.errors:>6} {r.persisted:>9}  {ok}"
    )
    if r.first_error:
        print(f"  first error: {r.first_error}")
    if r.errors and r.server_errors:
        print(f"  server log (errors):\n{r.server_errors}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--backends", default="sqlite,postgresql")
    args = ap.parse_args()
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    print(
        f"api_load: {args.jobs} submissions (POST /api/v1/jobs) from {args.clients} concurrent "
        "clients (threads, one httpx connection each)\n"
        "server: `danlu server`, fake 4x80GiB inventory, reconcile loop effectively off "
        "(DANLU_INTERVAL=86400): jobs stay PENDING, so this measures the API and the store"
    )
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="danlu-load-") as tmp:
        root = Path(tmp)
        for backend in backends:
            if backend == "sqlite":
                results.append(run_backend("sqlite", args.jobs, args.clients, root, None))
            elif backend == "postgresql":
                helpers = postgres_helpers()
                bindir = helpers._pg_bin() if helpers else None
                if helpers is None or bindir is None:
                    print("postgresql: skipped (apt-get install -y postgresql)")
                    continue
                pg = helpers.PgServer(bindir)
                pg.start()
                try:
                    url = pg.url("postgres")
                    results.append(run_backend("postgresql", args.jobs, args.clients, root, url))
                finally:
                    pg.stop()
            else:
                print(f"unknown backend {backend!r}; use sqlite and/or postgresql")
                return 2
    print(
        f"\n{'backend':<11} {'jobs':>6} {'wall s':>8} {'jobs/s':>8} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'errors':>6} {'persisted':>9}  all persisted"
    )
    for r in results:
        report(r)
    return 0 if all(r.errors == 0 and r.persisted == r.jobs for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
