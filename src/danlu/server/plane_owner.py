"""How the ``scheduler`` lease names the control plane that holds it: its process
(:func:`owner_id`, judged by :func:`dead_here`) and its home (:func:`plane_home`, compared by
:func:`same_plane`).

A host name alone does not tell machines apart: containers and VMs cloned from one image often
share one. A lease's owner named by its host name and pid read, on another machine of the same
name where that pid was not alive, as "a process of this host that is gone", and a live plane's
lease was taken over at once (two planes scheduling one database). So the owner names the
machine its pid belongs to as well (:func:`boot_identity`: this boot of the kernel and the pid
namespace, within which alone a pid names one process), and the home of a local executor's
plane names its machine across reboots (:func:`machine_identity`). The names an older danlu
wrote (``host:pid:start``; ``HOME on HOST (local executor)``), which name no machine, are
judged by the host name alone, as they were.

A process of another boot of this machine (it rebooted since) or of another pid namespace (its
container restarted) cannot be judged by this machine's pids either, though it is surely gone
when it was the plane of this very home: each plane that takes the lease writes its owner into
its home's lock file (:func:`sign_home_lock`), whose ``flock`` it holds for as long as it lives,
so a plane that holds that lock now and finds the lease's holder named there, the lease naming
this home, takes the lease over at once (:func:`gone_from_home`) rather than wait its length
out. A clone has a home of its own, whose lock never named this machine's plane (unless the
home was copied while its plane ran: a copy of a running home is no home to start).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from danlu.config import Settings
from danlu.executors import procs

log = logging.getLogger(__name__)

IDENTITY_CHARS = 12
"""Hex characters of an identity's digest: one in 2^48 for two machines to share one, and short
enough for the owner (a ``String(100)`` column) with a host name of 64 characters."""
MACHINE_ID_FILES = (Path("/etc/machine-id"), Path("/var/lib/dbus/machine-id"))
"""Where a machine's id is (machine-id(5)), the first that holds one."""
MACHINE_ID_KEY = b"danlu control plane home"
"""What a machine's id is hashed with (machine-id(5): the id itself is not to be shown)."""
OTHER_MACHINE = "another machine, container or boot of that host name"
"""What a lease's owner on a machine of this host's name but not this one is, in messages."""


def pid_namespace() -> str:
    """This process's pid namespace (its inode: another in each container of one kernel), or
    ``unknown`` where it cannot be read."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "unknown"


def boot_identity() -> str | None:
    """This process's machine as its pids see it: a digest of the kernel's boot id
    (:func:`~danlu.executors.procs.boot_id`: new at every boot, another on each machine,
    cloned ones too) and this process's pid namespace (:func:`pid_namespace`). Only where it
    is the same does a pid name the same process, and a pid that is not alive mean that the
    process is gone (:func:`dead_here`). None where the boot id cannot be read."""
    boot = procs.boot_id()
    if boot is None:
        return None
    return hashlib.sha256(f"{boot}/{pid_namespace()}".encode()).hexdigest()[:IDENTITY_CHARS]


def machine_identity() -> str | None:
    """This machine across its reboots: its machine id (:data:`MACHINE_ID_FILES`), hashed with
    :data:`MACHINE_ID_KEY`; None where it has none (a container without one)."""
    for path in MACHINE_ID_FILES:
        try:
            text = path.read_text(encoding="ascii").strip()
        except (OSError, UnicodeError):
            continue
        if len(text) == 32 and all(c in "0123456789abcdef" for c in text):
            digest = hmac.new(text.encode(), MACHINE_ID_KEY, hashlib.sha256).hexdigest()
            return digest[:IDENTITY_CHARS]
    return None


def owner_id() -> str:
    """How the lease (and the job locks the plane takes) name this process:
    ``HOST/IDENTITY:PID:START`` (:func:`boot_identity`; ``HOST:PID:START`` where there is
    none). A danlu before this one reads the host as ``HOST/IDENTITY``, never its own name:
    it takes no such owner for a process of its own host that is gone."""
    pid = os.getpid()
    identity = boot_identity()
    host = socket.gethostname() if identity is None else f"{socket.gethostname()}/{identity}"
    return f"{host}:{pid}:{procs.proc_start_time(pid)}"


def owner_parts(owner: str) -> tuple[str, str | None, str, str]:
    """``owner``'s host name, machine (:func:`boot_identity`; None in an older danlu's
    ``host:pid:start``), pid and start, as text."""
    host, _, rest = owner.partition(":")
    pid, _, start = rest.partition(":")
    name, slash, identity = host.partition("/")
    return name, identity if slash else None, pid, start


def _elsewhere(host: str, identity: str | None) -> bool:
    """Whether an owner on ``host`` (of ``identity``) is a process of another machine of this
    host's name: one whose pids are not this one's."""
    return identity is not None and host == socket.gethostname() and identity != boot_identity()


def describe_owner(owner: str | None) -> str:
    """``owner`` as ``pid PID on HOST``, and, where this host has that name, whether it is
    another machine of it (:data:`OTHER_MACHINE`)."""
    if not owner:
        return "an unnamed process"
    host, identity, pid, _start = owner_parts(owner)
    if not pid:
        return owner
    elsewhere = f" ({OTHER_MACHINE})" if _elsewhere(host, identity) else ""
    return f"pid {pid} on {host}{elsewhere}"


def dead_here(owner: str | None) -> bool:
    """True if ``owner`` (:func:`owner_id`) was a process of this machine that is gone: of
    this host's name and of this machine (:func:`boot_identity`; an older danlu's owner,
    which names none, by the host name alone), its pid not alive. A process of another
    machine of the same name is not judged by this machine's pids."""
    if not owner:
        return False
    host, identity, pid, start = owner_parts(owner)
    if host != socket.gethostname() or not pid.isdigit():
        return False
    if identity is not None and identity != boot_identity():
        return False
    return not procs.alive(int(pid), int(start) if start.isdigit() else None)


