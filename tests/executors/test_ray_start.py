"""``danlu server --executor ray`` with a Ray head that is not there: the start-up fails at once
with the address and the fix (Ray itself retries joining for many minutes)."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

from control_plane import CLI, server_env


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_ray_head_that_does_not_answer_fails_the_start_with_its_address(
    tmp_path: Path,
) -> None:
    port = _closed_port()
    argv = [*CLI, "server", "--home", str(tmp_path / "home"), "--port", "0"]
    argv += ["--executor", "ray", "--ray-address", f"127.0.0.1:{port}"]
    done = subprocess.run(
        argv, env=server_env({}), capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 2, done.stderr
    assert f":{port}" in done.stderr and "ray start --head" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
