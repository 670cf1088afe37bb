"""Where the control plane listens: the checks of ``--host`` and ``--port`` made before
anything is made, the listening socket (:func:`bind`; for a home's ``--port 0``, the port its
jobs were told before: :func:`listen_for_home`), and the name the jobs and the CLI reach it by
(:func:`advertised_host`)."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable

from danlu.core.errors import ConfigError
from danlu.server.home_port import JobsAddress, ListenError, port_to_bind

LISTEN_BACKLOG = 2048
"""Connections the kernel queues before the server accepts them (uvicorn's default)."""


BIND_ERRORS = (OSError, OverflowError, UnicodeError, TypeError, ValueError)
"""What ``socket.bind`` raises for an address it cannot use: a name that does not resolve
(``OSError``), a port past 65535 (``OverflowError``), and a name that cannot be encoded as a
host name (a label over 63 characters, a character no host name has: ``UnicodeError``, or
``TypeError: encoding of hostname failed``; a NUL: ``ValueError`` or ``TypeError``)."""


def _bind_failure(exc: BaseException) -> str:
    """Why ``socket.bind`` refused an address (one of :data:`BIND_ERRORS`), in words."""
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    if isinstance(exc, OverflowError):
        return str(exc)
    return "it is not a valid host name (dot-separated labels of 1 to 63 characters each)"


def check_port(port: int) -> None:
    """Refuse a ``--port`` outside 0..65535 (0: any free port) with a :class:`ConfigError`."""
    if isinstance(port, bool) or not 0 <= port <= 65535:
        raise ConfigError(f"--port (DANLU_PORT) must be 0..65535 (0: any free port), got {port}")


def check_listen_address(host: str) -> None:
    """Refuse a ``--host`` that is not an address of this machine (``nosuch.invalid``,
    another machine's, a name that is no host name) with a :class:`ConfigError` naming the
    flag and the fix, before anything is made: a socket bound to it on any free port and
    closed at once (no file, no port kept). :func:`bind` binds the port itself later."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((host, 0))
    except BIND_ERRORS as exc:
        raise ConfigError(
            f"--host {host!r} is not an address this machine can listen on: "
            f"{_bind_failure(exc)}; give 127.0.0.1 (the default), 0.0.0.0 for every address, "
            "or one of this machine's"
        ) from None


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: a free one), which uvicorn serves.
    It listens at once: with ``SO_REUSEADDR`` (a restart need not wait out the old
    server's connections) a port only bound by another server could be bound again, so
    a second server on a port would pass this check and fail later, in uvicorn. An address
    it cannot listen on is a :class:`~danlu.server.home_port.ListenError`."""
    check_port(port)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(LISTEN_BACKLOG)
    except BIND_ERRORS as exc:
        sock.close()
        reason = _bind_failure(exc)
        raise ListenError(
            f"cannot listen on --host {host} --port {port}: {reason}; pick an address of this "
            "machine and a free port (--port 0 picks one)",
            reason,
        ) from None
    sock.set_inheritable(False)
    return sock


def listen_for_home(
    host: str, wanted: int, recorded: JobsAddress | None
) -> tuple[socket.socket, str | None]:
    """:func:`bind` for a plane asked for ``--port wanted`` on a home whose plane gave its
    jobs the address ``recorded``: for ``--port 0``, on that address's port again
    (:func:`~danlu.server.home_port.port_to_bind`), or on any free port where that one
    cannot be bound (taken). The socket, and why the recorded port could not be bound
    (None: it was, or was not tried)."""
    port = port_to_bind(wanted, recorded)
    if port == wanted:
        return bind(host, wanted), None
    try:
        return bind(host, port), None
    except ListenError as exc:
        return bind(host, 0), exc.reason


def _resolves(name: str) -> bool:
    """Whether ``name`` resolves to an address here."""
    try:
        return bool(socket.getaddrinfo(name, None, type=socket.SOCK_STREAM))
    except (OSError, UnicodeError):
        return False


_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})
"""Names a misconfigured host gives as its FQDN (``/etc/hosts`` maps its name to
``127.0.0.1 localhost``) that no other host reaches it by."""


def advertised_host(host: str, announce: Callable[[str], None]) -> str:
    """The name jobs (``DANLU_API_URL``), the CLI (``server.json``) and the banner reach a
    server listening on ``host`` by: ``host`` itself, or for a wildcard address (``0.0.0.0``,
    ``::``) this host's name (its FQDN, else its host name; never ``localhost``) where it
    resolves, else the loopback, which only this host reaches (said through ``announce``).
    A name that resolves here to a loopback address (Debian's ``127.0.1.1``) is kept: the
    other hosts resolve it through their DNS."""
    try:
        wildcard = ipaddress.ip_address(host).is_unspecified
    except ValueError:  # a name, not an address
        return host
    if not wildcard:
        return host
    names = dict.fromkeys(
        name
        for name in (socket.getfqdn(), socket.gethostname())
        if name and name.lower() not in _LOOPBACK_NAMES
    )
    for name in names:
        if _resolves(name):
            return name
    loopback = "::1" if ":" in host else "127.0.0.1"
    announce(
        f"danlu: listening on every address (--host {host}), but this host's name "
        f"{next(iter(names), '')!r} does not resolve; jobs are told to reach the control plane "
        f"on {loopback}, which only this host reaches: give --host an address of this machine "
        "or make its name resolve"
    )
    return loopback
