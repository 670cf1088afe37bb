"""How the ``scheduler`` lease names a plane's process and home on machines of one host name
(containers or VMs cloned from one image): a process is judged gone only on its own machine
(the kernel's boot id and the pid namespace), and a local executor's plane's home names its
machine, so that a plane of another machine of the same name and home path is not handed the
running jobs of the first (it would launch them again). The names an older danlu wrote (no
machine) are read as before. The identity functions are monkeypatched."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from helpers import user_and_nodes

from danlu.config import load_settings
from danlu.core.cluster import Node, gpu_type
from danlu.core.state import JobState
from danlu.core.units import GiB
from danlu.executors import procs
from danlu.server import plane_owner
from danlu.server.db import Database, Lease, upgrade_database
from danlu.server.plane_lease import LEASE, DatabaseInUse, take_scheduler_lease
from danlu.server.services import jobs, locks

NOW = 1_000_000.0
SHARE = [{"node": "localhost", "gpu": 0, "milli": 1000, "memory": 80 * GiB}]
"""The running job's GPU."""


def _on_host(monkeypatch: pytest.MonkeyPatch, boot: str) -> None:
    """Run as a machine of this host name whose kernel booted as ``boot``."""
    monkeypatch.setattr(procs, "boot_id", lambda: boot)


def test_a_process_is_judged_gone_only_on_its_own_machine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another container of this kernel (same boot id, another pid namespace) is not judged by
    this one's pids; this machine's process whose pid is not alive is gone; an older danlu's
    owner (``host:pid:start``, no machine) is judged by the host name, as before."""
    _on_host(monkeypatch, "one-kernel")
    monkeypatch.setattr(plane_owner, "pid_namespace", lambda: "4026532001")
    container_a = plane_owner.owner_id()
    monkeypatch.setattr(plane_owner, "pid_namespace", lambda: "4026532002")
    here = plane_owner.owner_id()
    older = f"{socket.gethostname()}:{plane_owner.owner_parts(here)[2]}:1"
    monkeypatch.setattr(procs, "proc_start_time", lambda _pid: None)  # no such process here
    assert not plane_owner.dead_here(container_a)
    assert plane_owner.dead_here(here)
    assert plane_owner.dead_here(older)
    assert plane_owner.describe_owner(older) == plane_owner.describe_owner(here)
    assert plane_owner.OTHER_MACHINE in plane_owner.describe_owner(container_a)
    assert len(container_a) <= 100 - 64 + len(socket.gethostname())  # Lease.lock_owner


def test_another_machine_of_this_host_name_is_another_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A's plane stopped (its lease given back) leaving a job running on A: B's plane of the
    same home path and host name is refused, not handed A's running jobs (it would launch
    them again); a home an older danlu recorded (no machine) is read as before."""
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    upgrade_database(url)
    settings = load_settings(home=tmp_path / "home", database_url=url)
    monkeypatch.setattr(plane_owner, "machine_identity", lambda: "a" * 12)
    home_a = plane_owner.plane_home(settings)
    monkeypatch.setattr(plane_owner, "machine_identity", lambda: "b" * 12)
    home_b = plane_owner.plane_home(settings)
    older = f"{Path(settings.home).resolve()} on {socket.gethostname()} (local executor)"
    assert home_a != home_b
    assert plane_owner.same_plane(older, home_b) and plane_owner.same_plane(home_b, home_b)
    db = Database(url)
    try:
        with db.session() as s:
            alice = user_and_nodes(s, [Node("localhost", 1, gpu_type("H100"))], NOW)
            job = jobs.submit(s, {"name": "j", "command": ["t"], "resources": {"gpus": 1}}, alice)
            jobs.change_state(s, job, JobState.RUNNING, "scheduled", allocation=SHARE)
            locks.ensure_lease(s, LEASE)
            s.get(Lease, LEASE).home = home_a  # type: ignore[union-attr]
            s.commit()
        with pytest.raises(DatabaseInUse, match="a" * 12):
            take_scheduler_lease(db, settings, clock=lambda: NOW, sleep=lambda _s: None)
        with db.session() as s:
            s.get(Lease, LEASE).home = older  # type: ignore[union-attr]
            s.commit()
        take_scheduler_lease(db, settings, clock=lambda: NOW, sleep=lambda _s: None)
    finally:
        db.dispose()
