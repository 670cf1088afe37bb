"""The OS accounts jobs run as when the control plane starts each job as its user
(``DANLU_RUN_AS=user``, the local executor under a control plane run as root).

A danlu user's jobs run as the OS account of the same name on the host, with that account's
groups, and never as root: a job then reads and writes what its user may, and neither another
user's jobs (their ``/proc/PID/environ``, with their ``DANLU_TOKEN``) nor the control plane's
home (its admin token, its database).
"""

from __future__ import annotations

import grp
import os
import pwd
from dataclasses import dataclass

from danlu.executors.errors import InvalidLaunchError

ROOT_EQUIVALENT_GROUPS = frozenset({"docker", "lxd", "incus-admin", "disk"})
"""Groups whose members can make themselves root (``docker``, ``lxd``, ``incus-admin``: the
daemon's socket starts a container of the host's root; ``disk``: the raw disks): no job
runs as an account of one of them, nor of the root group (gid 0), as none runs as root."""


@dataclass(frozen=True, slots=True)
class Account:
    """An OS account a job may run as."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    """Its supplementary groups (from the group database), its primary group included."""
    home: str


def os_account(name: str) -> Account:
    """The OS account ``name`` of this host. Raises :class:`InvalidLaunchError` (field
    ``user``) when there is none, or when it is root's (uid 0), or root's equal (in the
    root group or one of :data:`ROOT_EQUIVALENT_GROUPS`): no job runs as root."""
    try:
        entry = pwd.getpwnam(name)
    except (KeyError, ValueError):  # ValueError: a name with a NUL
        raise InvalidLaunchError(
            "user",
            f"no OS account named {name!r} on this host, and jobs run as their user's "
            f"account (DANLU_RUN_AS=user); create it (useradd {name}), give the danlu user an "
            "account that exists (danlu user set USER --os-user ACCOUNT), or run jobs as the "
            "control plane's user (DANLU_RUN_AS=server)",
        ) from None
    if entry.pw_uid == 0:
        raise InvalidLaunchError(
            "user", f"the OS account {name!r} is root's (uid 0), and no job runs as root"
        )
    groups = tuple(sorted(set(os.getgrouplist(entry.pw_name, entry.pw_gid))))
    privileged = _root_equivalent(groups)
    if privileged:
        raise InvalidLaunchError(
            "user",
            f"the OS account {name!r} is in the group(s) {', '.join(privileged)}, whose "
            "members can make themselves root, and no job runs as root: take it out of them "
            f"(gpasswd -d {name} GROUP; a primary group: usermod -g GROUP {name}), or give "
            "the danlu user another account (danlu user set USER --os-user ACCOUNT)",
        )
    return Account(entry.pw_name, entry.pw_uid, entry.pw_gid, groups, entry.pw_dir)


def _root_equivalent(groups: tuple[int, ...]) -> list[str]:
    """The groups of ``groups`` (ids) that make their members root's equals: the root group
    (gid 0) and :data:`ROOT_EQUIVALENT_GROUPS`, by name (``gid N`` for gid 0 without one)."""
    out = []
    for gid in groups:
        try:
            name = grp.getgrgid(gid).gr_name
        except KeyError:  # a gid without a group entry: no name to match
            name = None
        if gid == 0 or name in ROOT_EQUIVALENT_GROUPS:
            out.append(f"{name} (gid {gid})" if name else f"gid {gid}")
    return out
