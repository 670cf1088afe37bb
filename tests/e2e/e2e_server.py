"""A real ``danlu up --fake-gpus 4x80GiB`` subprocess for the end-to-end tests (``server``
fixture), and :func:`danlu` to run the CLI in a subprocess (argv lists, never a shell)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from danlu.client import Client

LAUNCHER = Path(__file__).with_name("danlu_launcher.py")


def _server_available() -> bool:
    return all(
        importlib.util.find_spec(name) is not None
        for name in ("danlu.cli.server", "danlu.server.app", "danlu.server.main")
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DANLU_")}
    src = str(Path(__file__).resolve().parents[2] / "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    return env


def danlu(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run the CLI in a subprocess (argv list, no shell)."""
    return subprocess.run(
        [sys.executable, str(LAUNCHER), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_env(),
        check=False,
    )


@dataclass
class Server:
    home: Path
    proc: subprocess.Popen[bytes]
    log: Path

    def client(self) -> Client:
        return Client.from_home(self.home, timeout=10)

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


def _stop(proc: subprocess.Popen[bytes]) -> int:
    for sig, wait in ((signal.SIGINT, 15), (signal.SIGTERM, 10)):
        if proc.poll() is not None:
            break
        proc.send_signal(sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(wait)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    return int(proc.returncode)


@contextlib.contextmanager
def running_server(
    tmp_path: Path, env: dict[str, str] | None = None, fake_gpus: str | None = "4x80GiB"
) -> Iterator[Server]:
    """``danlu up --home tmp_path/home --fake-gpus 4x80GiB`` until the block ends (SIGINT);
    ``env``: extra variables for the server (e.g. ``DANLU_POLICY``); ``fake_gpus`` None: the
    host's GPUs, read through NVML."""
    if not _server_available():
        pytest.skip("danlu up is not built yet (danlu.cli.server / danlu.server.app)")
    home = tmp_path / "home"
    log = tmp_path / "server.log"
    argv = [
        sys.executable,
        str(LAUNCHER),
        "up",
        "--home",
        str(home),
        *(["--fake-gpus", fake_gpus] if fake_gpus is not None else []),
        "--port",
        str(_free_port()),
        "--interval",
        "0.2",
    ]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**_env(), **(env or {})},
            cwd=tmp_path,
            start_new_session=True,
        )
    srv = Server(home, proc, log)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, f"danlu up exited {proc.returncode}:\n{srv.output()}"
            assert time.monotonic() < deadline, f"no server.json after 30 s:\n{srv.output()}"
            if (home / "server.json").exists() and (home / "admin.token").exists():
                with contextlib.suppress(Exception), srv.client() as c:
                    if c.health()["status"] == "ok":
                        break
            time.sleep(0.1)
        yield srv
    finally:
        code = _stop(proc)
    assert code in (0, 130, -signal.SIGINT, -signal.SIGTERM), srv.output()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    """A fresh server for one test."""
    with running_server(tmp_path) as srv:
        yield srv


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server for all the tests of a module."""
    with running_server(tmp_path_factory.mktemp("danlu-up")) as srv:
        yield srv
