"""The Ray executor joining an address where something takes TCP connections but no
Ray GCS answers (another service on that port, or a head whose GCS hangs) fails in seconds,
with the address and the fix, instead of blocking in ``ray.init`` for many minutes (Ray
retries joining, and the control plane's API is not up meanwhile). No Ray cluster is needed:
the listener is a plain socket server in the test."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from control_plane import CLI, server_env

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]

BOUND_S = 60.0
"""Seconds the start-up may take before the test counts it as hanging: the probe's 10 s and
Ray's import with room to spare on a loaded machine (before the fix it took minutes)."""

HTTP_REPLY = b"HTTP/1.0 400 Bad request version\r\nConnection: close\r\n\r\n"
"""What ``python3 -m http.server`` answers to anything but HTTP/1 (as a GCS client speaks)."""

DRIVER = """
import sys
from danlu.executors import ExecutorUnavailableError
from danlu.executors.ray_executor import RayExecutor
try:
    RayExecutor(sys.argv[2], address=sys.argv[1], namespace="danlu-probe")
except ExecutorUnavailableError as exc:
    print("REFUSED", exc, flush=True)
    sys.exit(3)
print("JOINED", flush=True)
"""


@pytest.fixture(autouse=True)
def _ray_installed() -> None:
    """Skipped without Ray (the ``ray`` extra), as the other Ray tests are, unless
    ``DANLU_TEST_REQUIRE_RAY`` says it must be there."""
    if importlib.util.find_spec("ray") is None:
        if os.environ.get("DANLU_TEST_REQUIRE_RAY"):
            pytest.fail("Ray is required: pip install -e '.[ray]'")
        pytest.skip("Ray is not installed (pip install -e '.[ray]')")


@contextlib.contextmanager
def listener(reply: bytes | None) -> Iterator[int]:
    """A TCP server on a free local port (yielded) that is no Ray GCS: it answers each
    connection with ``reply`` and closes it, or, with None, holds it without a word (as a head
    whose GCS is stopped: the kernel still accepts)."""
    server = socket.create_server(("0.0.0.0", 0))  # Ray joins 127.0.0.1 by the host's address
    server.settimeout(0.2)
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            if reply is None:
                held.append(conn)
                continue
            with conn, contextlib.suppress(OSError):
                conn.settimeout(2.0)
                conn.recv(4096)
                conn.sendall(reply)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield int(server.getsockname()[1])
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        server.close()


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            argv, env=server_env({}), capture_output=True, text=True, timeout=BOUND_S, check=False
        )
    except subprocess.TimeoutExpired as exc:
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
        pytest.fail(f"still joining after {BOUND_S:g} s: {err[-2000:]}")


def test_the_executor_refuses_a_port_that_takes_connections_but_no_gcs_answers(
    tmp_path: Path,
) -> None:
    with listener(None) as port:
        done = _run([sys.executable, "-c", DRIVER, f"127.0.0.1:{port}", str(tmp_path / "ex")])
    assert done.returncode == 3, done.stdout + done.stderr
    assert f"nothing answers as a Ray GCS at 127.0.0.1:{port}" in done.stdout
    assert "within 10 s" in done.stdout and "ray start --head" in done.stdout


def test_the_server_refuses_another_service_s_port_with_the_address_and_the_fix(
    tmp_path: Path,
) -> None:
    with listener(HTTP_REPLY) as port:
        argv = [*CLI, "server", "--home", str(tmp_path / "home"), "--port", "0"]
        done = _run([*argv, "--executor", "ray", "--ray-address", f"127.0.0.1:{port}"])
    assert done.returncode == 2, done.stderr
    assert f"nothing answers as a Ray GCS at 127.0.0.1:{port}" in done.stderr, done.stderr
    assert "--ray-address" in done.stderr and "Traceback" not in done.stderr
