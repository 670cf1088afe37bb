"""Control planes run as real processes by the tests of one plane per database and of a
lost home taken over: ``danlu up`` or ``danlu server`` on a home and a database URL, waited
for until it serves or is refused, stopped at the test's end whatever happened."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
from helpers import SRC, wait_for

from danlu.server.plane_lease import DATABASE_IN_USE_EXIT

ENV = {**os.environ, "PYTHONPATH": str(SRC)}
PLANE_TIMEOUT = 60.0
"""Seconds a plane may take to serve, or to give up (generous: the test machine is shared,
and a refusal comes after the lease's TTL of 10 s)."""


class Plane:
    """``danlu VERB --home HOME --database-url URL`` (``verb``: ``server``, or ``up``) on one
    fake 80 GiB GPU, in a subprocess of its own session, its output in ``HOME.log``."""

    def __init__(
        self, home: Path, url: str, interval: float, *extra: str, verb: str = "server"
    ) -> None:
        self.home = home
        self.log = home.parent / f"{home.name}.log"
        home.mkdir(parents=True, exist_ok=True)
        (home / "server.json").unlink(missing_ok=True)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    *(sys.executable, "-m", "danlu", verb, "--home", str(home)),
                    *("--port", "0", "--fake-gpus", "1x80GiB", "--database-url", url),
                    *("--interval", str(interval), *extra),
                ],
                env=ENV,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def served(self) -> str:
        """Wait until it serves; its URL."""

        def ready() -> str | None:
            if self.proc.poll() is not None:
                raise AssertionError(f"exited with {self.proc.returncode}: {self.output()}")
            with contextlib.suppress(OSError, ValueError):
                info = json.loads((self.home / "server.json").read_text())
                if info["pid"] == self.proc.pid:
                    return str(info["url"])
            return None

        url: str = wait_for(ready, PLANE_TIMEOUT, 0.05)
        return url

    def refused(self) -> str:
        """Wait until it exits; assert it exited with the status of a database that is
        another control plane's (:data:`~danlu.server.plane_lease.DATABASE_IN_USE_EXIT`)
        without a traceback; its output."""
        try:
            code = self.proc.wait(PLANE_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the plane did not exit: {self.output()}") from None
        said = self.output()
        assert code == DATABASE_IN_USE_EXIT, said
        assert "Traceback" not in said, said
        return said

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def kill9(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


@contextlib.contextmanager
def planes() -> Iterator[list[Plane]]:
    """The planes a test starts, stopped at its end whatever happened."""
    started: list[Plane] = []
    try:
        yield started
    finally:
        for plane in started:
            plane.stop()


def admin_api(home: Path, url: str) -> httpx.Client:
    """A client of the plane at ``url`` with the admin token of ``home``."""
    token = (home / "admin.token").read_text().strip()
    return httpx.Client(
        base_url=f"{url}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=30
    )