def plane_home(settings: Settings) -> str:
    """How the ``scheduler`` lease names a control plane (:attr:`Lease.home`): its home,
    resolved, with this host's name and machine (:func:`machine_identity`, where it has one)
    for the local executor, whose runs are this machine's processes under that home's
    supervisors (a Slurm or Ray plane's runs are the cluster's, their records on the shared
    home, so its host does not matter)."""
    home = Path(settings.home).resolve()
    if settings.executor != "local":
        return f"{home} ({settings.executor} executor)"
    machine = machine_identity()
    on = socket.gethostname() if machine is None else f"{socket.gethostname()}, machine {machine}"
    return f"{home} on {on} (local executor)"


def same_plane(previous: str | None, home: str) -> bool:
    """Whether the lease's recorded home ``previous`` names the plane ``home``
    (:func:`plane_home`): the same, or, written by an older danlu, which named no machine
    (``HOME on HOST (local executor)``), the same home on a host of this name."""
    if previous is None:
        return False
    if previous == home:
        return True
    head, named, tail = home.rpartition(", machine ")
    if not named or not tail.endswith(" (local executor)") or ", machine " in previous:
        return False
    return previous == f"{head} (local executor)"


@dataclass(frozen=True)
class HomeHolder:
    """The control plane that held this plane's home before it, as the home's lock file names
    it (:func:`last_home_holder`): its process (:func:`owner_id`) and the plane the home makes
    (:func:`plane_home`). This plane holds the lock now, which that process held for as long as
    it lived: it is gone."""

    owner: str
    home: str


def last_home_holder(lock: IO[str], settings: Settings) -> HomeHolder | None:
    """The plane that took the ``scheduler`` lease last on the home of ``settings``, whose lock
    file ``lock`` this process holds (:func:`~danlu.server.main.lock_home`): the owner it
    wrote there (:func:`sign_home_lock`); None where none is named, or it cannot be read."""
    try:
        lock.seek(0)
        owner = lock.read(200).strip()
    except (OSError, ValueError) as exc:  # unreadable: judged as none, the lease waited for
        log.debug("the home's lock names no holder: %s", exc)
        return None
    if not owner or any(c.isspace() for c in owner):
        return None
    return HomeHolder(owner, plane_home(settings))


def sign_home_lock(lock: IO[str]) -> None:
    """Write this process (:func:`owner_id`) into its home's lock file ``lock``, which it holds
    (:func:`~danlu.server.main.lock_home`), once it has taken the ``scheduler`` lease: the next
    plane of the home knows the lease's holder for gone when it is named there
    (:func:`gone_from_home`). Written through to the disk, so that a power cut keeps it. One
    that cannot be written is logged: the next plane then waits the lease out."""
    try:
        lock.seek(0)
        lock.truncate()
        lock.write(owner_id() + "\n")
        lock.flush()
        os.fsync(lock.fileno())
    except (OSError, ValueError) as exc:
        log.warning(
            "cannot name this plane in its home's lock file (%s): a plane started on this "
            "home after a reboot will wait for the scheduler lease to lapse",
            exc,
        )


def gone_from_home(owner: str | None, home: str | None, last: HomeHolder | None) -> bool:
    """True if ``owner``, holding the ``scheduler`` lease that names ``home``
    (:attr:`Lease.home`), is ``last``, the plane that held this plane's home before it, and a
    process of this host's name but of another machine identity (:func:`boot_identity`: an
    earlier boot of it, or another pid namespace), whose pid cannot be judged here
    (:func:`dead_here`): it held the home's lock while it lived, and this plane holds it, so it
    is gone (this host rebooted, or its container restarted). A plane of this machine identity
    is judged by its pid alone (:func:`dead_here`); one of another home, or not named in the
    home's lock, is waited for."""
    if last is None or not owner or owner != last.owner or not same_plane(home, last.home):
        return False
    host, identity, pid, _start = owner_parts(owner)
    if host != socket.gethostname() or not pid.isdigit():
        return False
    return identity is not None and identity != boot_identity()
