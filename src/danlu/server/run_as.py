"""Running each job as its user's OS account (``DANLU_RUN_AS=user``).

The control plane runs as root and the local executor starts every job as its danlu user's OS
account: the one an admin set (``danlu user set NAME --os-user ACCOUNT``), else the one named
like the user (:mod:`danlu.executors.accounts`; never root). A job then reaches
its own checkpoint directory and nothing else of the control plane's home:

- the home is ``0711`` (entered, not listed) and everything in it but ``checkpoints`` loses
  its group and other permission bits (the admin token, the database, the logs, the run
  records); the process's umask is 077, so what it writes later is its own alone;
- ``checkpoints`` is ``0711`` too, and each job's directory there (``DANLU_CHECKPOINT_DIR``,
  when the spec names none) belongs to the job's account, ``0700``.

A job's ``DANLU_TOKEN`` is in its processes' environment, which only their account and root
can read (``/proc/PID/environ``): the jobs of other users cannot.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from danlu.config import Settings
from danlu.core.errors import ConfigError, SpecError
from danlu.executors.accounts import Account, os_account
from danlu.executors.errors import InvalidLaunchError
from danlu.server.errors import AdmissionError

CHECKPOINTS = "checkpoints"
"""The home's directory of the checkpoint directories danlu makes for jobs."""


def check_run_as(settings: Settings) -> None:
    """Raise :class:`ConfigError` when ``DANLU_RUN_AS=user`` cannot be honoured here: it needs
    the local executor and a control plane run as root."""
    if settings.run_as != "user":
        return
    if settings.executor != "local":
        raise ConfigError(
            f"DANLU_RUN_AS=user applies to the local executor; with --executor "
            f"{settings.executor} the jobs run as the control plane's user: leave "
            "DANLU_RUN_AS unset, or use --executor local"
        )
    if os.geteuid() != 0:
        raise ConfigError(
            "DANLU_RUN_AS=user starts each job as its user's OS account, which only a control "
            "plane run as root can do: run it as root, or leave DANLU_RUN_AS unset (jobs then "
            "run as this user)"
        )


def _refusal(settings: Settings, account: str) -> str | None:
    """Why no job could run as OS account ``account`` with ``DANLU_RUN_AS=user`` (one this
    host lacks, root's, or root's equal: :func:`~danlu.executors.accounts.os_account`);
    None when one could, or when jobs run as the control plane's user."""
    if settings.run_as != "user":
        return None
    try:
        os_account(account)
    except InvalidLaunchError as exc:
        return exc.message
    return None


def check_account(settings: Settings, account: str) -> None:
    """Raise :class:`AdmissionError` (field ``user``) when a job would run as OS account
    ``account`` (its user's, :attr:`~danlu.server.db.models.User.account`) that this host
    lacks, or root's (``DANLU_RUN_AS=user``): refused at submission rather than failed at
    launch."""
    refusal = _refusal(settings, account)
    if refusal is not None:
        raise AdmissionError("user", refusal)


def check_os_user(settings: Settings, os_user: str | None) -> None:
    """Raise :class:`SpecError` (field ``os_user``) when an admin names as a user's
    ``os_user`` an account no job could run as (:func:`_refusal`): said as it is set, not
    first at that user's next submission (:func:`check_account`). None (the account named
    like the user) is checked at submission only: a user need not run jobs."""
    refusal = None if os_user is None else _refusal(settings, os_user)
    if refusal is not None:
        raise SpecError("os_user", refusal)


def close_home(home: Path) -> None:
    """Make ``home`` enterable but private for jobs run as other accounts (see the module
    docstring); sets this process's umask to 077. Raises :class:`ConfigError` when a
    directory above ``home`` cannot be entered by other accounts (the jobs could not reach
    their checkpoint directories)."""
    for parent in home.resolve().parents:
        if not parent.stat().st_mode & stat.S_IXOTH:
            raise ConfigError(
                f"--home {str(home)!r} (DANLU_HOME): other accounts cannot enter {parent}, "
                "so jobs run as their users' accounts (DANLU_RUN_AS=user) could not reach "
                f"their checkpoint directories; use a home such as /var/lib/danlu, or "
                f"chmod o+x {parent}"
            )
    os.umask(0o077)
    home.chmod(0o711)
    for entry in home.iterdir():
        if entry.name == CHECKPOINTS or entry.is_symlink():
            continue
        entry.chmod(stat.S_IMODE(entry.stat().st_mode) & ~0o077)
    checkpoints = home / CHECKPOINTS
    checkpoints.mkdir(exist_ok=True)
    checkpoints.chmod(0o711)


def give_to(path: Path, account: Account) -> None:
    """Make ``path`` (a job's own checkpoint directory) ``account``'s, ``0700``."""
    os.chown(path, account.uid, account.gid)
    path.chmod(0o700)
